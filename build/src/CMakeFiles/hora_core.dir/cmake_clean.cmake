file(REMOVE_RECURSE
  "CMakeFiles/hora_core.dir/capi/c_api.cc.o"
  "CMakeFiles/hora_core.dir/capi/c_api.cc.o.d"
  "CMakeFiles/hora_core.dir/collectives/algorithms.cc.o"
  "CMakeFiles/hora_core.dir/collectives/algorithms.cc.o.d"
  "CMakeFiles/hora_core.dir/collectives/communicator.cc.o"
  "CMakeFiles/hora_core.dir/collectives/communicator.cc.o.d"
  "CMakeFiles/hora_core.dir/collectives/failure_report.cc.o"
  "CMakeFiles/hora_core.dir/collectives/failure_report.cc.o.d"
  "CMakeFiles/hora_core.dir/collectives/reduce.cc.o"
  "CMakeFiles/hora_core.dir/collectives/reduce.cc.o.d"
  "CMakeFiles/hora_core.dir/common/config.cc.o"
  "CMakeFiles/hora_core.dir/common/config.cc.o.d"
  "CMakeFiles/hora_core.dir/common/crypto.cc.o"
  "CMakeFiles/hora_core.dir/common/crypto.cc.o.d"
  "CMakeFiles/hora_core.dir/common/knobs.cc.o"
  "CMakeFiles/hora_core.dir/common/knobs.cc.o.d"
  "CMakeFiles/hora_core.dir/common/logging.cc.o"
  "CMakeFiles/hora_core.dir/common/logging.cc.o.d"
  "CMakeFiles/hora_core.dir/common/socket.cc.o"
  "CMakeFiles/hora_core.dir/common/socket.cc.o.d"
  "CMakeFiles/hora_core.dir/common/types.cc.o"
  "CMakeFiles/hora_core.dir/common/types.cc.o.d"
  "CMakeFiles/hora_core.dir/rendezvous/tcp_store.cc.o"
  "CMakeFiles/hora_core.dir/rendezvous/tcp_store.cc.o.d"
  "CMakeFiles/hora_core.dir/rendezvous/tcp_store_server.cc.o"
  "CMakeFiles/hora_core.dir/rendezvous/tcp_store_server.cc.o.d"
  "CMakeFiles/hora_core.dir/rendezvous/wire.cc.o"
  "CMakeFiles/hora_core.dir/rendezvous/wire.cc.o.d"
  "CMakeFiles/hora_core.dir/transport/tcp/tcp_connect.cc.o"
  "CMakeFiles/hora_core.dir/transport/tcp/tcp_connect.cc.o.d"
  "CMakeFiles/hora_core.dir/transport/tcp/tcp_transport.cc.o"
  "CMakeFiles/hora_core.dir/transport/tcp/tcp_transport.cc.o.d"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/hora_core.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
