# find_package(ckpt) and pkg-config work from another project against an installed tree.
add_test(NAME install_and_consume
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/install/check_install.sh ${PROJECT_BINARY_DIR}
                 ${CMAKE_CURRENT_SOURCE_DIR}/install ${CMAKE_CURRENT_BINARY_DIR}/install-check)
set_tests_properties(install_and_consume PROPERTIES TIMEOUT 300)
ckpt_runs_foreign_programs(install_and_consume)

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
