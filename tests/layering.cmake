# The layers' includes follow the arrows of cmake/library.cmake: each library source includes only headers of its
# own layer and of the layers it uses. The include roots already make an upward include fail to compile; this test
# names every offending line at once, and catches the includes an include root cannot see (tests/layering/).
find_package(Python3 REQUIRED COMPONENTS Interpreter)
add_test(NAME layering_includes_follow_the_arrows
         COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/layering/check_layers.py ${CKPT_LAYER_TABLE}
                 --source-root ${PROJECT_SOURCE_DIR} --generated manifest.capnp.h --public-header-folder runtime/capi)
# The check itself can fail: an include of the save path planted (as read, not on disk) into the core is reported.
add_test(NAME layering_check_reports_a_planted_upward_include
         COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/layering/check_layers.py ${CKPT_LAYER_TABLE}
                 --source-root ${PROJECT_SOURCE_DIR} --generated manifest.capnp.h --public-header-folder runtime/capi
                 --plant runtime/core/dtype.cc runtime/save/save_plan.h)
