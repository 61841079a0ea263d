# The third-party packages that building ckpt needs, each with the Debian/Ubuntu and Fedora/RHEL packages that
# provide it. A missing one does not stop CMake at once: every check runs, and configuration then fails with one
# message that lists what is missing and the commands installing it all, so that a user of the sdist (where pip
# shows only CMake's output) fixes the machine in one round instead of one package per attempt.

# ckpt_note_missing(NEEDS DEBIAN FEDORA): records a dependency that was not found, for ckpt_fail_if_missing.
# DEBIAN and FEDORA are ;-lists of package names.
function(ckpt_note_missing needs debian fedora)
  list(JOIN debian " " debian_text)
  list(JOIN fedora " " fedora_text)
  set_property(GLOBAL APPEND PROPERTY CKPT_MISSING_DEPENDENCIES
               "ckpt needs ${needs}: install ${debian_text} (Debian, Ubuntu) or ${fedora_text} (Fedora, RHEL)")
  set_property(GLOBAL APPEND PROPERTY CKPT_MISSING_DEBIAN_PACKAGES ${debian})
  set_property(GLOBAL APPEND PROPERTY CKPT_MISSING_FEDORA_PACKAGES ${fedora})
endfunction()

# ckpt_require_package(PACKAGE [find_package arguments...] NEEDS text DEBIAN package... FEDORA package...):
# find_package(PACKAGE ...), noting it as missing if not found. A macro, so that the package's variables reach the
# caller as they would from a plain find_package.
macro(ckpt_require_package package)
  cmake_parse_arguments(ckpt_require "" "NEEDS" "DEBIAN;FEDORA" ${ARGN})
  find_package(${package} ${ckpt_require_UNPARSED_ARGUMENTS} QUIET)
  if(${package}_FOUND)
    string(STRIP "Found ${package} ${${package}_VERSION}" ckpt_require_found)
    message(STATUS "${ckpt_require_found}")
  else()
    ckpt_note_missing("${ckpt_require_NEEDS}" "${ckpt_require_DEBIAN}" "${ckpt_require_FEDORA}")
  endif()
endmacro()

# ckpt_require_module(PREFIX MODULE [IMPORTED_TARGET] NEEDS text DEBIAN package... FEDORA package...): the same for
# a pkg-config module, found as pkg_check_modules(PREFIX [IMPORTED_TARGET] MODULE) would.
macro(ckpt_require_module prefix module)
  cmake_parse_arguments(ckpt_require "" "NEEDS" "DEBIAN;FEDORA" ${ARGN})
  pkg_check_modules(${prefix} QUIET ${ckpt_require_UNPARSED_ARGUMENTS} ${module})
  if(${prefix}_FOUND)
    string(REGEX REPLACE "[<>=].*" "" ckpt_require_name "${module}")  # liburing>=2.2: liburing
    message(STATUS "Found ${ckpt_require_name} ${${prefix}_VERSION}")
  else()
    ckpt_note_missing("${ckpt_require_NEEDS}" "${ckpt_require_DEBIAN}" "${ckpt_require_FEDORA}")
  endif()
endmacro()

# ckpt_fail_if_missing(): stops configuration if any dependency was noted missing, listing them all.
function(ckpt_fail_if_missing)
  get_property(missing GLOBAL PROPERTY CKPT_MISSING_DEPENDENCIES)
  if(NOT missing)
    return()
  endif()
  get_property(debian GLOBAL PROPERTY CKPT_MISSING_DEBIAN_PACKAGES)
  get_property(fedora GLOBAL PROPERTY CKPT_MISSING_FEDORA_PACKAGES)
  list(REMOVE_DUPLICATES debian)
  list(REMOVE_DUPLICATES fedora)
  list(JOIN debian " " debian_text)
  list(JOIN fedora " " fedora_text)
  # Lines indented in the message are printed as they are; CMake rewraps the others.
  list(JOIN missing "\n  " missing_text)
  message(FATAL_ERROR "ckpt cannot be built: build dependencies are missing.\n"
                      "  ${missing_text}\n"
                      "To install what is missing:\n"
                      "  sudo apt-get install ${debian_text}  # Debian, Ubuntu\n"
                      "  sudo dnf install ${fedora_text}  # Fedora; RHEL and its rebuilds with EPEL and CRB enabled\n")
