# The MANIFEST decoder fuzzer: libFuzzer ships with clang only, so other compilers skip it. The decoder's sources are
# compiled into the fuzzer itself so that they carry the coverage instrumentation libFuzzer is guided by.
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  set(CKPT_FUZZ_FLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
  add_executable(manifest_fuzzer
    ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/manifest_fuzzer.cc
    ${PROJECT_SOURCE_DIR}/runtime/manifest.cc
    ${PROJECT_SOURCE_DIR}/runtime/box.cc
    ${PROJECT_SOURCE_DIR}/runtime/dtype.cc
    ${PROJECT_SOURCE_DIR}/io/checksum.cc
    ${PROJECT_SOURCE_DIR}/io/file_io.cc
    ${CMAKE_BINARY_DIR}/runtime/manifest.capnp.c++)
  add_dependencies(manifest_fuzzer ckpt_objects)  # generates manifest.capnp.c++
  target_include_directories(manifest_fuzzer PRIVATE ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/runtime)
  target_compile_options(manifest_fuzzer PRIVATE ${CKPT_FUZZ_FLAGS})
  target_link_options(manifest_fuzzer PRIVATE ${CKPT_FUZZ_FLAGS})
  target_link_libraries(manifest_fuzzer PRIVATE CapnProto::capnp PkgConfig::XXHASH)
  # A short run on every ctest, so that a decoder crash on simple mutations fails the suite.
  add_test(NAME manifest_fuzz_smoke COMMAND manifest_fuzzer -runs=20000 -seed=1)
  set_tests_properties(manifest_fuzz_smoke PROPERTIES TIMEOUT 120)
endif()
