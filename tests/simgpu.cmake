# The GPU simulator: stand-ins for libcudart.so.13 and libnccl.so.2 (tests/simgpu/), so ckpt's CUDA and NCCL code
# runs in CI on machines without a GPU. Tests put ${CMAKE_BINARY_DIR}/simgpu first on LD_LIBRARY_PATH, where ckpt's
# dlopen finds the stand-ins before any real CUDA.
set(CKPT_SIMGPU_DIR ${CMAKE_BINARY_DIR}/simgpu)
set(CKPT_SIMGPU_SOURCE ${CMAKE_CURRENT_SOURCE_DIR}/simgpu)

# simgpu_library(TARGET NAME SOVERSION SOURCES...): lib<NAME>.so.<SOVERSION> in the simulator's folder, exporting
# only what its sources mark SIMGPU_EXPORT.
function(simgpu_library target name soversion)
  add_library(${target} SHARED ${ARGN})
  set_target_properties(${target} PROPERTIES OUTPUT_NAME ${name} SOVERSION ${soversion}
                        LIBRARY_OUTPUT_DIRECTORY ${CKPT_SIMGPU_DIR}
                        CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror)
  # Never unloaded, like the real libraries: stream threads and fork handlers must outlive any dlclose.
  target_link_options(${target} PRIVATE -Wl,--no-undefined -Wl,-z,nodelete)
  target_link_libraries(${target} PRIVATE Threads::Threads)
  if(CKPT_SANITIZE MATCHES "undefined" AND CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    # The real libraries are C: ckpt calls them through pointers to its own declarations of their structs, which
    # clang's check of indirect calls would take for a mismatch against the stand-ins' C++ types.
    target_compile_options(${target} PRIVATE -fno-sanitize=function)
  endif()
endfunction()

simgpu_library(simgpu_cudart cudart 13 ${CKPT_SIMGPU_SOURCE}/sim_cudart.cc ${CKPT_SIMGPU_SOURCE}/sim_memory.cc
               ${CKPT_SIMGPU_SOURCE}/sim_stream.cc ${CKPT_SIMGPU_SOURCE}/sim_config.cc)
simgpu_library(simgpu_nccl nccl 2 ${CKPT_SIMGPU_SOURCE}/sim_nccl.cc ${CKPT_SIMGPU_SOURCE}/sim_nccl_comm.cc
               ${CKPT_SIMGPU_SOURCE}/sim_nccl_group.cc ${CKPT_SIMGPU_SOURCE}/sim_config.cc)
# NCCL needs the runtime's streams and memory: one process-wide simulator, found beside it.
target_link_libraries(simgpu_nccl PRIVATE simgpu_cudart)
set_target_properties(simgpu_nccl PROPERTIES BUILD_RPATH "$ORIGIN")

# The stand-ins' own tests; they link the stand-ins directly.
add_executable(simgpu_self_tests ${CKPT_SIMGPU_SOURCE}/test_sim_cudart.cc ${CKPT_SIMGPU_SOURCE}/test_sim_nccl.cc
               ${CKPT_SIMGPU_SOURCE}/test_sim_nccl_rank.cc
               ${CKPT_SIMGPU_SOURCE}/test_sim_main.cc)
target_include_directories(simgpu_self_tests PRIVATE ${PROJECT_SOURCE_DIR})
target_compile_options(simgpu_self_tests PRIVATE -Wall -Wextra -Werror)
target_link_libraries(simgpu_self_tests PRIVATE simgpu_cudart simgpu_nccl GTest::gtest Threads::Threads)
add_test(NAME simgpu_self_tests COMMAND simgpu_self_tests)
set_tests_properties(simgpu_self_tests PROPERTIES TIMEOUT 120)
if(CKPT_SANITIZE MATCHES "address")
  # Its death tests expect the SIGSEGV of a host read of device memory, which ASan would catch first.
  set_property(TEST simgpu_self_tests APPEND PROPERTY ENVIRONMENT_MODIFICATION ASAN_OPTIONS=path_list_append:handle_segv=0)
endif()

# ckpt's NCCL transport across processes, over the simulated NCCL.
add_executable(simgpu_nccl_transport_mp ${CKPT_SIMGPU_SOURCE}/nccl_transport_mp.cc)
target_compile_options(simgpu_nccl_transport_mp PRIVATE -Wall -Wextra -Werror)
target_link_libraries(simgpu_nccl_transport_mp PRIVATE ckpt_internal)

# Every test below runs under the simulator.
set(CKPT_SIMGPU_RUN bash ${CKPT_SIMGPU_SOURCE}/run_under_simgpu.sh ${CKPT_SIMGPU_DIR})

# ckpt's own CUDA and NCCL unit tests (tests/unit/gpu/test_cuda_runtime.cc,
# gpu/test_cuda_shards.cc, collectives/test_nccl_transport.cc),
# which skip without a device: here a skip is a failure. Left out: the tests of a machine without a device.
set(CKPT_SIMGPU_NO_DEVICE_TESTS
    "CudaRuntimeTest.PresentLibraryWithoutDeviceSaysThereIsNoDevice:NcclTransportTest.UnavailableWithoutCudaDeviceIsUnsupportedWithTheReason:CudaShardWithoutDeviceTest.*")
set(CKPT_SIMGPU_UNIT_FILTER
    "CudaRuntimeTest.*:CudaDeviceTest.*:CudaShardTest.*:NcclProtocolTest.*:NcclSelfExchangeTest.*:-${CKPT_SIMGPU_NO_DEVICE_TESTS}")
add_test(NAME simgpu_unit
         COMMAND ${CKPT_SIMGPU_RUN} --no-skips $<TARGET_FILE:ckpt_unit_tests> --gtest_filter=${CKPT_SIMGPU_UNIT_FILTER})
set_tests_properties(simgpu_unit PROPERTIES TIMEOUT 180)
# The simulator with no device (cudaGetDeviceCount fails with cudaErrorNoDevice): those tests must run and pass.
add_test(NAME simgpu_unit_without_device
         COMMAND ${CKPT_SIMGPU_RUN} --no-skips $<TARGET_FILE:ckpt_unit_tests> --gtest_filter=${CKPT_SIMGPU_NO_DEVICE_TESTS})
set_tests_properties(simgpu_unit_without_device PROPERTIES TIMEOUT 60 ENVIRONMENT CKPT_SIMGPU_DEVICES=0)

# simgpu_cuda_reshard(NAME TRANSPORT EXPECTED DEVICES): tests/integration.cmake's mp_cuda_reshard_over_<transport>
# under the simulator with DEVICES devices, where a skip (exit 77) fails: 3 ranks save device column slabs, 2 and
# then 4 load them with CKPT_TRANSPORT=TRANSPORT and check that each load used EXPECTED.
function(simgpu_cuda_reshard name transport expected devices)
  add_test(NAME ${name}
           COMMAND ${CKPT_SIMGPU_RUN} bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/cuda_reshard.sh
                   $<TARGET_FILE:ckpt-launch> $<TARGET_FILE:ckpt_cuda_scenario>
                   ${CMAKE_CURRENT_BINARY_DIR}/scenarios/${name} ${expected})
  set_tests_properties(${name} PROPERTIES TIMEOUT 120 ENVIRONMENT
                       "CKPT_WORKER_PATH=$<TARGET_FILE:ckpt-io-worker>;CKPT_TRANSPORT=${transport};CKPT_SIMGPU_DEVICES=${devices}")
endfunction()

simgpu_cuda_reshard(simgpu_mp_cuda_reshard_over_ucx ucx ucx 4)
simgpu_cuda_reshard(simgpu_mp_cuda_reshard_over_nccl nccl nccl 4)
# Every rank on device 0: NCCL refuses them ("Duplicate GPU detected") and every rank falls back to UCX.
simgpu_cuda_reshard(simgpu_mp_cuda_reshard_auto_on_shared_devices auto ucx 1)

# A rank dies right before a device-to-device exchange: the survivors fail cleanly, none hangs.
add_test(NAME simgpu_mp_cuda_peer_dies_over_nccl
         COMMAND ${CKPT_SIMGPU_RUN} bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/cuda_reshard.sh
                 $<TARGET_FILE:ckpt-launch> $<TARGET_FILE:ckpt_cuda_scenario>
                 ${CMAKE_CURRENT_BINARY_DIR}/scenarios/simgpu_mp_cuda_peer_dies_over_nccl nccl peer-dies)
set_tests_properties(simgpu_mp_cuda_peer_dies_over_nccl PROPERTIES TIMEOUT 120 ENVIRONMENT
                     "CKPT_WORKER_PATH=$<TARGET_FILE:ckpt-io-worker>;CKPT_TRANSPORT=nccl;CKPT_SIMGPU_DEVICES=4")
ckpt_needs_fault_hooks(simgpu_mp_cuda_peer_dies_over_nccl)

# Replicas in device memory checked against each other (CKPT_SAVE_CHECK_REPLICAS): one element of the last rank's
# replicated "b" differs, and the save fails naming it, committing nothing.
add_test(NAME simgpu_mp_cuda_flipped_replica
         COMMAND ${CKPT_SIMGPU_RUN} sh -c "rm -rf \"$2\" && \"$0\" -n 3 -- \"$1\" save-flipped-replica \"$2\" && \
                                          [ ! -e \"$2\" ] || { echo \"a checkpoint was committed at $2\"; exit 1; }"
                 $<TARGET_FILE:ckpt-launch> $<TARGET_FILE:ckpt_cuda_scenario>
                 ${CMAKE_CURRENT_BINARY_DIR}/scenarios/simgpu_mp_cuda_flipped_replica/ckpt)
set_tests_properties(simgpu_mp_cuda_flipped_replica PROPERTIES TIMEOUT 120 ENVIRONMENT
                     "CKPT_WORKER_PATH=$<TARGET_FILE:ckpt-io-worker>;CKPT_SIMGPU_DEVICES=4")

# An incremental save of shards in device memory (CKPT_SAVE_INCREMENTAL), hashed there: unchanged since its base, it
# writes no tensor bytes (its data directory holds no file over 4 KiB) and loads back exactly on another number of
# ranks.
add_test(NAME simgpu_mp_cuda_incremental
         COMMAND ${CKPT_SIMGPU_RUN} sh -c "rm -rf \"$2\" \"$2-base\" && \"$0\" -n 2 -- \"$1\" save-incremental \"$2\" && \
                                          [ -z \"$(find \"$2/data\" -type f -size +4k)\" ] && \
                                          \"$0\" -n 3 -- \"$1\" load \"$2\""
                 $<TARGET_FILE:ckpt-launch> $<TARGET_FILE:ckpt_cuda_scenario>
                 ${CMAKE_CURRENT_BINARY_DIR}/scenarios/simgpu_mp_cuda_incremental/ckpt)
set_tests_properties(simgpu_mp_cuda_incremental PROPERTIES TIMEOUT 120 ENVIRONMENT
                     "CKPT_WORKER_PATH=$<TARGET_FILE:ckpt-io-worker>;CKPT_SIMGPU_DEVICES=4")

# A compressed save of shards in device memory (CKPT_SAVE_COMPRESS): staged to the host, compressed by the workers
# (format 3.0), loaded back exactly into device memory on another number of ranks.
add_test(NAME simgpu_mp_cuda_compressed
         COMMAND ${CKPT_SIMGPU_RUN} sh -c "rm -rf \"$2\" && \"$0\" -n 2 -- \"$1\" save-compressed \"$2\" && \
                                          \"$3\" ls --json \"$2\" | grep -q '\"format\": \"3.0\"' && \
                                          \"$0\" -n 3 -- \"$1\" load \"$2\""
                 $<TARGET_FILE:ckpt-launch> $<TARGET_FILE:ckpt_cuda_scenario>
                 ${CMAKE_CURRENT_BINARY_DIR}/scenarios/simgpu_mp_cuda_compressed/ckpt $<TARGET_FILE:ckpt_cli>)
set_tests_properties(simgpu_mp_cuda_compressed PROPERTIES TIMEOUT 120 ENVIRONMENT
                     "CKPT_WORKER_PATH=$<TARGET_FILE:ckpt-io-worker>;CKPT_SIMGPU_DEVICES=4")

add_test(NAME simgpu_mp_nccl_transport
         COMMAND ${CKPT_SIMGPU_RUN} bash ${CKPT_SIMGPU_SOURCE}/nccl_transport_mp.sh $<TARGET_FILE:ckpt-launch>
                 $<TARGET_FILE:simgpu_nccl_transport_mp>)
set_tests_properties(simgpu_mp_nccl_transport PROPERTIES TIMEOUT 120 ENVIRONMENT CKPT_SIMGPU_DEVICES=4)
