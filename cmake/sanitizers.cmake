# GPUMEM_SANITIZE (e.g. "address,undefined" or "thread"): build with sanitizers,
# as scripts/test-sanitizers does.
#
# Instrumented: libgpumem (checked in process by the resource, configuration and
# tool tests), the tools, the test drivers. Not instrumented: everything that runs
# inside a process the shim is preloaded into -- libgpumem_shim.so (with its own
# uninstrumented copy of libgpumem, gpumem_preload in src/CMakeLists.txt), the simulated
# device's libcuda/libcudart and the shim's test programs. An instrumented program
# needs its sanitizer runtime loaded first, ahead of the shim (LD_PRELOAD="libasan.so
# libgpumem_shim.so", which tests/shim/dlsym_test.cpp checks), while the shim is
# preloaded alone into programs that are not instrumented at all (the shell, and the
# test programs as the drivers start them).
set(GPUMEM_SANITIZER_FLAGS "")
if(GPUMEM_SANITIZE)
  set(GPUMEM_SANITIZER_FLAGS -fsanitize=${GPUMEM_SANITIZE} -fno-sanitize-recover=all -fno-omit-frame-pointer)
  add_compile_options(${GPUMEM_SANITIZER_FLAGS})
  add_link_options(${GPUMEM_SANITIZER_FLAGS})
  message(STATUS "gpumem: sanitizers ${GPUMEM_SANITIZE} (all but what runs under the preloaded shim)")
endif()

# Takes the sanitizer flags off the targets defined in the calling directory.
function(gpumem_no_sanitizers_in_this_directory)
  if(NOT GPUMEM_SANITIZER_FLAGS)
    return()
  endif()
  foreach(property COMPILE_OPTIONS LINK_OPTIONS)
    get_property(options DIRECTORY PROPERTY ${property})
    list(REMOVE_ITEM options ${GPUMEM_SANITIZER_FLAGS})
    set_property(DIRECTORY PROPERTY ${property} "${options}")
  endforeach()
endfunction()

# Takes the sanitizer flags off `targets` (defined in the calling directory).
function(gpumem_no_sanitizers)
  if(NOT GPUMEM_SANITIZER_FLAGS)
    return()
  endif()
  foreach(target IN LISTS ARGN)
    foreach(property COMPILE_OPTIONS LINK_OPTIONS)
      get_property(options TARGET ${target} PROPERTY ${property})
      list(REMOVE_ITEM options ${GPUMEM_SANITIZER_FLAGS})
      set_property(TARGET ${target} PROPERTY ${property} "${options}")
    endforeach()
  endforeach()
endfunction()
