
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/src/capi/c_api.cc" "src/CMakeFiles/hora_core.dir/capi/c_api.cc.o" "gcc" "src/CMakeFiles/hora_core.dir/capi/c_api.cc.o.d"
  "/work/main/src/collectives/algorithms.cc" "src/CMakeFiles/hora_core.dir/collectives/algorithms.cc.o" "gcc" "src/CMakeFiles/hora_core.dir/collectives/algorithms.cc.o.d"
  "/work/main/src/collectives/communicator.cc" "src/CMakeFiles/hora_core.dir/collectives/communicator.cc.o" "gcc" "src/CMakeFiles/hora_core.dir/collectives/communicator.cc.o.d"
  "/work/main/src/collectives/failure_report.cc" "src/CMakeFiles/hora_core.dir/collectives/failure_report.cc.o" "gcc" "src/CMakeFiles/hora_core.dir/collectives/failure_report.cc.o.d"
  "/work/main/src/collectives/reduce.cc" "src/CMakeFiles/hora_core.dir/collectives/reduce.cc.o" "gcc" "src/CMakeFiles/hora_core.dir/collectives/reduce.cc.o.d"
  "/work/main/src/common/config.cc" "src/CMakeFiles/hora_core.dir/common/config.cc.o" "gcc" "src/CMakeFiles/hora_core.dir/common/config.cc.o.d"
  "/work/main/src/common/crypto.cc" "src/CMakeFiles/hora_core.dir/common/crypto.cc.o" "gcc" "src/CMakeFiles/hora_core.dir/common/crypto.cc.o.d"
  "/work/main/src/common/knobs.cc" "src/CMakeFiles/hora_core.dir/common/knobs.cc.o" "gcc" "src/CMakeFiles/hora_core.dir/common/knobs.cc.o.d"
  "/work/main/src/common/logging.cc" "src/CMakeFiles/hora_core.dir/common/logging.cc.o" "gcc" "src/CMakeFiles/hora_core.dir/common/logging.cc.o.d"
  "/work/main/src/common/socket.cc" "src/CMakeFiles/hora_core.dir/common/socket.cc.o" "gcc" "src/CMakeFiles/hora_core.dir/common/socket.cc.o.d"
  "/work/main/src/common/types.cc" "src/CMakeFiles/hora_core.dir/common/types.cc.o" "gcc" "src/CMakeFiles/hora_core.dir/common/types.cc.o.d"
  "/work/main/src/rendezvous/tcp_store.cc" "src/CMakeFiles/hora_core.dir/rendezvous/tcp_store.cc.o" "gcc" "src/CMakeFiles/hora_core.dir/rendezvous/tcp_store.cc.o.d"
  "/work/main/src/rendezvous/tcp_store_server.cc" "src/CMakeFiles/hora_core.dir/rendezvous/tcp_store_server.cc.o" "gcc" "src/CMakeFiles/hora_core.dir/rendezvous/tcp_store_server.cc.o.d"
  "/work/main/src/rendezvous/wire.cc" "src/CMakeFiles/hora_core.dir/rendezvous/wire.cc.o" "gcc" "src/CMakeFiles/hora_core.dir/rendezvous/wire.cc.o.d"
  "/work/main/src/transport/tcp/tcp_connect.cc" "src/CMakeFiles/hora_core.dir/transport/tcp/tcp_connect.cc.o" "gcc" "src/CMakeFiles/hora_core.dir/transport/tcp/tcp_connect.cc.o.d"
  "/work/main/src/transport/tcp/tcp_transport.cc" "src/CMakeFiles/hora_core.dir/transport/tcp/tcp_transport.cc.o" "gcc" "src/CMakeFiles/hora_core.dir/transport/tcp/tcp_transport.cc.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
