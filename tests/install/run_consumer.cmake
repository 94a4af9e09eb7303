# cmake -P run_consumer.cmake: install posenc into a fresh prefix, then configure, build
# and run the consumer project against the installed package (MODE=install) or through
# add_subdirectory (MODE=subdirectory).
# Inputs: SOURCE_DIR, WORK_DIR, MODE, CXX_COMPILER, GENERATOR.
foreach(v SOURCE_DIR WORK_DIR MODE CXX_COMPILER GENERATOR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_consumer.cmake: ${v} is not set")
  endif()
endforeach()

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(common -G "${GENERATOR}" -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=Release)

if(MODE STREQUAL "install")
  run(${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/pkg" ${common}
      -DPOSENC_BUILD_TESTS=OFF -DPOSENC_BUILD_EXAMPLES=OFF -DPOSENC_BUILD_BENCHMARKS=OFF
      -DPOSENC_INSTALL=ON "-DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix")
  run(${CMAKE_COMMAND} --install "${WORK_DIR}/pkg")
  if(NOT EXISTS "${WORK_DIR}/prefix/share/cmake/posenc/posencConfigVersion.cmake")
    message(FATAL_ERROR "posencConfigVersion.cmake was not installed")
  endif()
  run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/install/consumer" -B "${WORK_DIR}/consumer" ${common}
      "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix")
else()
  run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/install/consumer" -B "${WORK_DIR}/consumer" ${common}
      "-DPOSENC_SOURCE_DIR=${SOURCE_DIR}")
endif()
run(${CMAKE_COMMAND} --build "${WORK_DIR}/consumer")
run("${WORK_DIR}/consumer/consumer")
