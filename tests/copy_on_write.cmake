# Copy-on-write saves (CKPT_SAVE_COPY_ON_WRITE) on 2 real ranks through ckpt-launch, each writing its buffers right
# after the call (tests/integration/scenario_cow.cc). Each rank's staging pauses 300 ms before every window
# (CKPT_FAULT_STAGING_PAUSE_MS), so that the writes come before the copy and go through the fault handler.
add_executable(ckpt_scenario_cow integration/scenario_cow.cc)
target_link_libraries(ckpt_scenario_cow PRIVATE ckpt_scenario_common ckpt)

add_test(NAME mp_cow_save_while_writing
         COMMAND sh -c "rm -rf \"$1\" && \"$0\" -n 2 --timeout 60 -- \"$2\" save-while-writing \"$1\""
                 $<TARGET_FILE:ckpt-launch> ${CMAKE_CURRENT_BINARY_DIR}/scenarios/cow-writing/ckpt
                 $<TARGET_FILE:ckpt_scenario_cow>)
# A rank SIGKILLed while its copy-on-write save stages: the launcher reports the kill (137), the other rank's
# request fails, and no checkpoint is at the path.
add_test(NAME mp_cow_rank_killed_mid_save
         COMMAND sh -c "rm -rf \"$1\"; rc=0; \"$0\" -n 2 --grace 60 --timeout 90 -- \"$2\" save-and-die \"$1\" || rc=$?; \
                        [ $rc = 137 ] || { echo \"expected the killed rank's 137, got $rc\"; exit 1; }; \
                        [ ! -e \"$1\" ] || { echo \"a checkpoint was committed at $1\"; exit 1; }"
                 $<TARGET_FILE:ckpt-launch> ${CMAKE_CURRENT_BINARY_DIR}/scenarios/cow-killed/ckpt
                 $<TARGET_FILE:ckpt_scenario_cow>)
set_tests_properties(mp_cow_save_while_writing mp_cow_rank_killed_mid_save PROPERTIES TIMEOUT 120
                     ENVIRONMENT "CKPT_FAULT_STAGING_PAUSE_MS=300;CKPT_TIMEOUT_MS=10000")
set_tests_properties(mp_cow_save_while_writing PROPERTIES LABELS "threaded;rank_io_threads")
ckpt_needs_fault_hooks(mp_cow_save_while_writing mp_cow_rank_killed_mid_save)
