# Julia bindings (bindings/julia): a signature check that needs only python3, a test proving that check catches a
# changed header, and the Julia test suite where julia is installed (skipped, visibly, where it is not).

find_package(Python3 COMPONENTS Interpreter)
set(CKPT_JULIA_SIGNATURE_CHECK ${PROJECT_SOURCE_DIR}/tools/check_julia_signatures.py)
set(CKPT_JULIA_PACKAGE ${PROJECT_SOURCE_DIR}/bindings/julia)

if(Python3_Interpreter_FOUND)
  # Every function of ckpt.h is wrapped by an @ccall with the same arguments and kinds of type.
  add_test(NAME julia_signatures
           COMMAND ${Python3_EXECUTABLE} ${CKPT_JULIA_SIGNATURE_CHECK} ${PROJECT_SOURCE_DIR}/include/ckpt.h
                   ${CKPT_JULIA_PACKAGE}/src)
  set_tests_properties(julia_signatures PROPERTIES TIMEOUT 30)

  # The check fails on a header whose ckpt_load lost its last parameter: passes only if the checker exits 1 and
  # names ckpt_load. $0 = python3, $1 = the checker, $2 = ckpt.h, $3 = the Julia sources.
  add_test(NAME julia_signatures_detect_change
           COMMAND sh -c [=[
altered=$(mktemp -d) || exit 1
trap 'rm -rf "$altered"' EXIT
sed '/ckpt_load(/{N;s/,[[:space:]]*ckpt_error_t\* err);/);/;}' "$2" > "$altered/ckpt.h" || exit 1
if cmp -s "$2" "$altered/ckpt.h"; then echo "the header alteration matched nothing: update this test"; exit 1; fi
out=$("$0" "$1" "$altered/ckpt.h" "$3" 2>&1)
code=$?
echo "$out"
test "$code" -eq 1 && echo "$out" | grep -q "ckpt_load passes 5 argument(s), the header declares 4"
]=] ${Python3_EXECUTABLE} ${CKPT_JULIA_SIGNATURE_CHECK} ${PROJECT_SOURCE_DIR}/include/ckpt.h
    ${CKPT_JULIA_PACKAGE}/src)
  set_tests_properties(julia_signatures_detect_change PROPERTIES TIMEOUT 30)

  # The checker's own alterations: a dropped parameter, a changed width, a pointer turned integer, a new function.
  add_test(NAME julia_signatures_self_test
           COMMAND ${Python3_EXECUTABLE} ${CKPT_JULIA_SIGNATURE_CHECK} --self-test
                   ${PROJECT_SOURCE_DIR}/include/ckpt.h ${CKPT_JULIA_PACKAGE}/src)
  set_tests_properties(julia_signatures_self_test PROPERTIES TIMEOUT 30)

  # Every struct of the Julia sources has the C layout and every constant its value, as the ABI table says; the
  # self-test first proves that a moved field, a renumbered constant, an added field and an added constant fail it.
  add_test(NAME julia_layouts_match_abi_table
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/check_julia_layouts.py --self-test
                   ${CKPT_ABI_TABLE} ${CKPT_JULIA_PACKAGE}/src)
  set_tests_properties(julia_layouts_match_abi_table PROPERTIES TIMEOUT 30)
endif()

find_program(CKPT_JULIA julia)
if(CKPT_JULIA)
  add_test(NAME julia_binding
           COMMAND ${CMAKE_COMMAND} -E env CKPT_LIB=$<TARGET_FILE:ckpt> CKPT_ABI_TABLE=${CKPT_ABI_TABLE} CKPT_TIMEOUT_MS=60000
                   ${CKPT_JULIA} --startup-file=no --project=${CKPT_JULIA_PACKAGE}
                   ${CKPT_JULIA_PACKAGE}/test/runtests.jl)
  # The first run precompiles the package and starts two more Julia processes.
  set_tests_properties(julia_binding PROPERTIES TIMEOUT 900)
else()
  add_test(NAME julia_binding COMMAND sh -c "echo 'julia not found: Julia tests not run'; exit 77")
  set_tests_properties(julia_binding PROPERTIES SKIP_RETURN_CODE 77)
endif()
