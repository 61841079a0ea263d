# Saves and loads on S3 by several ranks, against the real server of the fixture s3_server (tests/s3.cmake):
# tests/s3/engine.sh says what each part proves.
foreach(part save-load sections export-import wrong-credentials first-call-errors gateway-killed rank-killed memory-tier)
  string(REPLACE "-" "_" test_part ${part})
  add_test(NAME s3_engine_${test_part}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/s3/engine.sh ${part} ${CMAKE_BINARY_DIR}/s3 ${CMAKE_BINARY_DIR})
  set_tests_properties(s3_engine_${test_part} PROPERTIES TIMEOUT 180 LABELS s3)
  # gateway-killed kills the gateway of a server of its own.
  if(NOT part STREQUAL "gateway-killed")
    set_tests_properties(s3_engine_${test_part} PROPERTIES FIXTURES_REQUIRED s3_server)
  endif()
endforeach()

# Python and JAX on S3 (bindings/python/tests/test_s3.py): the POSIX tests' job scripts pointed at an s3:// root.
ckpt_python_test(python_s3_manager_2_ranks
                 test_s3.py::test_a_manager_on_s3_keeps_what_its_retention_says_and_resumes_on_2_ranks)
ckpt_python_test(jax_s3_2_processes_into_1
                 test_s3.py::test_jax_saved_by_2_processes_is_restored_by_1_process_with_another_mesh JAX)
ckpt_python_test(python_s3_manager_keep_best_and_metrics
                 test_s3.py::test_a_manager_on_s3_keeps_the_best_steps_and_reads_back_their_metrics)
foreach(name python_s3_manager_2_ranks jax_s3_2_processes_into_1 python_s3_manager_keep_best_and_metrics)
  set_property(TEST ${name} APPEND PROPERTY ENVIRONMENT CKPT_S3_TEST_ENV=${CMAKE_BINARY_DIR}/s3/env)
  set_tests_properties(${name} PROPERTIES LABELS s3 FIXTURES_REQUIRED s3_server)
endforeach()

# README.md's S3 snippets, run as pasted (tests/s3/readme_snippets.sh).
add_test(NAME s3_readme_snippets
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/s3/readme_snippets.sh ${PROJECT_SOURCE_DIR}/README.md
                 ${CMAKE_BINARY_DIR}/s3 ${CMAKE_BINARY_DIR} ${Python3_EXECUTABLE})
set_tests_properties(s3_readme_snippets PROPERTIES TIMEOUT 180 LABELS s3 FIXTURES_REQUIRED s3_server)
# Its Python part loads a sanitized libckpt into an uninstrumented interpreter.
ckpt_runs_foreign_programs(s3_readme_snippets)
