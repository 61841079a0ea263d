# Incremental saves (CKPT_SAVE_INCREMENTAL) on 3 real ranks through ckpt-launch (tests/integration/scenario_incremental.cc):
# a manager's chain of steps under retention, every kept step loading back exactly in another layout; saves written in
# place and copy-on-write against a base; a checkpoint whose base was deleted by hand, refused by the load and by
# verify naming it, while its copy made self-contained by `ckpt import` before still verifies; a rank killed during an
# incremental save, after which the base is the latest step and loads back exactly.
add_executable(ckpt_scenario_incremental integration/scenario_incremental.cc)
target_link_libraries(ckpt_scenario_incremental PRIVATE ckpt_scenario_common ckpt)

set(incremental_dir ${CMAKE_CURRENT_BINARY_DIR}/scenarios/incremental)
add_test(NAME mp_incremental_chain_under_retention
         COMMAND sh -c "rm -rf \"$1\" && \"$0\" -n 3 --timeout 60 -- \"$2\" chain \"$1\""
                 $<TARGET_FILE:ckpt-launch> ${incremental_dir}/chain $<TARGET_FILE:ckpt_scenario_incremental>)
# `ckpt import` of the incremental checkpoint, made before the base goes, is self-contained: it still verifies after.
add_test(NAME mp_incremental_deleted_base
         COMMAND sh -c "rm -rf \"$1\" && mkdir -p \"$1\" && \
                        \"$0\" -n 3 --timeout 60 -- \"$2\" pair \"$1/base\" \"$1/next\" && \
                        \"$3\" import \"$1/next\" \"$1/whole\" && rm -rf \"$1/base\" && \
                        \"$0\" -n 3 --timeout 60 -- \"$2\" orphan \"$1/next\" \"$1/base\" && \"$3\" verify \"$1/whole\""
                 $<TARGET_FILE:ckpt-launch> ${incremental_dir}/deleted $<TARGET_FILE:ckpt_scenario_incremental>
                 $<TARGET_FILE:ckpt_cli>)
foreach(how IN ITEMS in-place cow)
  add_test(NAME mp_incremental_${how}
           COMMAND sh -c "rm -rf \"$1\" && mkdir -p \"$1\" && \
                          \"$0\" -n 3 --timeout 60 -- \"$2\" pair \"$1/base\" \"$1/next\" ${how}"
                   $<TARGET_FILE:ckpt-launch> ${incremental_dir}/${how} $<TARGET_FILE:ckpt_scenario_incremental>)
endforeach()
add_test(NAME mp_incremental_rank_killed_mid_save
         COMMAND sh -c "rm -rf \"$1\"; rc=0; \"$0\" -n 3 --grace 60 --timeout 90 -- \"$2\" die \"$1\" || rc=$?; \
                        [ $rc = 137 ] || { echo \"expected the killed rank's 137, got $rc\"; exit 1; }; \
                        \"$0\" -n 3 --timeout 60 -- \"$2\" resume \"$1\""
                 $<TARGET_FILE:ckpt-launch> ${incremental_dir}/killed $<TARGET_FILE:ckpt_scenario_incremental>)
set_tests_properties(mp_incremental_chain_under_retention mp_incremental_deleted_base mp_incremental_in-place
                     mp_incremental_cow PROPERTIES TIMEOUT 120 ENVIRONMENT "CKPT_TIMEOUT_MS=10000")
# Rank 1 kills itself once its save call has returned, while its staging waits out the pause: a pause of 300 ms was
# once outlasted under AddressSanitizer on two busy cores, where the save's own threads committed step 2 before the
# calling thread ran again. At 1.5 s the calling thread would have to wait five times as long.
set_tests_properties(mp_incremental_rank_killed_mid_save PROPERTIES TIMEOUT 120
                     ENVIRONMENT "CKPT_FAULT_STAGING_PAUSE_MS=1500;CKPT_TIMEOUT_MS=10000")
ckpt_needs_fault_hooks(mp_incremental_rank_killed_mid_save)
