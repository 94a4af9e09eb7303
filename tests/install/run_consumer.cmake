# cmake -P run_consumer.cmake: install posenc into a fresh prefix, then configure, build
# and run the consumer project against the installed package (MODE=install) or through
# add_subdirectory (MODE=subdirectory).
# Inputs: SOURCE_DIR, WORK_DIR, MODE, CXX_COMPILER, GENERATOR; for MODE=install, VERSION
# (the project's) and optionally BUILD_TREE, a configured and built posenc tree whose
# install must put a working CLI at bin/posenc, and STB_DIR, the folder of
# stb_image_write.h where there is one (hidden from the plain configure).
#
# MODE=install also checks the packaging a user meets first: a plain top-level configure
# with Google Benchmark and stb hidden skips the benchmarks and the tour with one line each
# and installs without building anything; the installed posenc.pc compiles and links the
# consumer without CMake (skipped with a message where pkg-config is absent).
foreach(v SOURCE_DIR WORK_DIR MODE CXX_COMPILER GENERATOR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_consumer.cmake: ${v} is not set")
  endif()
endforeach()

# run(<command...>): runs it, prints its output, fails on a non-zero exit; the output is
# left in run_output.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(common -G "${GENERATOR}" -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=Release)

if(MODE STREQUAL "install")
  # Tests off (Catch2 is a developer's dependency); benchmark and stb hidden from CMake.
  set(prefix "${WORK_DIR}/prefix")
  run(${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/pkg" ${common} -DPOSENC_BUILD_TESTS=OFF
      -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON "-DCMAKE_IGNORE_PATH=${STB_DIR}")
  foreach(skipped "Google Benchmark not found" "stb_image_write.h not found")
    string(FIND "${run_output}" "${skipped}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "the configure did not say \"${skipped}\"")
    endif()
  endforeach()
  run(${CMAKE_COMMAND} --install "${WORK_DIR}/pkg" --prefix "${prefix}")
  if(NOT EXISTS "${prefix}/share/cmake/posenc/posencConfigVersion.cmake")
    message(FATAL_ERROR "posencConfigVersion.cmake was not installed")
  endif()

  # The CLI, from a tree where it was built, installed as bin/posenc.
  if(BUILD_TREE)
    run(${CMAKE_COMMAND} --install "${BUILD_TREE}" --prefix "${prefix}")
    if(NOT EXISTS "${prefix}/bin/posenc")
      message(FATAL_ERROR "bin/posenc was not installed (is posenc_cli built in ${BUILD_TREE}?)")
    endif()
    run("${prefix}/bin/posenc" --version)
    if(NOT run_output MATCHES "^posenc ${VERSION}")
      message(FATAL_ERROR "bin/posenc --version printed '${run_output}', not 'posenc ${VERSION}'")
    endif()
  endif()

  # pkg-config: the consumer compiled and linked with only `pkg-config --cflags --libs`.
  find_program(PKG_CONFIG NAMES pkg-config pkgconf)
  file(GLOB_RECURSE pc_files "${prefix}/posenc.pc")
  if(NOT pc_files)
    message(FATAL_ERROR "posenc.pc was not installed under ${prefix}")
  elseif(NOT PKG_CONFIG)
    message(STATUS "pkg-config not found: the posenc.pc consumer build skipped")
  else()
    list(GET pc_files 0 pc_file)
    get_filename_component(pc_dir "${pc_file}" DIRECTORY)
    set(ENV{PKG_CONFIG_PATH} "${pc_dir}")
    run(${PKG_CONFIG} --modversion posenc)
    if(NOT run_output MATCHES "^${VERSION}")
      message(FATAL_ERROR "pkg-config --modversion posenc: '${run_output}', not ${VERSION}")
    endif()
    run(${PKG_CONFIG} --cflags --libs posenc)
    separate_arguments(pc_flags UNIX_COMMAND "${run_output}")
    run(${CXX_COMPILER} -std=c++17 "${SOURCE_DIR}/tests/install/consumer/main.cpp"
        -o "${WORK_DIR}/pc_consumer" ${pc_flags})
    run("${WORK_DIR}/pc_consumer")
  endif()
  run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/install/consumer" -B "${WORK_DIR}/consumer" ${common}
      "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix")
else()
  run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/install/consumer" -B "${WORK_DIR}/consumer" ${common}
      "-DPOSENC_SOURCE_DIR=${SOURCE_DIR}")
endif()
run(${CMAKE_COMMAND} --build "${WORK_DIR}/consumer")
run("${WORK_DIR}/consumer/consumer")
