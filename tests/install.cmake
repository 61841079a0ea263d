# find_package(ckpt) and pkg-config work from another project against an installed tree.
add_test(NAME install_and_consume
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/install/check_install.sh ${PROJECT_BINARY_DIR}
                 ${CMAKE_CURRENT_SOURCE_DIR}/install ${CMAKE_CURRENT_BINARY_DIR}/install-check)
set_tests_properties(install_and_consume PROPERTIES TIMEOUT 300)
