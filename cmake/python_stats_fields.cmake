cmake_minimum_required(VERSION 3.22)
# Writes the Python package's _stats_fields.py: the fields of struct
# gpumem_shim_stats in gpumem_shim.h, in order, so gpumem.stats() reads exactly the
# struct the shim fills in.
# Usage: cmake -DHEADER=<gpumem_shim.h> -DOUT=<_stats_fields.py> -P python_stats_fields.cmake
file(READ "${HEADER}" text)
string(REGEX MATCH "typedef struct gpumem_shim_stats {([^}]*)} gpumem_shim_stats;" found "${text}")
if(NOT found)
  message(FATAL_ERROR "${HEADER}: struct gpumem_shim_stats not found")
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
    message(FATAL_ERROR "${HEADER}: gpumem_shim_stats field \"${line}\": only int and unsigned long long "
                        "fields are known to cmake/python_stats_fields.cmake")
  endif()
  string(APPEND fields "    (\"${CMAKE_MATCH_2}\", \"${CMAKE_MATCH_1}\"),\n")
endforeach()
file(WRITE "${OUT}" "# Generated from gpumem_shim.h at build time: struct gpumem_shim_stats, in order.\nFIELDS = [\n${fields}]\n")
