# The Rust binding (bindings/rust): cargo builds the crate against this build's libckpt and runs its unit tests and
# its multi-process save/load tests. No Rust package registry is reachable, and the crate needs none. Without cargo
# the test reports itself skipped, with the reason, instead of passing.
find_program(CKPT_CARGO cargo HINTS $ENV{CARGO_HOME}/bin $ENV{HOME}/.cargo/bin)

if(CKPT_CARGO)
  add_test(NAME rust_binding
           COMMAND ${CKPT_CARGO} test --manifest-path ${PROJECT_SOURCE_DIR}/bindings/rust/Cargo.toml
                   --target-dir ${CMAKE_CURRENT_BINARY_DIR}/rust-target)
  set_tests_properties(rust_binding PROPERTIES
                       ENVIRONMENT "CKPT_LIB_DIR=$<TARGET_FILE_DIR:ckpt>;CKPT_ABI_TABLE=${CKPT_ABI_TABLE};CARGO_NET_OFFLINE=true"
                       TIMEOUT 600)
  if(CKPT_ASAN_RUNTIME)
    # rustc itself crashes with the ASan runtime preloaded: only cargo's test programs get it, through a runner.
    string(TOUPPER "CARGO_TARGET_${CMAKE_SYSTEM_PROCESSOR}_UNKNOWN_LINUX_GNU_RUNNER" runner_variable)
    set_property(TEST rust_binding APPEND PROPERTY ENVIRONMENT
                 "${runner_variable}=env LD_PRELOAD=${CKPT_ASAN_RUNTIME} ASAN_OPTIONS=detect_leaks=0")
  endif()
else()
  add_test(NAME rust_binding COMMAND sh -c "echo 'cargo not found: Rust binding not tested'; exit 77")
  set_tests_properties(rust_binding PROPERTIES SKIP_RETURN_CODE 77)
endif()
