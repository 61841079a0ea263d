# Fuzz targets: the MANIFEST decoder, the TCP store's server, the rank <-> I/O worker protocol and the safetensors
# header and Hugging Face index parsers. Each replays its
# corpus in the tree (tests/fuzz/corpus/<target>: seeds built from real messages by fuzz_write_seeds, and the inputs
# of crashes found and fixed) on every ctest. With clang the targets are libFuzzer binaries, the parsing sources
# compiled into them so that they carry the coverage instrumentation libFuzzer is guided by, and each also fuzzes
# briefly on every ctest; with another compiler, replay_main.cc feeds the corpus to the same entry point.
# A long run: build/tests/<target>_fuzzer -max_total_time=600 <scratch dir> tests/fuzz/corpus/<target>
set(CKPT_FUZZ_CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus)
set(CKPT_FUZZ_WITH_LIBFUZZER OFF)
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  set(CKPT_FUZZ_WITH_LIBFUZZER ON)
endif()

# ckpt_fuzz_target(TARGET SOURCES...): TARGET_fuzzer from tests/fuzz/TARGET_fuzzer.cc; SOURCES are the product
# files it exercises (instrumented for coverage under libFuzzer; otherwise taken from the library like the rest).
function(ckpt_fuzz_target target)
  set(binary ${target}_fuzzer)
  set(corpus ${CKPT_FUZZ_CORPUS}/${target})
  if(CKPT_FUZZ_WITH_LIBFUZZER)
    set(sources ${ARGN})
    list(TRANSFORM sources PREPEND ${PROJECT_SOURCE_DIR}/ REGEX "^[^/]")
    add_executable(${binary} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/${binary}.cc ${sources})
    set(flags -fsanitize=fuzzer)
    if(NOT CKPT_SANITIZE)
      list(APPEND flags -fsanitize=address,undefined -fno-sanitize-recover=undefined)
    endif()
    target_compile_options(${binary} PRIVATE ${flags})
    # Static: a shared ASan runtime would load after the C++ library that libFuzzer brings, which ASan refuses.
    target_link_options(${binary} PRIVATE ${flags} -static-libsan)
    # -runs=0 runs every corpus input once and stops.
    add_test(NAME fuzz_${target}_corpus COMMAND ${binary} -runs=0 ${corpus})
    # New inputs go to the first directory, a scratch one, never into the tree.
    set(scratch ${CMAKE_CURRENT_BINARY_DIR}/fuzz-scratch/${target})
    add_test(NAME fuzz_${target}_briefly
             COMMAND sh -c "rm -rf \"$1\" && mkdir -p \"$1\" && exec \"$0\" -max_total_time=20 -seed=1 \"$1\" \"$2\""
                     $<TARGET_FILE:${binary}> ${scratch} ${corpus})
    set_tests_properties(fuzz_${target}_briefly PROPERTIES TIMEOUT 120)
  else()
    add_executable(${binary} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/${binary}.cc
                             ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/replay_main.cc)
    add_test(NAME fuzz_${target}_corpus COMMAND ${binary} ${corpus})
  endif()
  target_link_libraries(${binary} PRIVATE ckpt_internal)
  set_tests_properties(fuzz_${target}_corpus PROPERTIES TIMEOUT 120)
endfunction()

ckpt_fuzz_target(manifest runtime/format/manifest.cc runtime/core/box.cc runtime/core/dtype.cc
                 ${CMAKE_BINARY_DIR}/runtime/format/manifest.capnp.c++)
ckpt_fuzz_target(store collectives/store/tcp_store_server.cc collectives/store/store_server_connection.cc
                       collectives/store/store_server_loop.cc collectives/store/store_relay.cc
                       collectives/store/store_client_socket.cc
                       collectives/store/store_server_session.cc collectives/store/store_server_requests.cc
                       collectives/store/store_server_collectives.cc collectives/store/store_server_ranks.cc
                       collectives/store/tcp_store_wire.cc collectives/store/store_auth.cc
                       collectives/store/store_handshake.cc collectives/store/store_strangers.cc)
ckpt_fuzz_target(worker_protocol io/worker_protocol.cc)
ckpt_fuzz_target(safetensors_header runtime/format/safetensors.cc runtime/core/box.cc runtime/core/dtype.cc)
target_link_libraries(safetensors_header_fuzzer PRIVATE nlohmann_json::nlohmann_json)

# The seeds in the tree are what fuzz_write_seeds writes today: a protocol change must come with new seeds.
add_executable(fuzz_write_seeds ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/write_seeds.cc)
target_link_libraries(fuzz_write_seeds PRIVATE ckpt_internal)
set(seeds ${CMAKE_CURRENT_BINARY_DIR}/fuzz-seeds)
add_test(NAME fuzz_seeds_are_current
         COMMAND sh -c [=[
rm -rf "$2" && "$0" "$2" || exit 1
for seed in $(cd "$2" && find . -type f); do
  cmp -s "$2/$seed" "$1/$seed" && continue
  echo "tests/fuzz/corpus/$seed is stale: run fuzz_write_seeds tests/fuzz/corpus"
  exit 1
done
echo "every seed is current"]=] $<TARGET_FILE:fuzz_write_seeds> ${CKPT_FUZZ_CORPUS} ${seeds})
