# The public header must compile as strict C99 and as C++17, with every warning an error.
add_test(NAME header_c99
         COMMAND ${CMAKE_C_COMPILER} -x c -std=c99 -pedantic -Wall -Wextra -Werror -fsyntax-only
                 ${PROJECT_SOURCE_DIR}/include/ckpt.h)
add_test(NAME header_cxx17
         COMMAND ${CMAKE_CXX_COMPILER} -x c++ -std=c++17 -pedantic -Wall -Wextra -Werror -fsyntax-only
                 ${PROJECT_SOURCE_DIR}/include/ckpt.h)
# libckpt.so exports exactly what its version script lists, at the listed versions, and that is what ckpt.h declares.
add_test(NAME exports_match_the_version_script
         COMMAND ${CMAKE_COMMAND} -DLIBRARY=$<TARGET_FILE:ckpt> -DMAP=${PROJECT_SOURCE_DIR}/runtime/capi/libckpt.map
                 -DHEADER=${PROJECT_SOURCE_DIR}/include/ckpt.h -P ${CMAKE_CURRENT_SOURCE_DIR}/scripts/check_exports.cmake)
