# The flight recorder (docs/flight-recorder.md): hangs run under xcollrun
# --log-dir, whose xcoll-fr summary must name the culprit rank and call
# (tests/faults/fault_fr.sh), and dumps checked against the documented
# format (docs/flight-recorder.schema.json). Each case is bounded by a short
# XCOLL_TIMEOUT_S and finishes in seconds.
if(TARGET xcollrun AND TARGET xcoll-fr)
  add_executable(fault_fr ${CMAKE_CURRENT_SOURCE_DIR}/faults/fault_fr.c)
  target_link_libraries(fault_fr PRIVATE xcoll_static)
  foreach(case skip order stop recv)
    add_test(NAME faults.flight_recorder.${case}
      COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/faults/fault_fr.sh
              $<TARGET_FILE:xcollrun> $<TARGET_FILE:fault_fr>
              $<TARGET_FILE:xcoll-fr> ${PROJECT_SOURCE_DIR}/docs ${case})
    set_tests_properties(faults.flight_recorder.${case} PROPERTIES TIMEOUT 60
      LABELS "faults;tools;tcp" PROCESSORS 2 ENVIRONMENT XCOLL_BACKEND=tcp)
  endforeach()
  # nccl_like: a peer that is alive but never makes the call (skip) must
  # time out too, although the waiting thread runs the op itself and its
  # fingerprint is batched: the proxy, asleep since the last op, is woken.
  # stop: the survivors' dumps name, per channel of the ring kernels, the
  # connection each waits on (rank 1 on every channel).
  if(XCOLL_HAVE_NCCL_LIKE)
    foreach(case skip order stop recv)
      add_test(NAME faults.flight_recorder.${case}.nccl_like
        COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/faults/fault_fr.sh
                $<TARGET_FILE:xcollrun> $<TARGET_FILE:fault_fr>
                $<TARGET_FILE:xcoll-fr> ${PROJECT_SOURCE_DIR}/docs ${case})
      set_tests_properties(faults.flight_recorder.${case}.nccl_like PROPERTIES
        TIMEOUT 60 LABELS "faults;tools;nccl_like" PROCESSORS 2
        ENVIRONMENT XCOLL_BACKEND=nccl_like)
    endforeach()
  endif()
endif()

# unit.flight parses the entries it formats with cJSON.
if(TARGET test_flight)
  target_link_libraries(test_flight PRIVATE cjson)
endif()
