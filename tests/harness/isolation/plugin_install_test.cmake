# plugin_install_test (cmake -P): what a kernel project does with an installed driftgate.
#   1. cmake --install BUILD_DIR --prefix WORK_DIR/prefix
#   2. configure and build SOURCE_DIR/candidates/examples/plugin as its own project, finding
#      driftgate through CMAKE_PREFIX_PATH (find_package(driftgate), driftgate::abi)
#   3. the installed driftgate loads the plugin it built and lists its candidate
# Everything is local: no step reaches the network.
foreach(var BUILD_DIR SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "plugin_install_test: pass -D${var}=...")
  endif()
endforeach()

function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "plugin_install_test: ${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
step("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
if(NOT EXISTS ${prefix}/include/driftgate/candidate_abi.h)
  message(FATAL_ERROR "plugin_install_test: the install has no include/driftgate/candidate_abi.h")
endif()
step("configuring the example plugin against the install"
     ${CMAKE_COMMAND} -S ${SOURCE_DIR}/candidates/examples/plugin -B ${WORK_DIR}/build -G ${GENERATOR}
     -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix})
step("building the example plugin" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
file(GLOB plugin ${WORK_DIR}/build/*kda_example_plugin*)
if(NOT plugin)
  message(FATAL_ERROR "plugin_install_test: the build produced no kda_example_plugin library")
endif()
step("loading the plugin with the installed driftgate" ${prefix}/bin/driftgate list candidates --plugin ${plugin})
if(NOT step_output MATCHES "kda_plugin_recurrent_f32 +kda +plugin")
  message(FATAL_ERROR "plugin_install_test: kda_plugin_recurrent_f32 is not listed:\n${step_output}")
endif()
message(STATUS "plugin_install_test: built ${plugin} against ${prefix} and loaded it")
