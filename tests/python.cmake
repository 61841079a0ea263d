# The Python package (bindings/python) and its JAX support, run with the interpreter CMake was configured with:
# tools/test.sh passes the virtual environment that holds requirements.txt's pinned packages. Where that interpreter
# lacks them, every test still registers, and says why it skips.
set(CKPT_PYTHON_SOURCE ${PROJECT_SOURCE_DIR}/bindings/python)
set(CKPT_PYTHON_SKIP_REASON "")
find_package(Python3 COMPONENTS Interpreter)
if(NOT Python3_Interpreter_FOUND)
  set(CKPT_PYTHON_SKIP_REASON "python3 not found")
else()
  execute_process(COMMAND ${Python3_EXECUTABLE} -c "import numpy, ml_dtypes, pytest"
                  RESULT_VARIABLE python_probe_status OUTPUT_QUIET ERROR_QUIET)
  if(NOT python_probe_status EQUAL 0)
    set(CKPT_PYTHON_SKIP_REASON "${Python3_EXECUTABLE} lacks numpy, ml_dtypes or pytest (run tools/test.sh)")
  endif()
endif()

# ckpt_python_test(NAME SELECTOR [JAX]): runs pytest on SELECTOR (a file of bindings/python/tests, optionally
# ::test_name); JAX tests also need jax and the FFI handler library. Each is labelled python, and runs with the
# interpreter in CKPT_TEST_PYTHON where that is set when ctest runs: tools/test.sh's stage newest-jax runs them again
# in the environment of the newest JAX, against the same build (the FFI handlers compiled with the oldest jaxlib).
function(ckpt_python_test name selector)
  set(reason "${CKPT_PYTHON_SKIP_REASON}")
  if(NOT reason AND "JAX" IN_LIST ARGN AND CKPT_JAX_SKIP_REASON)
    set(reason "${CKPT_JAX_SKIP_REASON}")
  endif()
  if(reason)
    add_test(NAME ${name} COMMAND sh -c "echo '${reason}: ${name} not run'; exit 77")
    set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77)
    return()
  endif()
  add_test(NAME ${name}
           COMMAND sh -c [=[exec "${CKPT_TEST_PYTHON:-$0}" -m pytest -q -p no:cacheprovider "$1"]=]
                   ${Python3_EXECUTABLE} ${CKPT_PYTHON_SOURCE}/tests/${selector}
           WORKING_DIRECTORY ${CKPT_PYTHON_SOURCE}/tests)
  set_tests_properties(${name} PROPERTIES TIMEOUT 300 LABELS python ENVIRONMENT
                       "CKPT_LIB=$<TARGET_FILE:ckpt>;CKPT_ABI_TABLE=${CKPT_ABI_TABLE};PYTHONPATH=${CKPT_PYTHON_SOURCE}/src;CKPT_LAUNCH=$<TARGET_FILE:ckpt-launch>;CKPT_TIMEOUT_MS=60000;JAX_PLATFORMS=cpu")
  ckpt_runs_foreign_programs(${name})
endfunction()

ckpt_python_test(python_abi test_abi.py)
ckpt_python_test(python_library_discovery test_library.py)
ckpt_python_test(python_numpy test_numpy.py)
# The page pool restores and reads take their large arrays from: reuse, splitting and joining, the keep time.
ckpt_python_test(python_page_pool test_page_pool.py)
# compress=True and compress_keys (CKPT_SAVE_COMPRESS, CKPT_SHARD_COMPRESS): exact, format 3, fewer bytes; refusals.
ckpt_python_test(python_compress test_compress.py)
ckpt_python_test(python_progress test_progress.py)
ckpt_python_test(python_copy_on_write test_copy_on_write.py)
ckpt_python_test(python_memory_tier_tier_names test_memory_tier.py::test_a_tier_is_storage_memory_or_both)
ckpt_python_test(python_memory_tier_manager_options test_memory_tier.py::test_manager_memory_options_are_checked)
ckpt_python_test(python_memory_tier_save_needs_job_id
                 test_memory_tier.py::test_a_save_to_memory_without_a_job_identity_names_CKPT_JOB_ID)
ckpt_python_test(python_memory_tier_manager_needs_job_id
                 test_memory_tier.py::test_a_memory_tier_manager_without_a_job_identity_names_CKPT_JOB_ID)
