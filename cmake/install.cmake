# What `cmake --install build --prefix P` puts under P (relocatable: nothing below
# refers to the build machine's paths, and the tools find each other relative to
# their own location):
#   bin/gpumem-run, gpumem-report, gpumem-replay          component runtime
#   lib/libgpumem_shim.so                                  runtime
#   lib/gpumem/simdevice/libcuda.so.1, libcudart.so.13     runtime (for gpumem-replay;
#                                                          CUDA's sonames: kept off the
#                                                          default library path)
#   share/gpumem/config/*.toml                             runtime
#   lib/libgpumem.a, include/gpumem/, lib/cmake/gpumem/    development: find_package(gpumem)
# The Python wheel (pyproject.toml) installs the runtime component only.
include(CMakePackageConfigHelpers)

set(GPUMEM_INSTALL_CMAKEDIR lib/cmake/gpumem)

install(TARGETS gpumem gpumem_cuda_headers EXPORT gpumem-targets
  ARCHIVE DESTINATION lib COMPONENT development)
install(DIRECTORY include/gpumem DESTINATION include COMPONENT development)
install(EXPORT gpumem-targets NAMESPACE gpumem:: DESTINATION ${GPUMEM_INSTALL_CMAKEDIR}
  COMPONENT development)
configure_package_config_file(cmake/gpumemConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/gpumemConfig.cmake
  INSTALL_DESTINATION ${GPUMEM_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/gpumemConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/gpumemConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/gpumemConfigVersion.cmake
  DESTINATION ${GPUMEM_INSTALL_CMAKEDIR} COMPONENT development)

file(GLOB GPUMEM_CONFIG_EXAMPLES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/config/*.toml)
install(FILES ${GPUMEM_CONFIG_EXAMPLES} DESTINATION share/gpumem/config COMPONENT runtime)
