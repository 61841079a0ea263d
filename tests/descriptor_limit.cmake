# The descriptor limit on 48 real ranks (common/descriptor_limit.h): under a soft RLIMIT_NOFILE of 64 (a hard one
# above) the job raises it, saves and loads; under a hard limit of 64 rank 0 fails at context creation naming the
# descriptors it needs. The ranks' I/O runs on threads (CKPT_IO_WORKERS=0), so that 48 ranks start in seconds on two
# cores: the limit is about the connections between ranks.
add_test(NAME mp_48_ranks_raise_a_soft_descriptor_limit_of_64
         COMMAND bash -c "ulimit -Sn 64 && rm -rf \"$2\" && \
                          \"$0\" -n 48 --timeout 100 -- \"$1\" save \"$2\" && \"$0\" -n 48 --timeout 100 -- \"$1\" load \"$2\""
                 $<TARGET_FILE:ckpt-launch> $<TARGET_FILE:ckpt_scenario_core>
                 ${CMAKE_CURRENT_BINARY_DIR}/scenarios/descriptors-soft/ckpt)
add_test(NAME mp_48_ranks_under_a_hard_descriptor_limit_of_64_are_refused_naming_it
         COMMAND bash -c "ulimit -n 64 && rm -rf \"$2\" && \
                          if out=$(\"$0\" -n 48 --timeout 100 -- \"$1\" save \"$2\" 2>&1); then echo 'the save ran'; exit 1; fi; \
                          echo \"$out\" | grep -q 'rank 0 of 48 needs at least 206 file descriptors' || \
                            { echo \"$out\" | tail -5; exit 1; }; [ ! -e \"$2\" ]"
                 $<TARGET_FILE:ckpt-launch> $<TARGET_FILE:ckpt_scenario_core>
                 ${CMAKE_CURRENT_BINARY_DIR}/scenarios/descriptors-hard/ckpt)
set_tests_properties(mp_48_ranks_raise_a_soft_descriptor_limit_of_64
                     mp_48_ranks_under_a_hard_descriptor_limit_of_64_are_refused_naming_it
                     PROPERTIES TIMEOUT 240 ENVIRONMENT "CKPT_IO_WORKERS=0;CKPT_TIMEOUT_MS=60000")
