# The Rust binding (bindings/rust): cargo builds the crate against this build's libckpt and runs its unit tests and
# its multi-process save/load tests. No Rust package registry is reachable, and the crate needs none. Without cargo
# the test reports itself skipped, with the reason, instead of passing.
find_program(CKPT_CARGO cargo HINTS $ENV{CARGO_HOME}/bin $ENV{HOME}/.cargo/bin)

if(CKPT_CARGO)
  add_test(NAME rust_binding
           COMMAND ${CKPT_CARGO} test --manifest-path ${PROJECT_SOURCE_DIR}/bindings/rust/Cargo.toml
                   --target-dir ${CMAKE_CURRENT_BINARY_DIR}/rust-target)
  set_tests_properties(rust_binding PROPERTIES
                       ENVIRONMENT "CKPT_LIB_DIR=$<TARGET_FILE_DIR:ckpt>;CARGO_NET_OFFLINE=true"
                       TIMEOUT 600)
  ckpt_runs_foreign_programs(rust_binding)
else()
  add_test(NAME rust_binding COMMAND sh -c "echo 'cargo not found: Rust binding not tested'; exit 77")
  set_tests_properties(rust_binding PROPERTIES SKIP_RETURN_CODE 77)
endif()
