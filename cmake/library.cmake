# libckpt, layer by layer. Each layer is an OBJECT library that sees, through an include root of its own, only its
# folders and those of the layers it uses (ckpt_layer below): an #include against the arrows finds no file and the
# build fails. The layers' objects together form libckpt.so and libckpt.a; tests/layering checks the same table.
#
# Read bottom to top: a layer uses only layers listed above it.

# What every layer compiles with: the library's flags and the third-party headers and libraries.
add_library(ckpt_layer_base INTERFACE)
target_compile_definitions(ckpt_layer_base INTERFACE CKPT_BUILDING_LIBRARY CKPT_LIBRARY_VERSION="${PROJECT_VERSION}")
target_compile_options(ckpt_layer_base INTERFACE -Wall -Wextra -fvisibility=hidden -fvisibility-inlines-hidden)
target_link_libraries(ckpt_layer_base INTERFACE CapnProto::capnp PkgConfig::XXHASH PkgConfig::URING OpenSSL::Crypto
                                                Threads::Threads ${CMAKE_DL_LIBS} nlohmann_json::nlohmann_json
                                                PkgConfig::EXPAT PkgConfig::ZSTD)
# libcurl's headers only: io/s3 loads libcurl.so.4 at run time (io/s3/curl_library.h).
target_include_directories(ckpt_layer_base SYSTEM INTERFACE ${CURL_INCLUDE_DIRS})
# UCX is loaded at run time (collectives/transport/ucx_library.h): its headers are needed, its libraries never linked.
target_include_directories(ckpt_layer_base SYSTEM INTERFACE ${UCX_INCLUDE_DIRS})

set(CKPT_LAYER_TABLE ${CMAKE_BINARY_DIR}/layers.txt)
file(WRITE ${CKPT_LAYER_TABLE} "")

