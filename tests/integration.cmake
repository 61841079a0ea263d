# Multi-process scenarios (tests/integration/run.sh): real rank processes started by ckpt-launch, over loopback.
# One program per area, all in one folder that run.sh is given, sharing the helpers of scenario_common.
add_library(ckpt_scenario_common STATIC integration/scenario_common.cc)
target_link_libraries(ckpt_scenario_common PUBLIC ckpt)
foreach(area core async exchange control)
  add_executable(ckpt_scenario_${area} integration/scenario_${area}.cc)
  target_link_libraries(ckpt_scenario_${area} PRIVATE ckpt_scenario_common ckpt)
endforeach()
# Damages a tensor's chunk records in a MANIFEST behind a resealed checksum (mp_manifest-bad-chunk).
add_executable(ckpt_manifest_tamper integration/manifest_tamper.cc)
target_link_libraries(ckpt_manifest_tamper PRIVATE ckpt_internal)
# Device buffers across ranks; links the internal library for its CUDA loader, so it names the worker explicitly.
add_executable(ckpt_cuda_scenario integration/cuda_scenario.cc)
target_link_libraries(ckpt_cuda_scenario PRIVATE ckpt_internal)
# Device shards saved on 3 ranks and loaded on 2 and on 4, exchanging over the transport named (CKPT_LOAD_READS=once:
# ranks on one node with local storage might read their own pieces instead).
foreach(transport ucx nccl)
  add_test(NAME mp_cuda_reshard_over_${transport}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/cuda_reshard.sh $<TARGET_FILE:ckpt-launch>
                   $<TARGET_FILE:ckpt_cuda_scenario> ${CMAKE_CURRENT_BINARY_DIR}/scenarios/cuda-reshard-${transport}
                   ${transport})
  set_tests_properties(mp_cuda_reshard_over_${transport} PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                       ENVIRONMENT
                       "CKPT_WORKER_PATH=$<TARGET_FILE:ckpt-io-worker>;CKPT_TRANSPORT=${transport};CKPT_LOAD_READS=once")
endforeach()
foreach(name reshard reshard-in-place manifest-sections dedup invalid-overlap invalid-gap invalid-dtype invalid-shape exists corrupt-byte
             truncated-file missing-manifest foreign-manifest corrupt-manifest manifest-bad-chunk newer-version strictness
             shape-mismatch dtype-cast dead-rank async plan-cache worker-killed big-state full-disk read-once
             reshard-no-exchange peer-dies-in-exchange peer-dies-in-later-round worker-missing without-ucx io-error
             short-transfers mismatched-collectives rank0-dies-mid-save manager-rank0-dies stopped-peer
             launchers-store-port launchers-mpich launchers-slurm peer-stops-in-exchange peer-stops-in-exchange-32
             peer-stops-in-exchange-32-grid
             request-stats read-once-3to5-columns read-once-4to3-rows read-once-2to7-rows read-once-many-rounds
             kept-read-corrupt sent-read-corrupt read-once-scattered read-once-small-shared peer-grid
             exchange-buffers-in-arena)
  add_test(NAME mp_${name}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/run.sh ${name} $<TARGET_FILE:ckpt-launch>
                   $<TARGET_FILE_DIR:ckpt_scenario_core> ${CMAKE_CURRENT_BINARY_DIR}/scenarios/${name})
  set_tests_properties(mp_${name} PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77 LABELS "threaded;rank_io_threads")
endforeach()
ckpt_needs_fault_hooks(mp_peer-dies-in-exchange mp_peer-dies-in-later-round mp_peer-stops-in-exchange
                       mp_peer-stops-in-exchange-32 mp_peer-stops-in-exchange-32-grid mp_io-error mp_short-transfers mp_read-once-many-rounds
                       mp_read-once-scattered mp_read-once-small-shared)
# Labels of the scenarios above: their ranks run threads (threaded), and each but those about the I/O worker
# processes runs as well with the ranks' I/O on threads inside them, CKPT_IO_WORKERS=0 (rank_io_threads).
set_tests_properties(mp_worker-killed mp_worker-missing PROPERTIES LABELS threaded)
# No label for those whose rank 0 dies by _exit right after ckpt_save returns, expecting its commit never to happen:
# ThreadSanitizer's _exit first finalizes its reports while the process's other threads go on, long enough for the
# save thread to commit.
set_tests_properties(mp_rank0-dies-mid-save mp_manager-rank0-dies PROPERTIES LABELS "")
# A job that starts while strangers flood its store's port (tests/integration/store_flood.sh).
add_test(NAME mp_store-flood
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/store_flood.sh $<TARGET_FILE:ckpt-launch>
                 $<TARGET_FILE:ckpt_scenario_control> ${CMAKE_CURRENT_BINARY_DIR}/scenarios/store-flood)
set_tests_properties(mp_store-flood PROPERTIES TIMEOUT 120 LABELS "threaded;rank_io_threads")

