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
  set_tests_properties(tools.xcoll_perf_nccl_tests_flags
    tools.xcoll_info_matches_library tools.tcp_ipv6 PROPERTIES TIMEOUT 60
    LABELS tools SKIP_RETURN_CODE 77)
endif()
