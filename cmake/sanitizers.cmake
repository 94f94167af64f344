# GPUMEM_SANITIZE (e.g. "address,undefined" or "thread"): build with sanitizers,
# as scripts/test-sanitizers does.
#
# Everything is instrumented except libgpumem_shim.so (src/shim/CMakeLists.txt takes
# the flags off its directory and links an uninstrumented copy of libgpumem): the shim
# is preloaded into programs that are not instrumented (the shell, Python), and an
# instrumented shim would pull the sanitizer runtime into them after libc, where it
# cannot work. The library code the shim is made of is checked in process by the
# resource, configuration and tool tests; the shim's processes run instrumented test
# programs, so their use of the shim's memory is checked too.
set(GPUMEM_SANITIZER_FLAGS "")
if(GPUMEM_SANITIZE)
  set(GPUMEM_SANITIZER_FLAGS -fsanitize=${GPUMEM_SANITIZE} -fno-sanitize-recover=all -fno-omit-frame-pointer)
  add_compile_options(${GPUMEM_SANITIZER_FLAGS})
  add_link_options(${GPUMEM_SANITIZER_FLAGS})
  message(STATUS "gpumem: sanitizers ${GPUMEM_SANITIZE} (all but the preloaded shim)")
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
