# A missing build dependency stops configuration with one message naming it and the packages that provide it
# (cmake/dependencies.cmake). Each test configures the source tree afresh in a scratch directory, with the dependency
# hidden, and checks the message (tests/package/missing_dependency.sh).

# ckpt_missing_dependency_test(NAME [HIDE_PC module...] EXPECT text... [CMAKE_ARGS argument...]): the test
# package_missing_<NAME>, which hides the pkg-config modules and passes the arguments to cmake (to hide a CMake
# package), with this build's compilers.
function(ckpt_missing_dependency_test name)
  cmake_parse_arguments(arg "" "" "HIDE_PC;EXPECT;CMAKE_ARGS" ${ARGN})
  set(script_arguments)
  foreach(module ${arg_HIDE_PC})
    list(APPEND script_arguments --hide-pc ${module})
  endforeach()
  foreach(text ${arg_EXPECT})
    list(APPEND script_arguments --expect ${text})
  endforeach()
  add_test(NAME package_missing_${name}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/package/missing_dependency.sh ${PROJECT_SOURCE_DIR}
                   ${script_arguments} -- ${arg_CMAKE_ARGS}
                   -DCMAKE_C_COMPILER=${CMAKE_C_COMPILER} -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER})
  set_tests_properties(package_missing_${name} PROPERTIES TIMEOUT 60 ENVIRONMENT CMAKE=${CMAKE_COMMAND})
endfunction()

# A CMake package.
ckpt_missing_dependency_test(capnproto
  EXPECT "ckpt needs Cap'n Proto (library, headers and the capnp compiler): install capnproto libcapnp-dev (Debian, Ubuntu) or capnproto capnproto-devel (Fedora, RHEL)"
  CMAKE_ARGS -DCMAKE_DISABLE_FIND_PACKAGE_CapnProto=TRUE)
# Cap'n Proto's library without its compiler, which Debian ships in another package.
ckpt_missing_dependency_test(capnp_compiler
  EXPECT "ckpt needs Cap'n Proto's compiler (capnp and capnpc-c++): install capnproto (Debian, Ubuntu)"
  CMAKE_ARGS -DCAPNP_EXECUTABLE=/nonexistent/capnp)
# A pkg-config module.
ckpt_missing_dependency_test(liburing HIDE_PC liburing
  EXPECT "ckpt needs liburing 2.2 or newer (io_uring): install liburing-dev (Debian, Ubuntu) or liburing-devel (Fedora, RHEL)"
         "sudo apt-get install liburing-dev  # Debian, Ubuntu")
# pkg-config itself.
ckpt_missing_dependency_test(pkg_config
  EXPECT "ckpt needs pkg-config: install pkg-config (Debian, Ubuntu) or pkgconf-pkg-config (Fedora, RHEL)"
  CMAKE_ARGS -DPKG_CONFIG_EXECUTABLE=/nonexistent/pkg-config)
# Several at once, of both kinds: one message names them all, and one command installs them all.
ckpt_missing_dependency_test(cli11_and_libxxhash HIDE_PC libxxhash
  EXPECT "ckpt needs CLI11 (command lines, header-only): install libcli11-dev (Debian, Ubuntu) or cli11-devel (Fedora, RHEL)"
         "ckpt needs xxHash (libxxhash): install libxxhash-dev (Debian, Ubuntu) or xxhash-devel (Fedora, RHEL)"
         "sudo apt-get install libcli11-dev libxxhash-dev  # Debian, Ubuntu"
         "sudo dnf install cli11-devel xxhash-devel  #"
  CMAKE_ARGS -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=TRUE)
