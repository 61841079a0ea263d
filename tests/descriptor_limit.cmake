# The descriptor limit on 48 real ranks (common/descriptor_limit.h): under a soft RLIMIT_NOFILE of 64 (a hard one
# above) the job raises it, saves and loads; under a hard limit of 64, which cannot hold a link and two store
# connections per rank at rank 0 (206), rank 0 lays the job out in a grid of 7 x 7 with store relays for rows of 5
# (collectives/store/store_relay.h) and the job saves and loads all the same; under a hard limit of 40, below even
# the grid's 52 at rank 0, rank 0 fails at context creation naming the descriptors it needs. The ranks' I/O runs on
# threads (CKPT_IO_WORKERS=0), so that 48 ranks start in seconds on two cores, and without a data transport
# (CKPT_TRANSPORT=none: each rank reads its own pieces) under the hard limits, which are about the connections of the
# control plane: a rank's UCX endpoints go to its own host's ranks over shared memory, and over the network only to
# the ranks it exchanges tensor data with (bench/scale's scale_exchange_peers_per_rank_max).
add_test(NAME mp_48_ranks_raise_a_soft_descriptor_limit_of_64
         COMMAND bash -c "ulimit -Sn 64 && rm -rf \"$2\" && \
                          \"$0\" -n 48 --timeout 100 -- \"$1\" save \"$2\" && \"$0\" -n 48 --timeout 100 -- \"$1\" load \"$2\""
                 $<TARGET_FILE:ckpt-launch> $<TARGET_FILE:ckpt_scenario_core>
                 ${CMAKE_CURRENT_BINARY_DIR}/scenarios/descriptors-soft/ckpt)
add_test(NAME mp_48_ranks_save_and_load_in_a_grid_with_store_relays_under_a_hard_descriptor_limit_of_64
         COMMAND bash -c "ulimit -n 64 && rm -rf \"$2\" \"$2.log\" && mkdir -p \"$(dirname \"$2\")\" && \
                          \"$0\" -n 48 --timeout 100 -- \"$1\" save \"$2\" 2> \"$2.log\" && \
                          \"$0\" -n 48 --timeout 100 -- \"$1\" load \"$2\" && \
                          grep -q 'grid of 7 x 7.*descriptor limit.*relay on one of its ranks' \"$2.log\" || \
                            { tail -5 \"$2.log\"; exit 1; }"
                 $<TARGET_FILE:ckpt-launch> $<TARGET_FILE:ckpt_scenario_core>
                 ${CMAKE_CURRENT_BINARY_DIR}/scenarios/descriptors-hard/ckpt)
add_test(NAME mp_48_ranks_under_a_hard_descriptor_limit_of_40_are_refused_naming_it
         COMMAND bash -c "ulimit -n 40 && rm -rf \"$2\" && \
                          if out=$(\"$0\" -n 48 --timeout 100 -- \"$1\" save \"$2\" 2>&1); then echo 'the save ran'; exit 1; fi; \
                          echo \"$out\" | grep -q 'rank 0 of 48 needs at least 52 file descriptors' || \
                            { echo \"$out\" | tail -5; exit 1; }; [ ! -e \"$2\" ]"
                 $<TARGET_FILE:ckpt-launch> $<TARGET_FILE:ckpt_scenario_core>
                 ${CMAKE_CURRENT_BINARY_DIR}/scenarios/descriptors-refused/ckpt)
set_tests_properties(mp_48_ranks_raise_a_soft_descriptor_limit_of_64 PROPERTIES TIMEOUT 240
                     ENVIRONMENT "CKPT_IO_WORKERS=0;CKPT_TIMEOUT_MS=60000")
set_tests_properties(mp_48_ranks_save_and_load_in_a_grid_with_store_relays_under_a_hard_descriptor_limit_of_64
                     mp_48_ranks_under_a_hard_descriptor_limit_of_40_are_refused_naming_it
                     PROPERTIES TIMEOUT 240
                                ENVIRONMENT "CKPT_IO_WORKERS=0;CKPT_TIMEOUT_MS=60000;CKPT_TRANSPORT=none;CKPT_LOG_LEVEL=info")
