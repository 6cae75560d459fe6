# Links the perf tests (tests/unit/perf_*_test.cc, tests/mp/perf_*_test.cc) with
# loom_perf_common. The top level includes it after add_subdirectory(tests) when LOOM_BUILD_PERF
# is on: perf/ comes before tests/, so the test executables do not exist yet when
# perf/CMakeLists.txt runs.
get_property(_loom_perf_tests_linked GLOBAL PROPERTY LOOM_PERF_TESTS_LINKED)
if(NOT _loom_perf_tests_linked AND TARGET loom_unit_tests AND TARGET loom_mp_tests)
  target_link_libraries(loom_unit_tests PRIVATE loom_perf_common)
  target_link_libraries(loom_mp_tests PRIVATE loom_perf_common)
  # perf_launch_test runs the built loom-perf (and perf/netns-cluster.sh) as subprocesses.
  if(TARGET loom-perf)
    target_compile_definitions(loom_mp_tests PRIVATE
      LOOM_PERF_BINARY="$<TARGET_FILE:loom-perf>" LOOM_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
    add_dependencies(loom_mp_tests loom-perf)
  endif()
  # ... and the built loom-calibrate, on files formatJson wrote.
  if(TARGET loom-calibrate)
    target_compile_definitions(loom_mp_tests PRIVATE
      LOOM_CALIBRATE_BINARY="$<TARGET_FILE:loom-calibrate>")
    add_dependencies(loom_mp_tests loom-calibrate)
  endif()
  set_property(GLOBAL PROPERTY LOOM_PERF_TESTS_LINKED TRUE)
endif()
