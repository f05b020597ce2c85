#----------------------------------------------------------------
# Generated CMake target import file for configuration "Release".
#----------------------------------------------------------------

# Commands may need to know the format version.
set(CMAKE_IMPORT_FILE_VERSION 1)

# Import target "hora::hora" for configuration "Release"
set_property(TARGET hora::hora APPEND PROPERTY IMPORTED_CONFIGURATIONS RELEASE)
set_target_properties(hora::hora PROPERTIES
  IMPORTED_LINK_DEPENDENT_LIBRARIES_RELEASE "spdlog::spdlog"
  IMPORTED_LOCATION_RELEASE "${_IMPORT_PREFIX}/lib/libhora.so.0.1.0"
  IMPORTED_SONAME_RELEASE "libhora.so.0"
  )

list(APPEND _cmake_import_check_targets hora::hora )
list(APPEND _cmake_import_check_files_for_hora::hora "${_IMPORT_PREFIX}/lib/libhora.so.0.1.0" )

# Commands beyond this point should not need to know the version.
set(CMAKE_IMPORT_FILE_VERSION)
