# Multi-process scenarios (tests/integration/run.sh): real rank processes started by ckpt-launch, over loopback.
add_executable(ckpt_scenario integration/scenario.cc)
target_link_libraries(ckpt_scenario PRIVATE ckpt)
foreach(name reshard dedup invalid-overlap invalid-gap invalid-dtype invalid-shape exists corrupt-byte
             truncated-file missing-manifest foreign-manifest corrupt-manifest newer-version strictness
             shape-mismatch dead-rank async plan-cache worker-killed big-state full-disk read-once
             reshard-no-exchange peer-dies-in-exchange worker-missing)
  add_test(NAME mp_${name}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/run.sh ${name} $<TARGET_FILE:ckpt-launch>
                   $<TARGET_FILE:ckpt_scenario> ${CMAKE_CURRENT_BINARY_DIR}/scenarios/${name})
  set_tests_properties(mp_${name} PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77)
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
else()
  message(STATUS "MPI not found: the allgather-bootstrap test is not built")
endif()
