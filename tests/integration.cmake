# Multi-process scenarios (tests/integration/run.sh): real rank processes started by ckpt-launch, over loopback.
add_executable(ckpt_scenario integration/scenario.cc)
target_link_libraries(ckpt_scenario PRIVATE ckpt)
foreach(name reshard dedup invalid-overlap invalid-gap invalid-dtype invalid-shape exists corrupt-byte
             truncated-file missing-manifest foreign-manifest corrupt-manifest newer-version strictness
             shape-mismatch dead-rank async plan-cache worker-killed big-state full-disk)
  add_test(NAME mp_${name}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/run.sh ${name} $<TARGET_FILE:ckpt-launch>
                   $<TARGET_FILE:ckpt_scenario> ${CMAKE_CURRENT_BINARY_DIR}/scenarios/${name})
  set_tests_properties(mp_${name} PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77)
endforeach()
