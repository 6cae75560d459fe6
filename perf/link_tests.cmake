# Links the perf unit tests (tests/unit/perf_format_test.cc) with loom_perf_common. The top level
# includes it after add_subdirectory(tests), whether or not LOOM_BUILD_PERF is on: perf/ comes
# before tests/, so loom_unit_tests does not exist yet when perf/CMakeLists.txt runs.
get_property(_loom_perf_tests_linked GLOBAL PROPERTY LOOM_PERF_TESTS_LINKED)
if(NOT _loom_perf_tests_linked AND TARGET loom_unit_tests)
  if(NOT TARGET loom_perf_common)
    # LOOM_BUILD_PERF=OFF: no perf programs, but the unit tests still test their shared code.
    add_library(loom_perf_common STATIC ${CMAKE_CURRENT_LIST_DIR}/perf_common.cc)
    target_include_directories(loom_perf_common PUBLIC ${PROJECT_SOURCE_DIR}/include
      ${PROJECT_SOURCE_DIR})
  endif()
  target_link_libraries(loom_unit_tests PRIVATE loom_perf_common)
  set_property(GLOBAL PROPERTY LOOM_PERF_TESTS_LINKED TRUE)
endif()
