# The Go binding (bindings/go): `go test` builds the cgo package against this build's libckpt and runs its
# multi-process save and resharded loads. Skipped, visibly, where Go is not installed.
find_program(CKPT_GO_EXECUTABLE go)
if(NOT CKPT_GO_EXECUTABLE)
  add_test(NAME go_binding COMMAND ${CMAKE_COMMAND} -E echo "go not found: the Go binding is not tested")
  set_tests_properties(go_binding PROPERTIES SKIP_REGULAR_EXPRESSION "go not found")
  return()
endif()

# Go's build cache does not notice changes to headers outside the package, so the hash of ckpt.h goes into
# CGO_CFLAGS, which is part of the cache key; a changed header reconfigures and so rebuilds the binding.
set(ckpt_go_header ${PROJECT_SOURCE_DIR}/include/ckpt.h)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${ckpt_go_header})
file(SHA256 ${ckpt_go_header} ckpt_go_header_hash)
set(ckpt_go_cache ${CMAKE_CURRENT_BINARY_DIR}/go-cache)

set(ckpt_go_environment "CGO_CFLAGS=-g -O2 -DCKPT_GO_HEADER_SHA256=${ckpt_go_header_hash}"
    GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local GOCACHE=${ckpt_go_cache}/build GOPATH=${ckpt_go_cache}/path)

# -count=1: never report a cached result, which would hide a rebuilt libckpt. The binding finds ckpt through
# pkg-config: here the build tree's ckpt-uninstalled.pc.
add_test(NAME go_binding COMMAND ${CKPT_GO_EXECUTABLE} test -count=1 ./...
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/bindings/go)
set_tests_properties(go_binding PROPERTIES TIMEOUT 600 ENVIRONMENT
  "${ckpt_go_environment};PKG_CONFIG_PATH=${PROJECT_BINARY_DIR};CGO_LDFLAGS=-Wl,-rpath,$<TARGET_FILE_DIR:ckpt>")
# abi_test.go compares the structs and constants cgo compiled with the ABI table of ckpt.h.
set_property(TEST go_binding APPEND PROPERTY ENVIRONMENT CKPT_ABI_TABLE=${CKPT_ABI_TABLE})

ckpt_runs_foreign_programs(go_binding)

# A copy of the binding outside the source tree, against the install of tests/install.cmake.
add_test(NAME go_binding_out_of_tree_against_install
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/install/check_install.sh go-binding ${PROJECT_BINARY_DIR}
                 ${CMAKE_CURRENT_SOURCE_DIR}/install ${CMAKE_CURRENT_BINARY_DIR}/install-check)
set_tests_properties(go_binding_out_of_tree_against_install PROPERTIES TIMEOUT 600 FIXTURES_REQUIRED ckpt_installed
                     ENVIRONMENT "${ckpt_go_environment}")
ckpt_runs_foreign_programs(go_binding_out_of_tree_against_install)

# The same binding on S3, against the real server of the fixture s3_server (bindings/go/s3_test.go).
add_test(NAME go_binding_s3 COMMAND ${CKPT_GO_EXECUTABLE} test -count=1 -run S3 ./...
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/bindings/go)
set_tests_properties(go_binding_s3 PROPERTIES TIMEOUT 600 LABELS s3 FIXTURES_REQUIRED s3_server ENVIRONMENT
  "${ckpt_go_environment};PKG_CONFIG_PATH=${PROJECT_BINARY_DIR};CGO_LDFLAGS=-Wl,-rpath,$<TARGET_FILE_DIR:ckpt>;CKPT_S3_TEST_ENV=${CMAKE_BINARY_DIR}/s3/env")
ckpt_runs_foreign_programs(go_binding_s3)