# ckpt_layer(NAME FOLDERS folder... [USES layer...]): the OBJECT library ckpt_<NAME> from the folders' *.cc files
# (not their subfolders), seeing the folders of NAME and of every layer it uses, directly or through another.
function(ckpt_layer name)
  cmake_parse_arguments(arg "" "" "FOLDERS;USES" ${ARGN})
  set(visible ${arg_FOLDERS})
  foreach(used ${arg_USES})
    get_property(used_visible GLOBAL PROPERTY CKPT_LAYER_${used}_VISIBLE)
    if(NOT used_visible)
      message(FATAL_ERROR "layer ${name} uses ${used}, which is not defined above it")
    endif()
    list(APPEND visible ${used_visible})
  endforeach()
  list(REMOVE_DUPLICATES visible)
  set_property(GLOBAL PROPERTY CKPT_LAYER_${name}_VISIBLE ${visible})
  set_property(GLOBAL APPEND PROPERTY CKPT_LAYERS ${name})
  list(JOIN arg_FOLDERS " " own_text)
  list(JOIN visible " " visible_text)
  file(APPEND ${CKPT_LAYER_TABLE} "${name}: ${own_text} | ${visible_text}\n")

  # The include root: a folder of links to the visible folders only. A folder inside another visible one (io/s3 in
  # io) is seen through the outer folder's link.
  set(root ${CMAKE_BINARY_DIR}/include-roots/${name})
  file(REMOVE_RECURSE ${root})
  foreach(folder ${visible})
    set(nested FALSE)
    foreach(outer ${visible})
      string(FIND "${folder}" "${outer}/" at)
      if(at EQUAL 0)
        set(nested TRUE)
      endif()
    endforeach()
    if(nested)
      continue()
    endif()
    cmake_path(GET folder PARENT_PATH parent)
    file(MAKE_DIRECTORY ${root}/${parent})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${root}/${folder} SYMBOLIC)
  endforeach()

  set(sources)
  foreach(folder ${arg_FOLDERS})
    file(GLOB folder_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${folder}/*.cc)
    list(APPEND sources ${folder_sources})
  endforeach()
  list(FILTER sources EXCLUDE REGEX "/main\\.cc$")  # a program's, not the layer's
  add_library(ckpt_${name} OBJECT ${sources})
  target_include_directories(ckpt_${name} PRIVATE ${root})
  target_link_libraries(ckpt_${name} PRIVATE ckpt_layer_base)
endfunction()

ckpt_layer(common FOLDERS common)
ckpt_layer(gpu FOLDERS gpu USES common)
ckpt_layer(s3 FOLDERS io/s3 USES common)
ckpt_layer(io FOLDERS io USES s3)
ckpt_layer(control FOLDERS collectives/control USES common)
ckpt_layer(store FOLDERS collectives/store USES control)
ckpt_layer(peer FOLDERS collectives/peer USES store)
ckpt_layer(transport FOLDERS collectives/transport USES store gpu)
ckpt_layer(agent_link FOLDERS collectives/agent USES store)
ckpt_layer(core FOLDERS runtime/core USES io peer transport)
ckpt_layer(format FOLDERS runtime/format USES core)
ckpt_layer(memtier FOLDERS runtime/memtier USES format agent_link)
ckpt_layer(save FOLDERS runtime/save USES memtier)
ckpt_layer(load FOLDERS runtime/load USES memtier)
ckpt_layer(export FOLDERS runtime/export USES load)
ckpt_layer(rank FOLDERS runtime/rank USES save load)
ckpt_layer(manager FOLDERS runtime/manager USES rank)
ckpt_layer(capi FOLDERS runtime/capi USES manager export)

# The manifest's schema, compiled into the format layer; the generated header is included as "manifest.capnp.h".
capnp_generate_cpp(MANIFEST_CAPNP_SRCS MANIFEST_CAPNP_HDRS runtime/format/manifest.capnp)
set(CKPT_GENERATED_DIR ${CMAKE_CURRENT_BINARY_DIR}/runtime/format)
target_sources(ckpt_format PRIVATE ${MANIFEST_CAPNP_SRCS})
foreach(layer format memtier save load export manager capi)
  target_include_directories(ckpt_${layer} PRIVATE ${CKPT_GENERATED_DIR})
endforeach()
# The C API is the only layer that sees ckpt.h.
target_include_directories(ckpt_capi PRIVATE ${PROJECT_SOURCE_DIR}/include)

# A program linking libckpt.a finds no helper (worker, agent) beside itself, so their installed place is compiled in;
# but not in the wheel, whose install prefix is a staging folder that does not exist on a user's machine.
if(NOT CKPT_PYTHON_WHEEL)
  set_source_files_properties(io/helper_executable.cc PROPERTIES COMPILE_DEFINITIONS
                              CKPT_INSTALLED_WORKER_DIR="${CKPT_INSTALL_FULL_WORKER_DIR}")
endif()
# XXH3 for AVX2 and for AVX-512 (io/xxh3_builds.h), chosen at run time by what the CPU has.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set_source_files_properties(io/xxh3_avx2.cc PROPERTIES COMPILE_OPTIONS -mavx2)
  # GCC 12's AVX-512 intrinsics start vectors from an undefined value, which -W(maybe-)uninitialized reports inside
  # xxhash.h (GCC bug 105593): a false positive, silenced for this file alone.
  set_source_files_properties(
    io/xxh3_avx512.cc PROPERTIES COMPILE_OPTIONS
    "-mavx512f;-mavx512vl;-mavx512bw;-mavx512dq;-mbmi2;-Wno-uninitialized;-Wno-maybe-uninitialized")
endif()
# abidiff (tests/abi.cmake) reads the exported functions and the public types from the debug information of the
# files that implement ckpt.h, whatever the build type.
file(GLOB CKPT_CAPI_SOURCES CONFIGURE_DEPENDS runtime/capi/*.cc)
set_source_files_properties(${CKPT_CAPI_SOURCES} PROPERTIES COMPILE_OPTIONS -g)
# The dtype conversion loops select between a floating-point result (the subnormal path) and integer ones; GCC turns
# such a select into a branch, which keeps the loop scalar, unless it may compute a floating-point operation whose
# result is then dropped. Nothing in ckpt reads floating-point exception flags.
set_source_files_properties(runtime/core/dtype_cast.cc PROPERTIES COMPILE_OPTIONS -fno-trapping-math)

get_property(CKPT_LAYERS GLOBAL PROPERTY CKPT_LAYERS)
set(CKPT_LAYER_OBJECTS)
foreach(layer ${CKPT_LAYERS})
  list(APPEND CKPT_LAYER_OBJECTS $<TARGET_OBJECTS:ckpt_${layer}>)
endforeach()
# Every output lands in <build>/runtime, where the bindings, the scripts and the library's own search for its
# helpers find them.
set(CKPT_OUTPUT_DIR ${CMAKE_BINARY_DIR}/runtime)

set(CKPT_VERSION_SCRIPT ${PROJECT_SOURCE_DIR}/runtime/capi/libckpt.map)
add_library(ckpt SHARED ${CKPT_LAYER_OBJECTS})
target_include_directories(ckpt PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                                       $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_link_libraries(ckpt PRIVATE CapnProto::capnp PkgConfig::XXHASH PkgConfig::URING OpenSSL::Crypto Threads::Threads
                                   ${CMAKE_DL_LIBS} PkgConfig::EXPAT PkgConfig::ZSTD)
target_link_options(ckpt PRIVATE -Wl,--version-script=${CKPT_VERSION_SCRIPT})
# A sanitized libckpt.so leaves the runtime's symbols to the executable (clang's TSan runtime lives only there).
if(NOT CKPT_SANITIZE)
  target_link_options(ckpt PRIVATE -Wl,--no-undefined)
endif()
set_target_properties(ckpt PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
                                      LINK_DEPENDS ${CKPT_VERSION_SCRIPT} LIBRARY_OUTPUT_DIRECTORY ${CKPT_OUTPUT_DIR})

add_library(ckpt_static STATIC ${CKPT_LAYER_OBJECTS})
set_target_properties(ckpt_static PROPERTIES OUTPUT_NAME ckpt ARCHIVE_OUTPUT_DIRECTORY ${CKPT_OUTPUT_DIR})
target_include_directories(ckpt_static PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                                              $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_link_libraries(ckpt_static PUBLIC CapnProto::capnp Threads::Threads ${CMAKE_DL_LIBS}
                                         $<BUILD_INTERFACE:PkgConfig::XXHASH> $<INSTALL_INTERFACE:xxhash>
                                         $<BUILD_INTERFACE:PkgConfig::URING> $<INSTALL_INTERFACE:uring>
                                         $<BUILD_INTERFACE:OpenSSL::Crypto> $<INSTALL_INTERFACE:crypto>
                                         $<BUILD_INTERFACE:PkgConfig::EXPAT> $<INSTALL_INTERFACE:expat>
                                         $<BUILD_INTERFACE:PkgConfig::ZSTD> $<INSTALL_INTERFACE:zstd>)

# Internal targets for tests: everything, including hidden C++ symbols, and the generated manifest header.
add_library(ckpt_internal INTERFACE)
target_link_libraries(ckpt_internal INTERFACE ckpt_static)
target_include_directories(ckpt_internal INTERFACE ${PROJECT_SOURCE_DIR} ${CKPT_GENERATED_DIR} ${UCX_INCLUDE_DIRS})

# The I/O worker: a separate executable that libckpt spawns (never forks), found beside the library.
add_executable(ckpt-io-worker io/worker/main.cc)
target_include_directories(ckpt-io-worker PRIVATE ${CMAKE_BINARY_DIR}/include-roots/io)
target_link_libraries(ckpt-io-worker PRIVATE ckpt_static)
set_target_properties(ckpt-io-worker PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CKPT_OUTPUT_DIR})
add_dependencies(ckpt ckpt-io-worker)

# The node agent of the memory tier (agent/): a daemon that ranks start, found beside the library. Its parts but
# main.cc form a layer of their own, above the library's, which the unit tests link too.
ckpt_layer(agent FOLDERS agent USES manager)
add_library(ckpt_agent_core STATIC $<TARGET_OBJECTS:ckpt_agent>)
target_link_libraries(ckpt_agent_core PUBLIC ckpt_static)
target_include_directories(ckpt_agent_core PUBLIC ${PROJECT_SOURCE_DIR} ${CKPT_GENERATED_DIR})
add_executable(ckpt-agent agent/main.cc)
target_include_directories(ckpt-agent PRIVATE ${CMAKE_BINARY_DIR}/include-roots/agent)
target_compile_options(ckpt-agent PRIVATE -Wall -Wextra)
target_link_libraries(ckpt-agent PRIVATE ckpt_agent_core CLI11::CLI11 ckpt_layer_base)
set_target_properties(ckpt-agent PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CKPT_OUTPUT_DIR})
add_dependencies(ckpt ckpt-agent)