ckpt_python_test(python_memory_tier_resume_from_memory
                 test_memory_tier.py::test_a_manager_resumes_from_memory_the_step_storage_never_saw)
ckpt_python_test(python_memory_tier_readme_loop
                 test_memory_tier.py::test_the_readmes_memory_tier_loop_resumes_from_memory_and_saves_each_step_once)
ckpt_python_test(jax_jit_saver_memory_tier test_memory_tier.py::test_a_jit_saver_saves_each_step_into_the_memory_tier
                 JAX)
ckpt_python_test(jax_jit_saver_memory_tier_needs_job_id
                 test_memory_tier.py::test_a_jit_saver_to_memory_without_a_job_identity_names_CKPT_JOB_ID JAX)
ckpt_python_test(python_manager_second_job_refused
                 test_manager_claim.py::test_a_second_job_on_the_root_is_refused_on_every_rank_and_the_holders_steps_stay)
ckpt_python_test(python_manager_second_in_process_refused
                 test_manager_claim.py::test_a_second_manager_in_one_process_is_refused_until_the_first_closes)
ckpt_python_test(python_manager_dropped_releases_root
                 test_manager_claim.py::test_a_manager_dropped_without_close_releases_its_root)
ckpt_python_test(python_manager_never_closed
                 test_manager_claim.py::test_a_manager_never_closed_commits_its_last_save_and_exits_quietly)
ckpt_python_test(python_manager_closed_answers_queries
                 test_manager_claim.py::test_a_closed_manager_still_answers_queries_and_refuses_to_save_or_restore)
# Retention by metric, period and age, metrics stored with each step, and the README's manager with best_fn.
ckpt_python_test(python_manager_policies test_manager_policies.py)
ckpt_python_test(python_restore_common_leaf_types test_common_leaves.py)
ckpt_python_test(python_restore_key_map test_key_map.py)
ckpt_python_test(python_numpy_reshard_1_3_2_ranks test_numpy_multirank.py::test_reshard_1_to_3_to_2_ranks)
ckpt_python_test(python_numpy_manager_2_ranks test_numpy_multirank.py::test_manager_retention_and_resume_on_2_ranks)
ckpt_python_test(python_numpy_mismatch_2_ranks test_numpy_multirank.py::test_mismatches_fail_on_every_rank)
ckpt_python_test(python_numpy_check_replicas_3_ranks
                 test_numpy_multirank.py::test_replicas_that_differ_fail_the_save_on_3_ranks)
ckpt_python_test(python_numpy_incremental_3_ranks
                 test_numpy_multirank.py::test_incremental_steps_under_retention_restore_exactly_on_3_ranks)
ckpt_python_test(python_allgather_bootstrap_3_ranks
                 test_numpy_multirank.py::test_a_context_bootstrapped_through_the_jobs_allgather_on_3_ranks)
ckpt_python_test(python_job_collectives_3_ranks test_numpy_multirank.py::test_a_context_over_the_jobs_collectives_on_3_ranks)
ckpt_python_test(jax_single_process test_jax.py JAX)
ckpt_python_test(jax_faithful_restore test_faithful_restore.py JAX)
ckpt_python_test(jax_restore_2x2_into_1_process_4_devices
                 test_jax_multiprocess.py::test_restore_2x2_into_one_process_with_4_devices JAX)
ckpt_python_test(jax_restore_2x2_into_4_processes_1_device
                 test_jax_multiprocess.py::test_restore_2x2_into_4_processes_with_1_device JAX)
ckpt_python_test(jax_restore_2x2_into_2x2 test_jax_multiprocess.py::test_restore_2x2_into_2x2 JAX)
ckpt_python_test(python_safetensors_export test_safetensors.py::test_export_is_read_by_the_safetensors_package)
ckpt_python_test(python_safetensors_export_never_replaces test_safetensors.py::test_export_refuses_to_replace_a_file)
ckpt_python_test(python_safetensors_export_awkward_keys
                 test_safetensors.py::test_export_of_awkward_keys_is_read_by_the_safetensors_package_under_the_same_keys)
ckpt_python_test(python_safetensors_export_bf16_and_restore
                 test_safetensors.py::test_export_converts_float32_to_bfloat16_and_restores_straight_from_safetensors)
