# unit.kernels_nvcc: compile check of the kernels/ headers as C11 (gcc, clang)
# and of kernels/cuda/ring_kernel.cu as CUDA (nvcc, sm_75/sm_80/sm_90 + PTX;
# the fatbin the build made, when it made one, for its XCOLL_CUDA_ARCHS).
# Compile only: there is no GPU to run a kernel. Skipped (77) without nvcc.
# Not registered in sanitizer builds: it compiles the same thing there.
if(NOT XCOLL_SANITIZE)
  set(_xcoll_nvcc /usr/local/cuda/bin/nvcc)
  if(CMAKE_CUDA_COMPILER)
    set(_xcoll_nvcc ${CMAKE_CUDA_COMPILER})
  endif()
  # With nvcc the build itself compiled the kernels (with -Werror) into
  # the library's fatbin (backends/nccl_like/CMakeLists.txt): the test then
  # inspects that fatbin instead of compiling them again.
  set(_xcoll_fatbin "")
  set(_xcoll_fatbin_archs "")
  if(XCOLL_RING_FATBIN)
    set(_xcoll_fatbin ${XCOLL_RING_FATBIN})
    string(REPLACE ";" "," _xcoll_fatbin_archs "${XCOLL_CUDA_ARCHS}")
  endif()
  add_test(NAME unit.kernels_nvcc
    COMMAND sh ${PROJECT_SOURCE_DIR}/kernels/cuda/check_compile.sh ${PROJECT_SOURCE_DIR})
  set_tests_properties(unit.kernels_nvcc PROPERTIES
    TIMEOUT 900 LABELS unit SKIP_RETURN_CODE 77
    ENVIRONMENT "NVCC=${_xcoll_nvcc};FATBIN=${_xcoll_fatbin};FATBIN_ARCHS=${_xcoll_fatbin_archs}")
endif()
