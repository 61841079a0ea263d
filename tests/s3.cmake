# A real S3 server for the S3 backend's tests: a one-host Ceph cluster with radosgw (tools/s3_server.sh), started
# once per ctest run in the build tree, its endpoint and keys in ${CKPT_S3_SERVER_DIR}/env. A test that needs it
# declares FIXTURES_REQUIRED s3_server and reads that file. Skipped, visibly, without Ceph (tools/deps.sh installs it).
set(CKPT_S3_SERVER_DIR ${CMAKE_BINARY_DIR}/s3)
set(CKPT_S3_SERVER_SCRIPT ${PROJECT_SOURCE_DIR}/tools/s3_server.sh)
add_test(NAME s3_server_start COMMAND bash ${CKPT_S3_SERVER_SCRIPT} start ${CKPT_S3_SERVER_DIR})
add_test(NAME s3_server_stop COMMAND bash ${CKPT_S3_SERVER_SCRIPT} stop ${CKPT_S3_SERVER_DIR})
add_test(NAME s3_server_smoke COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/s3/server_smoke.sh ${CKPT_S3_SERVER_DIR}/env)
# Start takes 10-20 s on an idle 2-core machine; the script itself gives up after 120 s (CKPT_S3_START_TIMEOUT).
set_tests_properties(s3_server_start PROPERTIES FIXTURES_SETUP s3_server TIMEOUT 180 SKIP_RETURN_CODE 77)
set_tests_properties(s3_server_stop PROPERTIES FIXTURES_CLEANUP s3_server TIMEOUT 60)
set_tests_properties(s3_server_smoke PROPERTIES FIXTURES_REQUIRED s3_server TIMEOUT 120 SKIP_RETURN_CODE 77)
set_tests_properties(s3_server_start s3_server_stop s3_server_smoke PROPERTIES LABELS s3)
