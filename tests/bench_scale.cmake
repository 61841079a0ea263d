# bench/scale's simulation in worker processes agrees with one process (tests/scripts/bench_scale_workers.sh), and one
# that fails leaves nothing behind (tests/scripts/bench_scale_failure.sh).
if(TARGET ckpt_bench_scale)
  add_test(NAME bench_scale_workers_agree_with_one_process
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/scripts/bench_scale_workers.sh $<TARGET_FILE:ckpt_bench_scale>)
  set_tests_properties(bench_scale_workers_agree_with_one_process PROPERTIES TIMEOUT 300)
  add_test(NAME bench_scale_failure_leaves_nothing_behind
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/scripts/bench_scale_failure.sh $<TARGET_FILE:ckpt_bench_scale>
                   ${CMAKE_CURRENT_BINARY_DIR}/scenarios/bench-scale-failure)
  set_tests_properties(bench_scale_failure_leaves_nothing_behind PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
endif()
