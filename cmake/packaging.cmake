# CPack: a Debian package (ckpt_<version>_<arch>.deb) and a .tar.gz of the same files, for users of the shared
# library from C, C++, Rust and Go. Configure with -DCMAKE_INSTALL_PREFIX=/usr and run `cpack` in the build
# directory (tools/package_c.sh does both).
#
# The packages hold the install rules' files except the static library and its export set: libckpt.a needs the
# development files of everything it was built with (Cap'n Proto's CMake package among them), which a user of
# the shared library never installs. A script run by CPack removes them from its staging tree.

set(CPACK_PACKAGE_NAME ckpt)
set(CPACK_PACKAGE_VENDOR "ckpt maintainers")
set(CPACK_PACKAGE_CONTACT "ckpt maintainers <maintainers@users.noreply.a-seed-b20e1eae.example>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Distributed checkpointing runtime for training jobs, with a stable C ABI")
# Debian wants the description's lines under 80 columns.
set(CPACK_PACKAGE_DESCRIPTION "Every rank of a job saves the shards of the tensors it holds; any number
of ranks loads them back in any layout. Saves are asynchronous: I/O worker
processes write with io_uring, and the commit is atomic.
This package holds libckpt.so, its header, its pkg-config and CMake files
(find_package(ckpt)), the ckpt command-line tool and the launcher ckpt-launch.")
set(CPACK_GENERATOR DEB TGZ)
set(CPACK_STRIP_FILES ON)
# Runs in each generator's staging tree, after the install rules and before the package is made.
file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/cpack_remove_static_library.cmake @ONLY CONTENT [[
# Without the staging tree's name the search below would walk the whole file system.
if(NOT IS_DIRECTORY "${CPACK_TEMPORARY_INSTALL_DIRECTORY}")
  message(FATAL_ERROR "CPack named no staging tree (CPACK_TEMPORARY_INSTALL_DIRECTORY)")
endif()
file(GLOB_RECURSE static_files "${CPACK_TEMPORARY_INSTALL_DIRECTORY}/*/libckpt.a"
     "${CPACK_TEMPORARY_INSTALL_DIRECTORY}/*/ckptStaticTargets*.cmake")
if(NOT static_files)
  message(FATAL_ERROR "no libckpt.a in ${CPACK_TEMPORARY_INSTALL_DIRECTORY}: the install rules changed")
endif()
file(REMOVE ${static_files})
]])
set(CPACK_PRE_BUILD_SCRIPTS ${PROJECT_BINARY_DIR}/cpack_remove_static_library.cmake)

# The archive unpacks into one folder, ckpt-<version>-linux-<arch>, laid out as the prefix (bin/, include/, lib/):
# the .pc and CMake files find their prefix relative to themselves, and libckpt finds its helpers beside itself.
set(CPACK_PACKAGE_FILE_NAME ${CPACK_PACKAGE_NAME}-${PROJECT_VERSION}-linux-${CMAKE_SYSTEM_PROCESSOR})

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # ckpt_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
# Depends: the run-time libraries libckpt and its programs link, as dpkg-shlibdeps finds them.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# shlibs: packages built against libckpt.so.0 get their Depends on ckpt from dpkg-shlibdeps too.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
# Loaded at run time only where used: libcurl for s3:// paths (io/s3/curl_library.cc), UCX for its load transport
# (collectives/transport/ucx_library.cc).
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "libcurl4, libucx0")

include(CPack)
