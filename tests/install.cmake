# Packaging (tests/install/check_install.sh): one install into a scratch prefix, then checks from outside the build
# tree of what a user gets from it. tests/bindings_go.cmake adds one for the Go binding.
set(ckpt_install_check ${CMAKE_CURRENT_BINARY_DIR}/install-check)
foreach(check into-prefix consume shared-without-capnp static-finds-worker)
  string(REPLACE "-" "_" test_name "install_${check}")
  add_test(NAME ${test_name}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/install/check_install.sh ${check} ${PROJECT_BINARY_DIR}
                   ${CMAKE_CURRENT_SOURCE_DIR}/install ${ckpt_install_check})
  set_tests_properties(${test_name} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
  ckpt_runs_foreign_programs(${test_name})
  if(check STREQUAL "into-prefix")
    set_tests_properties(${test_name} PROPERTIES FIXTURES_SETUP ckpt_installed)
  else()
    set_tests_properties(${test_name} PROPERTIES FIXTURES_REQUIRED ckpt_installed)
  endif()
endforeach()

# A sanitizer build's libckpt.a holds instrumented code: the static program links the same runtime.
if(CKPT_SANITIZE)
  set(ckpt_consumer_link_flags "-fsanitize=${CKPT_SANITIZE}")
  if(CKPT_ASAN_RUNTIME AND CMAKE_C_COMPILER_ID MATCHES "Clang")
    get_filename_component(ckpt_asan_dir ${CKPT_ASAN_RUNTIME} DIRECTORY)
    string(APPEND ckpt_consumer_link_flags " -shared-libasan -Wl,-rpath,${ckpt_asan_dir}")
  endif()
  set_property(TEST install_static_finds_worker APPEND PROPERTY ENVIRONMENT "CKPT_CONSUMER_CC=${CMAKE_C_COMPILER}"
               "CKPT_CONSUMER_CXX=${CMAKE_CXX_COMPILER}" "CKPT_CONSUMER_LINK_FLAGS=${ckpt_consumer_link_flags}")
endif()

# UCX is loaded at run time: libckpt.so must not name any UCX library as needed.
add_test(NAME libckpt_needs_no_ucx_library
         COMMAND bash -c "needed=$(readelf -d \"$0\" | grep NEEDED); echo \"$needed\"; ! echo \"$needed\" | grep -q 'libuc[pstm]'"
                 $<TARGET_FILE:ckpt>)

# The fault hooks (common/fault_injection.h) are in libckpt exactly when the build asks for them: the names of their
# variables appear in it with CKPT_FAULT_INJECTION on (tools/test.sh's builds), and nowhere with the option off, the
# default of a plain build and so of an installed library.
if(CKPT_FAULT_INJECTION)
  set(CKPT_EXPECTED_HOOKS present)
else()
  set(CKPT_EXPECTED_HOOKS absent)
endif()
add_test(NAME library_fault_hooks_${CKPT_EXPECTED_HOOKS}
         COMMAND sh -c "if grep -q -a CKPT_FAULT_ \"$0\"; then found=present; else found=absent; fi
                        echo \"fault hooks $found in $0\"; [ \"$found\" = \"$1\" ]"
                 $<TARGET_FILE:ckpt> ${CKPT_EXPECTED_HOOKS})
