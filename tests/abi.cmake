# The stable ABI: the table of sizes, offsets and constants that every binding checks itself against, and proofs
# that programs built against the previous release (ABI version CKPT_0, whose header and abidw dump are kept in
# abi/v0/) run unchanged on this library.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
set(CKPT_ABI_DIR ${PROJECT_BINARY_DIR}/abi)
set(CKPT_ABI_TABLE ${CKPT_ABI_DIR}/ckpt_abi.tsv)
set(CKPT_ABI_TABLE_V0 ${CKPT_ABI_DIR}/ckpt_abi_v0.tsv)

# ckpt_abi_table(TARGET HEADER_DIR LABEL OUTPUT): writes OUTPUT, the ABI table of HEADER_DIR/ckpt.h, at build time.
function(ckpt_abi_table target header_dir label output)
  set(source ${CKPT_ABI_DIR}/${target}.c)
  add_custom_command(OUTPUT ${source}
                     COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/abi_table_source.py ${label}
                             ${header_dir}/ckpt.h ${source}
                     DEPENDS ${PROJECT_SOURCE_DIR}/tools/abi_table_source.py ${header_dir}/ckpt.h VERBATIM)
  add_executable(${target} ${source})
  target_include_directories(${target} BEFORE PRIVATE ${header_dir})
  set_target_properties(${target} PROPERTIES C_STANDARD 11 C_EXTENSIONS ON)
  add_custom_command(OUTPUT ${output} COMMAND ${target} > ${output} DEPENDS ${target} VERBATIM)
  add_custom_target(${target}_file ALL DEPENDS ${output})
endfunction()

ckpt_abi_table(ckpt_abi_table ${PROJECT_SOURCE_DIR}/include include/ckpt.h ${CKPT_ABI_TABLE})
ckpt_abi_table(ckpt_abi_table_v0 ${PROJECT_SOURCE_DIR}/abi/v0 abi/v0/ckpt.h ${CKPT_ABI_TABLE_V0})

# Every struct of CKPT_0 keeps its size (or grows at the end) and its fields' offsets; every constant its value.
add_test(NAME abi_table_keeps_v0_layout_and_constants
         COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/abi_compat.py ${CKPT_ABI_TABLE_V0} ${CKPT_ABI_TABLE})

# A library that exports exactly CKPT_0 (the first node of the version script) with empty functions: linked against
# it, a program binds every name at version CKPT_0, as a program linked against ckpt 0.1.0 did. It is never run.
set(ckpt_version_script ${PROJECT_SOURCE_DIR}/runtime/capi/libckpt.map)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${ckpt_version_script})
file(READ ${ckpt_version_script} ckpt_version_script_text)
string(REGEX MATCH "CKPT_0 {[^}]*}" ckpt_v0_node "${ckpt_version_script_text}")
string(REGEX MATCHALL "ckpt_[a-z0-9_]+" ckpt_v0_names "${ckpt_v0_node}")
set(ckpt_v0_stub_source "/* Generated from the CKPT_0 node of runtime/capi/libckpt.map, for linking only. */\n")
foreach(name ${ckpt_v0_names})
  string(APPEND ckpt_v0_stub_source "void ${name}(void) {}\n")
endforeach()
file(CONFIGURE OUTPUT ${CKPT_ABI_DIR}/v0_link/stub.c CONTENT "${ckpt_v0_stub_source}")
file(CONFIGURE OUTPUT ${CKPT_ABI_DIR}/v0_link/stub.map CONTENT "${ckpt_v0_node};\n")
add_library(ckpt_v0_link_stub SHARED ${CKPT_ABI_DIR}/v0_link/stub.c)
target_link_options(ckpt_v0_link_stub PRIVATE -Wl,--version-script=${CKPT_ABI_DIR}/v0_link/stub.map)
set_target_properties(ckpt_v0_link_stub PROPERTIES OUTPUT_NAME ckpt SOVERSION 0
                      LIBRARY_OUTPUT_DIRECTORY ${CKPT_ABI_DIR}/v0_link)

# The CKPT_0 program: compiled against abi/v0/ckpt.h, linked against the stub, run with this build's libckpt
# (no rpath: LD_LIBRARY_PATH names the real library). It first proves that it did bind the CKPT_0 init functions.
add_executable(abi_v0_program ${CMAKE_CURRENT_SOURCE_DIR}/abi/v0_program.c)
target_include_directories(abi_v0_program BEFORE PRIVATE ${PROJECT_SOURCE_DIR}/abi/v0)
target_link_libraries(abi_v0_program PRIVATE ckpt_v0_link_stub)
set_target_properties(abi_v0_program PROPERTIES C_STANDARD 99 C_EXTENSIONS OFF SKIP_BUILD_RPATH TRUE)
add_dependencies(abi_v0_program ckpt)
add_test(NAME abi_v0_program_runs_on_this_library
         COMMAND sh -c [=[
nm -D "$0" | grep -q " ckpt_context_options_init@CKPT_0$" || { echo "$0 did not bind the CKPT_0 init functions"; exit 1; }
rm -rf "$1" && mkdir -p "$1" && exec "$0" "$1"
]=] $<TARGET_FILE:abi_v0_program> ${CMAKE_CURRENT_BINARY_DIR}/abi_v0_program.d)
set_tests_properties(abi_v0_program_runs_on_this_library PROPERTIES TIMEOUT 120
                     ENVIRONMENT LD_LIBRARY_PATH=$<TARGET_FILE_DIR:ckpt>)

# abidiff: this library against the abidw dump of ckpt 0.1.0 (abi/v0/libckpt.abi), on what that release exported:
# additions are fine, a removed function or a changed signature or struct fails (fields appended to the options
# and info structs are fine: abi/abidiff.suppr). Skipped, visibly, without abigail-tools (tools/deps.sh has them).
find_program(CKPT_ABIDIFF abidiff)
if(CKPT_ABIDIFF)
  add_test(NAME abi_compatible_with_v0
           COMMAND ${CKPT_ABIDIFF} --exported-interfaces-only --drop-private-types --no-added-syms
                   --headers-dir2 ${PROJECT_SOURCE_DIR}/include --suppressions ${PROJECT_SOURCE_DIR}/abi/abidiff.suppr
                   ${PROJECT_SOURCE_DIR}/abi/v0/libckpt.abi $<TARGET_FILE:ckpt>)
  set_tests_properties(abi_compatible_with_v0 PROPERTIES TIMEOUT 120)
else()
  add_test(NAME abi_compatible_with_v0 COMMAND sh -c "echo 'abidiff not found: install abigail-tools'; exit 77")
  set_tests_properties(abi_compatible_with_v0 PROPERTIES SKIP_RETURN_CODE 77)
endif()
