# The S3 layer's tests: one GoogleTest binary of every tests/s3/**/*.cc (the client's in tests/s3/client, the S3
# file jobs' in tests/s3/io). The suites that need no server run alone; the rest run against the real server of the
# fixture s3_server (tools/s3_server.sh, its env file in ${CMAKE_BINARY_DIR}/s3/env).
file(GLOB_RECURSE CKPT_S3_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/s3/*.cc)
add_executable(ckpt_s3_tests ${CKPT_S3_TEST_SOURCES})
target_link_libraries(ckpt_s3_tests PRIVATE ckpt_internal GTest::gtest_main)
target_include_directories(ckpt_s3_tests PRIVATE ${PROJECT_SOURCE_DIR})
target_compile_definitions(ckpt_s3_tests PRIVATE
                           CKPT_S3_HOSTILE_SERVER="${CMAKE_CURRENT_SOURCE_DIR}/s3/hostile_server.py")

set(CKPT_S3_OFFLINE_SUITES "S3Url.*:S3Xml.*:S3Settings.*:S3SharedConfig.*:S3Hostile.*")
add_test(NAME s3_client_offline COMMAND ckpt_s3_tests --gtest_filter=${CKPT_S3_OFFLINE_SUITES})
set_tests_properties(s3_client_offline PROPERTIES TIMEOUT 180 LABELS "s3;threaded")
add_test(NAME s3_client_server COMMAND ckpt_s3_tests --gtest_filter=-${CKPT_S3_OFFLINE_SUITES})
# Without a server (no Ceph) its tests skip, and so does the ctest test, visibly.
set_tests_properties(s3_client_server PROPERTIES TIMEOUT 300 LABELS s3 FIXTURES_REQUIRED s3_server
                                                 ENVIRONMENT CKPT_S3_TEST_ENV=${CMAKE_BINARY_DIR}/s3/env
                                                 SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\] [0-9]+ test")
