file(REMOVE_RECURSE
  "libhora.pdb"
  "libhora.so"
  "libhora.so.0"
  "libhora.so.0.1.0"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/hora.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
