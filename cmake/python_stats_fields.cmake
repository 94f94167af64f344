cmake_minimum_required(VERSION 3.22)
# Writes the Python package's _stats_fields.py: the fields of struct
# gpumem_shim_stats (FIELDS) and gpumem_shim_host_stats (HOST_FIELDS) in
# gpumem_shim.h, in order, so gpumem.stats() and gpumem.host_stats() read exactly
# the structs the shim fills in.
# Usage: cmake -DHEADER=<gpumem_shim.h> -DOUT=<_stats_fields.py> -P python_stats_fields.cmake
file(READ "${HEADER}" text)
set(out "# Generated from gpumem_shim.h at build time: its stats structs, field for field, in order.\n")
foreach(pair "gpumem_shim_stats;FIELDS" "gpumem_shim_host_stats;HOST_FIELDS")
  list(GET pair 0 type)
  list(GET pair 1 name)
  string(REGEX MATCH "typedef struct ${type} {([^}]*)} ${type};" found "${text}")
  if(NOT found)
    message(FATAL_ERROR "${HEADER}: struct ${type} not found")
  endif()
  string(REGEX REPLACE "/\\*[^*]*\\*+([^/*][^*]*\\*+)*/" "" body "${CMAKE_MATCH_1}")  # comments
  string(REPLACE ";" "\n" body "${body}")
  string(REPLACE "\n" ";" lines "${body}")
  set(fields "")
  foreach(line IN LISTS lines)
    string(STRIP "${line}" line)
    if(line STREQUAL "")
      continue()
    endif()
    if(NOT line MATCHES "^(int|unsigned long long)[ \t]+([A-Za-z_][A-Za-z0-9_]*)$")
      message(FATAL_ERROR "${HEADER}: ${type} field \"${line}\": only int and unsigned long long "
                          "fields are known to cmake/python_stats_fields.cmake")
    endif()
    string(APPEND fields "    (\"${CMAKE_MATCH_2}\", \"${CMAKE_MATCH_1}\"),\n")
  endforeach()
  string(APPEND out "${name} = [\n${fields}]\n")
endforeach()
file(WRITE "${OUT}" "${out}")
