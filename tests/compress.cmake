# Compressed saves (CKPT_SAVE_COMPRESS, CKPT_SHARD_COMPRESS) on 3 real ranks through ckpt-launch
# (tests/integration/scenario_compress.cc): everything compressed, staged after the call or copy-on-write, or one
# tensor alone (raw and compressed boxes in the same files), each loading back exactly whole and in column slices;
# a flipped byte in a compressed file, refused by the load and by verify; the saves that cannot compress, refused;
# an incremental step against a compressed base, referring to its unchanged compressed boxes.
add_executable(ckpt_scenario_compress integration/scenario_compress.cc)
target_link_libraries(ckpt_scenario_compress PRIVATE ckpt_scenario_common ckpt)

set(compress_dir ${CMAKE_CURRENT_BINARY_DIR}/scenarios/compress)
foreach(how IN ITEMS all shard cow)
  add_test(NAME mp_compress_${how}
           COMMAND sh -c "rm -rf \"$1\" && \"$0\" -n 3 --timeout 60 -- \"$2\" save \"$1\" ${how} && \
                          \"$0\" -n 3 --timeout 60 -- \"$2\" load \"$1\" && \
                          \"$0\" -n 2 --timeout 60 -- \"$2\" load \"$1\""
                   $<TARGET_FILE:ckpt-launch> ${compress_dir}/${how} $<TARGET_FILE:ckpt_scenario_compress>)
endforeach()
add_test(NAME mp_compress_flipped_byte
         COMMAND sh -c "rm -rf \"$1\" && \"$0\" -n 3 --timeout 60 -- \"$2\" save \"$1\" all && \
                        \"$0\" -n 1 --timeout 60 -- \"$2\" corrupt \"$1\""
                 $<TARGET_FILE:ckpt-launch> ${compress_dir}/flipped $<TARGET_FILE:ckpt_scenario_compress>)
add_test(NAME mp_compress_refused
         COMMAND sh -c "rm -rf \"$1\" && \"$0\" -n 2 --timeout 60 -- \"$2\" refused \"$1\""
                 $<TARGET_FILE:ckpt-launch> ${compress_dir}/refused $<TARGET_FILE:ckpt_scenario_compress>)
add_test(NAME mp_compress_incremental
         COMMAND sh -c "rm -rf \"$1\" && mkdir -p \"$1\" && \
                        \"$0\" -n 3 --timeout 60 -- \"$2\" increment \"$1/base\" \"$1/next\""
                 $<TARGET_FILE:ckpt-launch> ${compress_dir}/incremental $<TARGET_FILE:ckpt_scenario_compress>)
set_tests_properties(mp_compress_all mp_compress_shard mp_compress_cow mp_compress_flipped_byte mp_compress_refused
                     mp_compress_incremental PROPERTIES TIMEOUT 120 ENVIRONMENT "CKPT_TIMEOUT_MS=10000")
# Under ThreadSanitizer (tools/test.sh) too, and with the I/O threads inside the ranks, where it sees them compress.
set_tests_properties(mp_compress_all mp_compress_cow mp_compress_incremental PROPERTIES LABELS "threaded;rank_io_threads")
