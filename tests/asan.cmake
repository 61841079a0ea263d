# In an ASan build: LeakSanitizer's check at exit copes with the thread-locals of dlopened libraries, as ckpt's
# processes need (they dlopen libcudart, NCCL and UCX), and still reports a real leak under the options that make it
# cope (CKPT_ASAN_TEST_OPTIONS in tests/CMakeLists.txt).
if(NOT CKPT_SANITIZE MATCHES "address")
  return()
endif()
add_library(asan_thread_local_library MODULE ${CMAKE_CURRENT_SOURCE_DIR}/asan/thread_local_library.cc)
add_executable(asan_dlopened_thread_locals ${CMAKE_CURRENT_SOURCE_DIR}/asan/dlopened_thread_locals.cc)
target_link_libraries(asan_dlopened_thread_locals PRIVATE ${CMAKE_DL_LIBS} Threads::Threads)
add_dependencies(asan_dlopened_thread_locals asan_thread_local_library)

add_test(NAME asan_scans_dlopened_thread_locals
         COMMAND asan_dlopened_thread_locals $<TARGET_FILE:asan_thread_local_library>)
add_test(NAME asan_reports_a_leak_beside_dlopened_thread_locals
         COMMAND asan_dlopened_thread_locals $<TARGET_FILE:asan_thread_local_library> leak)
set_tests_properties(asan_scans_dlopened_thread_locals asan_reports_a_leak_beside_dlopened_thread_locals
                     PROPERTIES TIMEOUT 60)
set_tests_properties(asan_reports_a_leak_beside_dlopened_thread_locals PROPERTIES
                     PASS_REGULAR_EXPRESSION "LeakSanitizer: detected memory leaks")
