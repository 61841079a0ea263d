# The C example in README.md compiles as strict C99 and runs on 2 ranks.
add_test(NAME readme_example
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/check_readme_example.sh ${PROJECT_SOURCE_DIR}/README.md
                 $<TARGET_FILE:ckpt> $<TARGET_FILE:ckpt-launch> ${CMAKE_CURRENT_BINARY_DIR}/readme-example)
set_tests_properties(readme_example PROPERTIES TIMEOUT 120)
ckpt_runs_foreign_programs(readme_example)
