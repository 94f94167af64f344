# The Python package's generated part: made in every build (so a change to the struct
# that the generator does not understand fails early), installed only into the wheel
# (pyproject.toml: scikit-build-core installs the runtime and python components into
# the package directory).
set(GPUMEM_PY_FIELDS ${CMAKE_CURRENT_BINARY_DIR}/python/_stats_fields.py)
add_custom_command(OUTPUT ${GPUMEM_PY_FIELDS}
  COMMAND ${CMAKE_COMMAND} -DHEADER=${PROJECT_SOURCE_DIR}/src/shim/gpumem_shim.h -DOUT=${GPUMEM_PY_FIELDS}
          -P ${PROJECT_SOURCE_DIR}/cmake/python_stats_fields.cmake
  DEPENDS ${PROJECT_SOURCE_DIR}/src/shim/gpumem_shim.h ${PROJECT_SOURCE_DIR}/cmake/python_stats_fields.cmake
  VERBATIM)
add_custom_target(gpumem_python_fields ALL DEPENDS ${GPUMEM_PY_FIELDS})
if(SKBUILD)
  install(FILES ${GPUMEM_PY_FIELDS} DESTINATION . COMPONENT python)
endif()
