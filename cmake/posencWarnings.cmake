# posenc_target_warnings(<target>): the warning set posenc's own code is held to.
function(posenc_target_warnings target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    # C++ sources only: a CUDA target's .cu files get nvcc's set (posenc_cuda_target)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic>)
    if(POSENC_WARNINGS_AS_ERRORS)
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
    endif()
  endif()
endfunction()

# posenc_add_clang_syntax_test(<target> <source> [SYSTEM_INCLUDES <dir>...]): a CTest test,
# clang_syntax_<target>, that compiles <source> with clang++ -fsyntax-only and the warning
# set above as errors. clang's warnings come from its front end, so this is its whole
# warning check in a few seconds, for the example programs that the clang++ build of
# scripts/ci_matrix.sh (asan) no longer compiles: under AddressSanitizer they cost ~250 s
# of CPU, and the tests run the library paths they take. Reported skipped without clang++.
function(posenc_add_clang_syntax_test target source)
  cmake_parse_arguments(PARSE_ARGV 2 arg "" "" "SYSTEM_INCLUDES")
  if(NOT POSENC_BUILD_TESTS)
    return()
  endif()
  find_program(POSENC_STRICT_CLANGXX NAMES clang++ clang++-14
    DOC "clang++ for the consumer_strict_clang_* and clang_syntax_* tests")
  set(name clang_syntax_${target})
  if(NOT POSENC_STRICT_CLANGXX)
    add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} -E echo
      "${name}: skipped, no clang++ was found at configure time")
    set_tests_properties(${name} PROPERTIES SKIP_REGULAR_EXPRESSION "skipped")
    return()
  endif()
  get_target_property(eigen Eigen3::Eigen INTERFACE_INCLUDE_DIRECTORIES)
  set(includes -I${PROJECT_SOURCE_DIR}/include)
  foreach(dir IN LISTS eigen arg_SYSTEM_INCLUDES)
    list(APPEND includes -isystem ${dir})
  endforeach()
  add_test(NAME ${name} COMMAND ${POSENC_STRICT_CLANGXX} -std=c++17 -fsyntax-only -Wall -Wextra
    -Wpedantic -Werror ${includes} ${source})
endfunction()
