# loom_layer(NAME FOLDERS f... [EXCLUDE file...]): an object library of the .cc files under
# NAME/ (and its subfolders) but those EXCLUDE names (paths from the source root: the half of an
# optional part that this build does not want), compiled against the folders listed and nothing
# else of the source tree.
#
# Sources include each other by path from the source root ("base/status.h"). Rather than the
# root, each layer's include path is a folder of its own in the build tree holding links to the
# folders it may use, so "#include "tuner/tuner.h"" from collectives/ finds no such file. The
# list is what a layer's sources may see, headers included: a layer that includes a header of
# a lower layer which itself includes another layer's header lists that layer too.
set(LOOM_LAYERS)

# loom_source_view(NAME OUT_VAR folder...): a folder of the build tree with links to the given
# source folders, set in OUT_VAR: an include path that sees those folders and nothing else.
function(loom_source_view name out)
  set(view ${PROJECT_BINARY_DIR}/layers/${name})
  file(REMOVE_RECURSE ${view})
  file(MAKE_DIRECTORY ${view})
  foreach(folder IN LISTS ARGN)
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${view}/${folder} SYMBOLIC)
  endforeach()
  set(${out} ${view} PARENT_SCOPE)
endfunction()

function(loom_layer name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "FOLDERS;EXCLUDE")
  loom_source_view(${name} view ${arg_FOLDERS})
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${name}/*.cc)
  foreach(excluded IN LISTS arg_EXCLUDE)
    list(REMOVE_ITEM sources ${PROJECT_SOURCE_DIR}/${excluded})
  endforeach()
  add_library(loom_layer_${name} OBJECT ${sources})
  target_include_directories(loom_layer_${name} PRIVATE ${view} ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(loom_layer_${name} PRIVATE Threads::Threads)
  # Zeroing a per-call struct (CallDesc, PlanKey: a few hundred bytes) compiles to `rep stosq`
  # by default, whose start-up costs a small call ~5%; small ones become stores.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
    target_compile_options(loom_layer_${name} PRIVATE
      -mmemset-strategy=unrolled_loop:512:noalign,libcall:-1:noalign)
  endif()
  # Calls between the library's own functions bind inside it (with -Bsymbolic-functions at the
  # link): nothing outside replaces loom's internals.
  if(NOT LOOM_BUILD_STATIC AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(loom_layer_${name} PRIVATE -fno-semantic-interposition)
  endif()
  set(LOOM_LAYERS ${LOOM_LAYERS} ${name} PARENT_SCOPE)
endfunction()

# loom_binding(TARGET): a target of bindings/ (a library built on libloom, such as the drop-in
# libnccl.so.2), compiled against its own folder and the public C API (include/loom/, which
# linking loom gives) only: an include of the library's internals fails to build.
function(loom_binding target)
  loom_source_view(bindings view bindings)
  target_include_directories(${target} PRIVATE ${view})
endfunction()

# loom_binding_wanted(OPTION WHAT OUT_VAR): whether a binding is to be built: OPTION is on, and
# libloom is shared (every binding is built over libloom.so; with LOOM_BUILD_STATIC it says
# that WHAT is skipped). Sets OUT_VAR to ON or OFF.
function(loom_binding_wanted option what out)
  set(${out} OFF PARENT_SCOPE)
  if(NOT ${option})
    return()
  endif()
  if(LOOM_BUILD_STATIC)
    message(STATUS "${what} skipped: it is built over the shared libloom.so, and "
                   "LOOM_BUILD_STATIC is on")
    return()
  endif()
  set(${out} ON PARENT_SCOPE)
endfunction()

# loom_internal_binding(TARGET FOLDERS f...): a target of bindings/ that another library loads
# as a plugin of its own (NCCL's net plugin), which needs loom's layers and not only its C API:
# compiled against bindings/, the public C API and the layers listed, nothing else.
function(loom_internal_binding target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "FOLDERS")
  loom_source_view(${target} view bindings ${arg_FOLDERS})
  target_include_directories(${target} PRIVATE ${view})
endfunction()