# The memory tier: real ranks and a real ckpt-agent (tests/integration/memory_tier.sh).
add_executable(ckpt_scenario_memory integration/scenario_memory.cc)
target_link_libraries(ckpt_scenario_memory PRIVATE ckpt_scenario_common ckpt)
foreach(name crash-persists in-place-persists restart-from-memory reshard-from-memory crash-mid-save storage-every
             over-budget agent-dies writes-after-staging larger-than-arena
             recycles impostor-directory impostor-listens)
  add_test(NAME mp_memory_${name}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/memory_tier.sh ${name} $<TARGET_FILE:ckpt-launch>
                   $<TARGET_FILE:ckpt_scenario_memory> $<TARGET_FILE:ckpt_cli>
                   ${CMAKE_CURRENT_BINARY_DIR}/scenarios/memory-${name})
  set_tests_properties(mp_memory_${name} PROPERTIES TIMEOUT 120)
endforeach()
# Posing as another user (uid 65534) needs root: without it they skip.
set_tests_properties(mp_memory_impostor-directory mp_memory_impostor-listens PROPERTIES SKIP_RETURN_CODE 77)

# The memory tier across hosts (network namespaces, an agent on each): tests/integration/memory_hosts.sh.
foreach(part crash-persists node-lost replaced-then-crash reshard lost-without-replicas agent-dies three-hosts
        holder-dies-mid-fetch)
  add_test(NAME mp_memory_hosts_${part}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/memory_hosts.sh ${part}
                   $<TARGET_FILE:ckpt_scenario_memory> $<TARGET_FILE:ckpt_cli>
                   ${CMAKE_CURRENT_BINARY_DIR}/scenarios/memory-hosts-${part})
  set_tests_properties(mp_memory_hosts_${part} PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
endforeach()
ckpt_needs_fault_hooks(mp_memory_hosts_holder-dies-mid-fetch mp_memory_writes-after-staging)

# A job across two hosts (network namespaces) started with SLURM's variables alone.
add_test(NAME mp_slurm_two_hosts
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/slurm_two_hosts.sh $<TARGET_FILE:ckpt_scenario_control>
                 ${CMAKE_CURRENT_BINARY_DIR}/scenarios/slurm-two-hosts)
set_tests_properties(mp_slurm_two_hosts PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)

# Jobs on three hosts (network namespaces on one bridge), two ranks each: a save loaded back on two of the hosts,
# and a save during which one host's link is cut (tests/integration/three_hosts.sh).
add_executable(ckpt_scenario_hosts integration/scenario_hosts.cc)
target_link_libraries(ckpt_scenario_hosts PRIVATE ckpt_scenario_common ckpt)
foreach(part save-load link-cut-mid-save s3-save-load)
  string(REPLACE "-" "_" test_part ${part})
  add_test(NAME mp_three_hosts_${test_part}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/three_hosts.sh ${part}
                   $<TARGET_FILE:ckpt_scenario_hosts> $<TARGET_FILE:ckpt_scenario_control> $<TARGET_FILE:ckpt_cli>
                   ${CMAKE_CURRENT_BINARY_DIR}/scenarios/three-hosts-${part})
  set_tests_properties(mp_three_hosts_${test_part} PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
endforeach()

# The user-allgather bootstrap, under a real MPI launcher (only where MPI is installed).
find_package(MPI COMPONENTS C QUIET)
find_program(CKPT_MPIEXEC NAMES mpirun mpiexec)
if(MPI_C_FOUND AND CKPT_MPIEXEC)
  add_executable(ckpt_mpi_bootstrap integration/mpi_bootstrap.c)
  target_link_libraries(ckpt_mpi_bootstrap PRIVATE ckpt MPI::MPI_C)
  add_test(NAME mp_mpi_allgather_bootstrap
           COMMAND bash -c "rm -rf \"$2\" && \"$0\" --allow-run-as-root --oversubscribe -np 3 \"$1\" \"$2\""
                   ${CKPT_MPIEXEC} $<TARGET_FILE:ckpt_mpi_bootstrap> ${CMAKE_CURRENT_BINARY_DIR}/scenarios/mpi-bootstrap)
  set_tests_properties(mp_mpi_allgather_bootstrap PROPERTIES TIMEOUT 120)
  # The job's own collectives (ckpt_collectives over MPI): the TCP store carries no collective.
  add_executable(ckpt_mpi_collectives integration/mpi_collectives.c)
  target_link_libraries(ckpt_mpi_collectives PRIVATE ckpt MPI::MPI_C)
  add_test(NAME mp_mpi_collectives_table
           COMMAND bash -c "rm -rf \"$2\" && mkdir -p \"$2\" && \"$0\" --allow-run-as-root --oversubscribe -np 4 \"$1\" \"$2\""
                   ${CKPT_MPIEXEC} $<TARGET_FILE:ckpt_mpi_collectives> ${CMAKE_CURRENT_BINARY_DIR}/scenarios/mpi-collectives)
  set_tests_properties(mp_mpi_collectives_table PROPERTIES TIMEOUT 120)
  if(CKPT_SANITIZE MATCHES "address")
    # Open MPI's plugins leave their allocations behind when they are unloaded at exit, past any suppression.
    set_property(TEST mp_mpi_allgather_bootstrap mp_mpi_collectives_table APPEND PROPERTY ENVIRONMENT
                 ASAN_OPTIONS=detect_leaks=0)
  endif()
else()
  message(STATUS "MPI not found: the allgather-bootstrap test is not built")
endif()
