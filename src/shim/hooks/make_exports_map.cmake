cmake_minimum_required(VERSION 3.22)
# Writes the shim's version script: exports.map.in with @GPUMEM_HOOK_EXPORTS@
# replaced by one line per hook name found in the preprocessed export_names.hpp.
# Usage: cmake -DNAMES=<preprocessed file> -DTEMPLATE=<exports.map.in> -DOUT=<map> -P make_exports_map.cmake
file(READ "${NAMES}" text)
string(REGEX MATCHALL "gpumem_export_name[ \t\r\n]+[A-Za-z_][A-Za-z0-9_]*" markers "${text}")
set(GPUMEM_HOOK_EXPORTS "")
set(seen "")
foreach(marker IN LISTS markers)
  string(REGEX REPLACE "^gpumem_export_name[ \t\r\n]+" "" name "${marker}")
  if(name IN_LIST seen)
    message(FATAL_ERROR "make_exports_map: hook ${name} is listed twice in hook_table.hpp")
  endif()
  list(APPEND seen ${name})
  string(APPEND GPUMEM_HOOK_EXPORTS "    ${name};\n")
endforeach()
if(NOT seen)
  message(FATAL_ERROR "make_exports_map: no hook names found in ${NAMES}")
endif()
string(REGEX REPLACE "\n$" "" GPUMEM_HOOK_EXPORTS "${GPUMEM_HOOK_EXPORTS}")
configure_file("${TEMPLATE}" "${OUT}.tmp" @ONLY)
# Written every run (the command runs only when its inputs changed), so the output
# is never older than them.
file(RENAME "${OUT}.tmp" "${OUT}")