endfunction()

# pkg-config first: Cap'n Proto's package and every module below are looked up through it, so without it they would
# all be reported missing, wrongly.
find_package(PkgConfig QUIET)
if(NOT PkgConfig_FOUND)
  ckpt_note_missing("pkg-config" pkg-config pkgconf-pkg-config)
  ckpt_fail_if_missing()
endif()

ckpt_require_package(Threads NEEDS "POSIX threads (the C library's development files)"
                     DEBIAN libc6-dev FEDORA glibc-devel)
# HMAC-SHA256 for the store's authentication. Before Cap'n Proto, whose package needs OpenSSL too.
ckpt_require_package(OpenSSL COMPONENTS Crypto NEEDS "OpenSSL's libcrypto (HMAC for the store)"
                     DEBIAN libssl-dev FEDORA openssl-devel)
# The manifest's schema is compiled by Cap'n Proto's compiler, which Debian ships apart from the library.
ckpt_require_package(CapnProto NEEDS "Cap'n Proto (library, headers and the capnp compiler)"
                     DEBIAN capnproto libcapnp-dev FEDORA capnproto capnproto-devel)
if(CapnProto_FOUND AND NOT (EXISTS "${CAPNP_EXECUTABLE}" AND EXISTS "${CAPNPC_CXX_EXECUTABLE}"))
  ckpt_note_missing("Cap'n Proto's compiler (capnp and capnpc-c++)" capnproto capnproto)
endif()
# Header-only: the safetensors headers' and Hugging Face indexes' JSON.
ckpt_require_package(nlohmann_json 3 NEEDS "nlohmann/json 3 (JSON, header-only)"
                     DEBIAN nlohmann-json3-dev FEDORA json-devel)
# Header-only: the ckpt tool's command line.
ckpt_require_package(CLI11 CONFIG NEEDS "CLI11 (command lines, header-only)"
                     DEBIAN libcli11-dev FEDORA cli11-devel)
ckpt_require_module(XXHASH libxxhash IMPORTED_TARGET NEEDS "xxHash (libxxhash)"
                    DEBIAN libxxhash-dev FEDORA xxhash-devel)
# 2.2 or newer: io_uring_register_files_sparse (Ubuntu 22.04's 2.1 lacks it).
ckpt_require_module(URING liburing>=2.2 IMPORTED_TARGET NEEDS "liburing 2.2 or newer (io_uring)"
                    DEBIAN liburing-dev FEDORA liburing-devel)
# Headers only: libckpt loads UCX at run time.
ckpt_require_module(UCX ucx NEEDS "UCX's headers (ucx.pc)" DEBIAN libucx-dev FEDORA ucx-devel)
# Lossless compression of stored blocks (CKPT_SAVE_COMPRESS, io/block_codec.h).
ckpt_require_module(ZSTD libzstd IMPORTED_TARGET NEEDS "zstd (libzstd)" DEBIAN libzstd-dev FEDORA libzstd-devel)
# The XML of S3's replies.
ckpt_require_module(EXPAT expat IMPORTED_TARGET NEEDS "expat (XML)" DEBIAN libexpat1-dev FEDORA expat-devel)
# Headers only: libckpt loads libcurl at run time (io/s3); 7.75 or newer for CURLOPT_AWS_SIGV4. Any of Debian's
# libcurl4-*-dev flavours will do.
ckpt_require_module(CURL libcurl>=7.75 NEEDS "libcurl's headers, 7.75 or newer (libcurl.pc)"
                    DEBIAN libcurl4-openssl-dev FEDORA libcurl-devel)

if(CKPT_BUILD_TESTS)
  # No semicolon in the text: it would split the macro's arguments.
  set(ckpt_tests_only "only for the tests, which -DCKPT_BUILD_TESTS=OFF leaves out")
  ckpt_require_package(GTest NEEDS "GoogleTest (${ckpt_tests_only})" DEBIAN libgtest-dev FEDORA gtest-devel)
  # The ABI and layering checks (tests/abi.cmake, tests/layering.cmake) are Python scripts.
  ckpt_require_package(Python3 COMPONENTS Interpreter NEEDS "Python 3 (${ckpt_tests_only})"
                       DEBIAN python3 FEDORA python3)
endif()

ckpt_fail_if_missing()
