# Compiles config/default.toml into libgpumem as gpumem::config::default_toml(), so the
# shim works without any file installed. CMake re-runs when the TOML changes.
set(_gpumem_toml ${PROJECT_SOURCE_DIR}/config/default.toml)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_gpumem_toml})
file(READ ${_gpumem_toml} GPUMEM_DEFAULT_TOML)
string(FIND "${GPUMEM_DEFAULT_TOML}" ")gpumem_toml\"" _gpumem_delimiter_found)
if(NOT _gpumem_delimiter_found EQUAL -1)
  message(FATAL_ERROR "config/default.toml contains the raw-string delimiter )gpumem_toml\"")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/default_toml.cpp.in
               ${CMAKE_CURRENT_BINARY_DIR}/generated/default_toml.cpp @ONLY)
# The caller adds generated/default_toml.cpp to its library targets.
