# Tools against their reference: xcoll-perf with nccl-tests' command lines,
# xcoll-info against the library (one parameter table). Included from
# tests/CMakeLists.txt; each runs in a few seconds.
if(TARGET xcoll-perf AND TARGET xcoll-info AND TARGET xcollrun)
  add_test(NAME tools.xcoll_perf_nccl_tests_flags
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/tools/test_xcoll_perf.sh
            $<TARGET_FILE_DIR:xcoll-perf>)
  add_test(NAME tools.xcoll_info_matches_library
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/tools/test_xcoll_info.sh
            $<TARGET_FILE_DIR:xcoll-perf>)
  # The tcp backend over IPv6 (::1); skipped (77) without IPv6 loopback.
  add_test(NAME tools.tcp_ipv6
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/tools/test_ipv6.sh
            $<TARGET_FILE_DIR:xcoll-perf>)
  # A bad command line gets two lines and exit 2, from every tool (xtrain
  # too when it is built).
  set(_cli_xtrain "")
  if(TARGET xtrain)
    set(_cli_xtrain $<TARGET_FILE:xtrain>)
  endif()
  add_test(NAME tools.cli_errors
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/tools/test_cli_errors.sh
            $<TARGET_FILE_DIR:xcoll-perf> ${_cli_xtrain})
  # A failed init: one line per rank, the library's or the tool's.
  add_test(NAME tools.failure_once
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/tools/test_failure_once.sh
            $<TARGET_FILE_DIR:xcoll-perf> ${_cli_xtrain})
  # The host census: ranks pinned one per CPU are not an oversubscribed
  # host, two pinned to one CPU are (core/host.h); skipped (77) on 1 CPU.
  add_test(NAME tools.host_census
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/tools/test_host_census.sh
            $<TARGET_FILE_DIR:xcoll-perf>)
  set_tests_properties(tools.xcoll_perf_nccl_tests_flags
    tools.xcoll_info_matches_library tools.tcp_ipv6 tools.cli_errors
    tools.failure_once tools.host_census PROPERTIES TIMEOUT 60
    LABELS tools SKIP_RETURN_CODE 77)
endif()

# bench/allreduce.py's peers (gloo, Open MPI) on every collective it
# offers, results checked; skipped (77) with neither installed.
if(TARGET xcoll-perf AND TARGET xcoll-info)
  set(_bench_python python3)
  if(XCOLL_TORCH_PYTHON_FOUND)
    set(_bench_python ${XCOLL_TORCH_PYTHON_FOUND})
  endif()
  add_test(NAME tools.bench_peers
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/tools/test_bench_peers.sh
            $<TARGET_FILE_DIR:xcoll-perf> ${_bench_python})
  set_tests_properties(tools.bench_peers PROPERTIES TIMEOUT 600
    LABELS tools PROCESSORS 2 SKIP_RETURN_CODE 77)
endif()

# xcoll-perf on device buffers, with --check, over the stand-in CUDA driver
# (tests/unit/fake_libcuda.c): nccl_like GPU ranks (the ring kernels' host
# build), a mixed ring (--gpu-ranks 0), tcp staging, and more nccl_like
# launches queued than it keeps in flight (queue), and the driver calls a
# blocking launch makes (calls). The nccl_like cases
# need the embedded kernels (XCOLL_HAVE_CUDA); tcp staging needs only the
# stand-in. The same command lines run on a GPU in scripts/gpu-check.sh.
if(TARGET staging AND TARGET xcoll-perf AND TARGET xcollrun)
  set(_perf_device_cases tcp)
  set(_perf_device_quick "")
  if(XCOLL_SANITIZE)
    set(_perf_device_quick --quick)
  endif()
  if(XCOLL_HAVE_CUDA)
    list(APPEND _perf_device_cases nccl_like mixed queue calls)
  endif()
  foreach(case ${_perf_device_cases})
    set(test tools.xcoll_perf_device.${case})
    add_test(NAME ${test}
      COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/tools/test_xcoll_perf_device.sh
              $<TARGET_FILE_DIR:xcoll-perf> ${case} ${_perf_device_quick})
    set_tests_properties(${test} PROPERTIES TIMEOUT 300
      LABELS "tools;conformance" PROCESSORS 2
      ENVIRONMENT "XCOLL_TIMEOUT_S=60;FAKE_CUDA_DEVICES=8;LD_LIBRARY_PATH=$<TARGET_FILE_DIR:fake_libcuda>")
  endforeach()
endif()
