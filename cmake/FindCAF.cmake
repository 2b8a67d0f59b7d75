# Finds the C++ Actor Framework as packaged by Debian (libcaf-dev 0.17.x),
# which ships no CMake config. Defines CAF::core, CAF::io and, when present,
# CAF::openssl, plus CAF_VERSION ("0.17.6").
find_path(CAF_INCLUDE_DIR caf/config.hpp)
find_library(CAF_CORE_LIBRARY caf_core)
find_library(CAF_IO_LIBRARY caf_io)
find_library(CAF_OPENSSL_LIBRARY caf_openssl)

if(CAF_INCLUDE_DIR)
  file(STRINGS ${CAF_INCLUDE_DIR}/caf/config.hpp _caf_version_line REGEX "^#define CAF_VERSION [0-9]+")
  string(REGEX REPLACE "^#define CAF_VERSION ([0-9]+).*" "\\1" _caf_version_number "${_caf_version_line}")
  math(EXPR _caf_major "${_caf_version_number} / 10000")
  math(EXPR _caf_minor "(${_caf_version_number} / 100) % 100")
  math(EXPR _caf_patch "${_caf_version_number} % 100")
  set(CAF_VERSION "${_caf_major}.${_caf_minor}.${_caf_patch}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CAF
  REQUIRED_VARS CAF_INCLUDE_DIR CAF_CORE_LIBRARY CAF_IO_LIBRARY
  VERSION_VAR CAF_VERSION)

if(CAF_FOUND)
  if(NOT TARGET CAF::core)
    add_library(CAF::core SHARED IMPORTED)
    set_target_properties(CAF::core PROPERTIES
      IMPORTED_LOCATION ${CAF_CORE_LIBRARY}
      INTERFACE_INCLUDE_DIRECTORIES ${CAF_INCLUDE_DIR})
  endif()
  if(NOT TARGET CAF::io)
    add_library(CAF::io SHARED IMPORTED)
    set_target_properties(CAF::io PROPERTIES
      IMPORTED_LOCATION ${CAF_IO_LIBRARY}
      INTERFACE_LINK_LIBRARIES CAF::core)
  endif()
  if(CAF_OPENSSL_LIBRARY AND NOT TARGET CAF::openssl)
    add_library(CAF::openssl SHARED IMPORTED)
    set_target_properties(CAF::openssl PROPERTIES
      IMPORTED_LOCATION ${CAF_OPENSSL_LIBRARY}
      INTERFACE_LINK_LIBRARIES CAF::io)
  endif()
endif()
mark_as_advanced(CAF_INCLUDE_DIR CAF_CORE_LIBRARY CAF_IO_LIBRARY CAF_OPENSSL_LIBRARY)
