# How loads read (runtime/load/read_strategy.h), on 4 real ranks over UCX through ckpt-launch: the strategy each load
# chooses, its read amplification, and every element (tests/integration/scenario_reads.cc). The ranks share one node
# and an ext4 or tmpfs build folder, unless --node-names puts them on two.
add_executable(ckpt_scenario_reads integration/scenario_reads.cc)
target_link_libraries(ckpt_scenario_reads PRIVATE ckpt_scenario_common ckpt)

set(CKPT_READS_CHECKPOINT ${CMAKE_CURRENT_BINARY_DIR}/scenarios/load-reads/ckpt)
# ckpt_reads_test(NAME ENV LAUNCH_ARGS... -- PROGRAM MODE ARGS...): the scenario program on 4 ranks, over UCX
# unless ENV names another transport.
function(ckpt_reads_test name env)
  if(NOT env MATCHES "CKPT_TRANSPORT=")
    set(env "CKPT_TRANSPORT=ucx;${env}")
  endif()
  add_test(NAME load_reads_${name}
           COMMAND $<TARGET_FILE:ckpt-launch> -n 4 --timeout 60 ${ARGN})
  set_tests_properties(load_reads_${name} PROPERTIES TIMEOUT 120 FIXTURES_REQUIRED load_reads_checkpoint
                       ENVIRONMENT "${env}")
endfunction()

add_test(NAME load_reads_save
         COMMAND sh -c "rm -rf \"$1\" && \"$0\" -n 4 --timeout 60 -- \"$2\" save \"$1\""
                 $<TARGET_FILE:ckpt-launch> ${CKPT_READS_CHECKPOINT} $<TARGET_FILE:ckpt_scenario_reads>)
set_tests_properties(load_reads_save PROPERTIES TIMEOUT 120 FIXTURES_SETUP load_reads_checkpoint)

set(reads $<TARGET_FILE:ckpt_scenario_reads>)
# Disjoint shards on one node: each rank reads its own, exactly the stored bytes, and nothing is exchanged.
ckpt_reads_test(disjoint_shards_read_own "" -- ${reads} load-shards ${CKPT_READS_CHECKPOINT} own 1000 1000)
# The same ranks on two nodes: read once.
ckpt_reads_test(disjoint_shards_on_two_nodes_read_once "" --node-names a,a,b,b --
                ${reads} load-shards ${CKPT_READS_CHECKPOINT} once 1000 1000)
# Every rank loading the whole state: own reads would read it 4 times, so read once (amplification 1, not 4).
ckpt_reads_test(replicated_state_reads_once "" -- ${reads} load-whole ${CKPT_READS_CHECKPOINT} once 1000 1000)
# CKPT_LOAD_READS forces either: own reads of the replicated state read it 4 times; disjoint shards read once.
ckpt_reads_test(forced_own_reads_every_copy "CKPT_LOAD_READS=own" --
                ${reads} load-whole ${CKPT_READS_CHECKPOINT} own 4000 4000)
ckpt_reads_test(forced_once_exchanges_shards "CKPT_LOAD_READS=once" --
                ${reads} load-shards ${CKPT_READS_CHECKPOINT} once 1000 1000)
# Without a transport every rank reads its own, whatever the setting (CKPT_LOAD_READS=once is logged).
ckpt_reads_test(without_transport_reads_own "CKPT_LOAD_READS=once;CKPT_TRANSPORT=none" --
                ${reads} load-whole ${CKPT_READS_CHECKPOINT} own 4000 4000)
# An invalid setting fails the load on every rank, naming it (CKPT_E_INVALID_ARGUMENT); so do ranks that disagree
# (CKPT_E_MISMATCH).
ckpt_reads_test(invalid_setting_refused "CKPT_LOAD_READS=sometimes" --
                ${reads} load-refused ${CKPT_READS_CHECKPOINT} 1 "CKPT_LOAD_READS='sometimes': expected auto, once or own")
ckpt_reads_test(settings_differ_refused "" -- sh -c "[ \"$RANK\" != 2 ] || export CKPT_LOAD_READS=own && exec \"$0\" \"$@\""
                ${reads} load-refused ${CKPT_READS_CHECKPOINT} 4 "CKPT_LOAD_READS is 'own' on rank 2 but 'auto' on rank 0")