ckpt_python_test(python_published_model_3_to_2_ranks_exported_by_2
                 test_safetensors.py::test_published_model_on_3_ranks_resharded_to_2_and_exported_sharded)
ckpt_python_test(jax_jit_save_ffi_2_processes test_jax_multiprocess.py::test_jit_save_through_the_ffi_custom_call JAX)
ckpt_python_test(jax_no_main_replica_2_processes
                 test_jax_multiprocess.py::test_process_without_main_replica_neither_hangs_nor_fails JAX)
# One entry for the module's three resumes, which share its two most expensive runs (uninterrupted, then killed).
ckpt_python_test(jax_flax_example_resumes_as_uninterrupted test_flax_example.py JAX)
ckpt_python_test(jax_versions_metadata_spans_the_tested
                 test_jax_versions.py::test_the_jax_extra_spans_the_oldest_and_the_newest_tested_jax JAX)
ckpt_python_test(jax_version_under_test_is_pinned test_jax_versions.py::test_the_jax_under_test_is_a_tested_one JAX)
ckpt_python_test(jax_readme_quickstart test_readme.py::test_quickstart_runs_on_2_processes_then_resumes_on_1 JAX)
ckpt_python_test(jax_readme_quickstart_is_the_example test_readme.py::test_the_example_is_the_readme_quickstart JAX)
ckpt_python_test(python_readme_resume_loop
                 test_readme.py::test_the_binding_readmes_resume_loop_trains_and_saves_each_step_once)
# On a CUDA device, where JAX sees one: JAX_PLATFORMS unset so that it may pick the GPU. Without one the module
# skips with its reason, which ctest counts as a skip (the GPU is the one thing CI cannot install).
ckpt_python_test(jax_gpu test_jax_gpu.py JAX)
if(TEST jax_gpu)
  set_property(TEST jax_gpu APPEND PROPERTY ENVIRONMENT "JAX_PLATFORMS=;PYTEST_ADDOPTS=-rs")
  set_property(TEST jax_gpu PROPERTY SKIP_REGULAR_EXPRESSION "no CUDA device: JAX sees no GPU")
endif()

# mypy --strict over the package, configured by bindings/python/pyproject.toml's [tool.mypy]. It reads jax's own
# annotations, so it needs jax as well as mypy (both in requirements.txt); the cache stays out of the source tree.
set(CKPT_MYPY_SKIP_REASON "${CKPT_PYTHON_SKIP_REASON}")
if(NOT CKPT_MYPY_SKIP_REASON)
  execute_process(COMMAND ${Python3_EXECUTABLE} -c "import mypy, jax"
                  RESULT_VARIABLE mypy_probe_status OUTPUT_QUIET ERROR_QUIET)
  if(NOT mypy_probe_status EQUAL 0)
    set(CKPT_MYPY_SKIP_REASON "${Python3_EXECUTABLE} lacks mypy or jax (run tools/test.sh)")
  endif()
endif()
if(CKPT_MYPY_SKIP_REASON)
  add_test(NAME python_mypy_strict
           COMMAND sh -c "echo '${CKPT_MYPY_SKIP_REASON}: python_mypy_strict not run'; exit 77")
  set_tests_properties(python_mypy_strict PROPERTIES SKIP_RETURN_CODE 77)
else()
  add_test(NAME python_mypy_strict
           COMMAND ${Python3_EXECUTABLE} -m mypy --strict --config-file ${CKPT_PYTHON_SOURCE}/pyproject.toml
                   --cache-dir ${CMAKE_CURRENT_BINARY_DIR}/mypy-cache)
  set_tests_properties(python_mypy_strict PROPERTIES TIMEOUT 300)
endif()

if(CKPT_PYTHON_SKIP_REASON)
  add_test(NAME python_install COMMAND sh -c "echo '${CKPT_PYTHON_SKIP_REASON}: python_install not run'; exit 77")
  set_tests_properties(python_install PROPERTIES SKIP_RETURN_CODE 77)
else()
  add_test(NAME python_install
           COMMAND bash ${CKPT_PYTHON_SOURCE}/tests/check_install.sh ${PROJECT_BINARY_DIR} ${Python3_EXECUTABLE}
                   ${CMAKE_CURRENT_BINARY_DIR}/python-install-check)
  set_tests_properties(python_install PROPERTIES TIMEOUT 300)
  ckpt_runs_foreign_programs(python_install)
endif()
