# Replicas that check each other before the commit (CKPT_SAVE_CHECK_REPLICAS) on 3 real ranks through ckpt-launch
# (tests/integration/scenario_replicas.cc): equal copies commit, staged at the call or copy-on-write; a bit flipped
# in one copy, whether that rank writes or only checks, fails the save on every rank naming it, commits nothing; the
# flag on one rank only is refused on every rank; replica buffers unmapped before they were checksummed fail the save
# naming the tensor.
add_executable(ckpt_scenario_replicas integration/scenario_replicas.cc)
target_link_libraries(ckpt_scenario_replicas PRIVATE ckpt_scenario_common ckpt)

foreach(variant IN ITEMS staged cow)
  add_test(NAME mp_replicas_agree_${variant}
           COMMAND sh -c "rm -rf \"$1\" && \"$0\" -n 3 --timeout 60 -- \"$2\" agree \"$1\" ${variant}"
                   $<TARGET_FILE:ckpt-launch> ${CMAKE_CURRENT_BINARY_DIR}/scenarios/replicas-${variant}/ckpt
                   $<TARGET_FILE:ckpt_scenario_replicas>)
endforeach()
foreach(rank IN ITEMS 0 1 2)
  add_test(NAME mp_replicas_flipped_bit_on_rank_${rank}
           COMMAND sh -c "rm -rf \"$1\" && \"$0\" -n 3 --timeout 60 -- \"$2\" flipped \"$1\" ${rank}"
                   $<TARGET_FILE:ckpt-launch> ${CMAKE_CURRENT_BINARY_DIR}/scenarios/replicas-flipped-${rank}/ckpt
                   $<TARGET_FILE:ckpt_scenario_replicas>)
endforeach()
# The same with an incremental save against a first one: the writer's copy, mostly referred to, is compared whole.
foreach(rank IN ITEMS 0 2)
  add_test(NAME mp_replicas_flipped_bit_on_rank_${rank}_incremental
           COMMAND sh -c "rm -rf \"$1\" \"$1-base\" && \"$0\" -n 3 --timeout 60 -- \"$2\" flipped \"$1\" ${rank} incremental"
                   $<TARGET_FILE:ckpt-launch> ${CMAKE_CURRENT_BINARY_DIR}/scenarios/replicas-flipped-${rank}-incremental/ckpt
                   $<TARGET_FILE:ckpt_scenario_replicas>)
endforeach()
add_test(NAME mp_replicas_flag_on_one_rank_only
         COMMAND sh -c "rm -rf \"$1\" && \"$0\" -n 3 --timeout 60 -- \"$2\" disagree \"$1\""
                 $<TARGET_FILE:ckpt-launch> ${CMAKE_CURRENT_BINARY_DIR}/scenarios/replicas-disagree/ckpt
                 $<TARGET_FILE:ckpt_scenario_replicas>)
set_tests_properties(mp_replicas_agree_staged mp_replicas_agree_cow mp_replicas_flipped_bit_on_rank_0
                     mp_replicas_flipped_bit_on_rank_1 mp_replicas_flipped_bit_on_rank_2
                     mp_replicas_flag_on_one_rank_only mp_replicas_flipped_bit_on_rank_0_incremental
                     mp_replicas_flipped_bit_on_rank_2_incremental
                     PROPERTIES TIMEOUT 120 LABELS "threaded" ENVIRONMENT "CKPT_TIMEOUT_MS=20000")
add_test(NAME mp_replicas_unmapped_before_checked
         COMMAND sh -c "rm -rf \"$1\" && \"$0\" -n 3 --timeout 60 -- \"$2\" unmapped \"$1\""
                 $<TARGET_FILE:ckpt-launch> ${CMAKE_CURRENT_BINARY_DIR}/scenarios/replicas-unmapped/ckpt
                 $<TARGET_FILE:ckpt_scenario_replicas>)
set_tests_properties(mp_replicas_unmapped_before_checked PROPERTIES TIMEOUT 120 LABELS "threaded"
                     ENVIRONMENT "CKPT_FAULT_STAGING_PAUSE_MS=300;CKPT_TIMEOUT_MS=20000")
ckpt_needs_fault_hooks(mp_replicas_unmapped_before_checked)
