# Shrinking a communicator (tests/faults/fault_shrink.sh): 4 ranks lose one,
# killed or leaving, and the three others shrink and run collectives on the
# new communicator, on every backend built.
if(TARGET xcollrun)
  add_executable(fault_shrink ${CMAKE_CURRENT_SOURCE_DIR}/faults/fault_shrink.c)
  target_link_libraries(fault_shrink PRIVATE xcoll_static m)
  set(_shrink_backends tcp)
  if(XCOLL_HAVE_UCX)
    list(APPEND _shrink_backends ucx)
  endif()
  if(XCOLL_HAVE_NCCL_LIKE)
    list(APPEND _shrink_backends nccl_like)
  endif()
  foreach(backend IN LISTS _shrink_backends)
    foreach(mode kill kill0 leave abort-blocked)
      set(test faults.shrink.${mode}.${backend})
      add_test(NAME ${test}
        COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/faults/fault_shrink.sh
                $<TARGET_FILE:xcollrun> $<TARGET_FILE:fault_shrink> ${mode})
      set_tests_properties(${test} PROPERTIES TIMEOUT 90
        LABELS "faults;${backend}" ENVIRONMENT XCOLL_BACKEND=${backend}
        PROCESSORS 2)
    endforeach()
  endforeach()
endif()

# The conformance suite on a shrunk communicator: 4 ranks, rank 2 (or 0)
# SIGKILLs itself after an allreduce, the three others shrink with
# XCOLL_SHRINK_ABORT and run the whole quick suite on the new communicator,
# every result checked against what a fresh 3-rank job must give
# (conformance.c --lose-rank). The store is the launcher's, so rank 0's
# death leaves it. xcollrun exits with the lost rank's signal, so the
# verdict is the suite's line.
if(TARGET xcollrun AND TARGET conformance)
  foreach(backend IN LISTS _shrink_backends)
    foreach(lost 2 0)
      set(test conformance.shrink.${backend}.lose${lost})
      add_test(NAME ${test}
        COMMAND $<TARGET_FILE:xcollrun> --nproc-per-node 4 --master-port 0
                --store-host launcher $<TARGET_FILE:conformance> --quick
                --lose-rank ${lost})
      set_tests_properties(${test} PROPERTIES TIMEOUT 300
        LABELS "conformance;faults;${backend}" PROCESSORS 2
        PASS_REGULAR_EXPRESSION "conformance PASSED: backend ${backend}, 3 ranks"
        FAIL_REGULAR_EXPRESSION "FATAL|conformance FAILED"
        ENVIRONMENT "XCOLL_BACKEND=${backend};XCOLLRUN_GRACE_S=240;XCOLL_TIMEOUT_S=60")
    endforeach()
  endforeach()
endif()
