# POSENC_ENABLE_CUDA=ON: the CUDA language and toolkit for posenc's CUDA tests, benchmarks
# and examples. The posenc::posenc target itself stays header-only: a translation unit
# compiled by nvcc that includes <posenc/cuda.cuh> gets the CUDA backend.
include(CheckLanguage)
if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
  # the toolkit's usual home, when nvcc is not on the PATH
  find_program(_posenc_nvcc nvcc HINTS /usr/local/cuda/bin)
  if(_posenc_nvcc)
    set(CMAKE_CUDA_COMPILER "${_posenc_nvcc}" CACHE FILEPATH "CUDA compiler")
  endif()
endif()
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(FATAL_ERROR "posenc: POSENC_ENABLE_CUDA=ON, but no CUDA compiler (nvcc) was found: "
    "install the CUDA toolkit, put nvcc on the PATH or pass -DCMAKE_CUDA_COMPILER=/path/to/nvcc, "
    "or configure with -DPOSENC_ENABLE_CUDA=OFF")
endif()
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 80 90)
endif()
enable_language(CUDA)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
find_package(CUDAToolkit REQUIRED)
message(STATUS "posenc: CUDA ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}")
# A host without a GPU can only compile posenc's CUDA programs: as PTX alone, the front end
# still checks every line and ptxas (test_cuda_flash 107 of its 237 s of nvcc CPU time,
# bench_cuda_flash 174 -> 79 s) is skipped. posenc_cuda_sm80_kernels keeps machine code
# (KEEP_SASS), so every kernel's inline PTX (cp.async, ldmatrix, mma) is still assembled.
# scripts/test.sh turns this on where it finds no GPU.
option(POSENC_CUDA_PTX_ONLY
  "Compile the CUDA tests, benchmarks and examples to PTX only (no ptxas; a compile check where no GPU is)" OFF)

# posenc_cuda_target(<target> [KEEP_SASS]): the flags every posenc CUDA program compiles
# with. posenc's own code: every warning an error (POSENC_WARNINGS_AS_ERRORS). Eigen's
# host/device notes (20011, 20012, 20014: Eigen's __host__ functions called from its
# __host__ __device__ ones) come from Eigen itself and are silenced; they are the only ones.
# Under POSENC_CUDA_PTX_ONLY the target's architectures (CUDA_ARCHITECTURES, set before this
# call) become their virtual ones, unless KEEP_SASS.
function(posenc_cuda_target target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "KEEP_SASS" "" "")
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -diag-suppress=20011,20012,20014>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
  if(POSENC_WARNINGS_AS_ERRORS)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Werror>)
  endif()
  target_link_libraries(${target} PRIVATE CUDA::cudart_static)
  if(NOT POSENC_CUDA_PTX_ONLY OR arg_KEEP_SASS)
    return()
  endif()
  get_target_property(archs ${target} CUDA_ARCHITECTURES)
  set(virtual "")
  foreach(arch IN LISTS archs)
    if(NOT arch MATCHES "^[0-9]+[a-z]?(-real|-virtual)?$")
      message(FATAL_ERROR "posenc: POSENC_CUDA_PTX_ONLY needs numbered CUDA architectures, "
        "not '${arch}'")
    endif()
    string(REGEX REPLACE "-(real|virtual)$" "" arch "${arch}")
    list(APPEND virtual "${arch}-virtual")
  endforeach()
  list(REMOVE_DUPLICATES virtual)
  set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES "${virtual}")
endfunction()
