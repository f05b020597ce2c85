file(REMOVE_RECURSE
  "CMakeFiles/horarun.dir/main.cc.o"
  "CMakeFiles/horarun.dir/main.cc.o.d"
  "CMakeFiles/horarun.dir/worker_set.cc.o"
  "CMakeFiles/horarun.dir/worker_set.cc.o.d"
  "horarun"
  "horarun.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/horarun.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
