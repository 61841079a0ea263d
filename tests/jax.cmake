# examples/jax: JAX saves sharded arrays through ckpt's XLA FFI custom calls and restores them under other
# shardings. The handler library is defined by examples/jax/CMakeLists.txt, included here; where python3 cannot
# import jax, the test is registered anyway and reported as skipped with the reason.
include(${PROJECT_SOURCE_DIR}/examples/jax/CMakeLists.txt)
find_package(Python3 COMPONENTS Interpreter)

if(TARGET ckpt_jax_ffi)
  add_test(NAME jax_save_restore
           COMMAND ${CMAKE_COMMAND} -E env CKPT_TIMEOUT_MS=60000
                   ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/examples/jax/save_restore.py
                   $<TARGET_FILE:ckpt_jax_ffi>)
  set_tests_properties(jax_save_restore PROPERTIES TIMEOUT 300)
else()
  add_test(NAME jax_save_restore COMMAND sh -c "echo '${CKPT_JAX_SKIP_REASON}: examples/jax not run'; exit 77")
  set_tests_properties(jax_save_restore PROPERTIES SKIP_RETURN_CODE 77)
endif()
