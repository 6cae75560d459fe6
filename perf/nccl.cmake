# loom-perf --api nccl and loom's libnccl.so.2 (bindings/nccl). The top level includes this
# after add_subdirectory(bindings/nccl), which comes after perf/: the library's target and
# NCCL's header folder are known only then. Where the library is built:
# - loom-perf opens it unless LOOM_NCCL_LIBRARY names another (LOOM_PERF_NCCL_LIBRARY, on
#   nccl_api.cc alone), and building loom-perf builds it;
# - perf/nccl_header_check.cc compares loom-perf's copy of NCCL's numbers (perf/nccl_api.h)
#   with the nccl.h the library is compiled against, as part of loom-perf's build;
# - the perf tests run loom-perf --api nccl (they skip, saying why, without the library).
# Without it (no NCCL 2.28 header, or a static build) loom-perf --api nccl opens
# LOOM_NCCL_LIBRARY or libnccl.so.2 from the loader's path.
if(NOT TARGET loom-perf OR NOT TARGET loom_nccl)
  return()
endif()
set_source_files_properties(${PROJECT_SOURCE_DIR}/perf/nccl_api.cc TARGET_DIRECTORY loom-perf
  PROPERTIES COMPILE_DEFINITIONS "LOOM_PERF_NCCL_LIBRARY=\"$<TARGET_FILE:loom_nccl>\"")
add_dependencies(loom-perf loom_nccl)
if(TARGET loom_mp_tests)
  target_compile_definitions(loom_mp_tests PRIVATE
    LOOM_PERF_NCCL_LIBRARY="$<TARGET_FILE:loom_nccl>")
  add_dependencies(loom_mp_tests loom_nccl)
endif()
add_library(loom_perf_nccl_header_check OBJECT ${PROJECT_SOURCE_DIR}/perf/nccl_header_check.cc)
target_include_directories(loom_perf_nccl_header_check PRIVATE ${PROJECT_SOURCE_DIR}
  ${PROJECT_SOURCE_DIR}/include)
target_include_directories(loom_perf_nccl_header_check SYSTEM PRIVATE ${LOOM_NCCL_INCLUDE_DIR}
  ${LOOM_CUDA_INCLUDE_DIR})
add_dependencies(loom-perf loom_perf_nccl_header_check)
