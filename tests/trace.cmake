# XCOLL_TRACE's structure: every track of a real multi-rank run nests
# (tests/trace/). Needs python3 for the checker and the merge tool.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND AND TARGET xcollrun AND TARGET xcoll-perf)
  set(XCOLL_TRACE_TEST_DIR ${CMAKE_CURRENT_SOURCE_DIR}/trace)
  function(trace_tracks_test name backend ranks)
    add_test(NAME trace.tracks.${name}
      COMMAND sh ${XCOLL_TRACE_TEST_DIR}/trace_tracks.sh
        $<TARGET_FILE:xcollrun> $<TARGET_FILE:xcoll-perf>
        ${PROJECT_SOURCE_DIR}/tools/xcoll-trace-merge ${ranks} ${ARGN})
    set_tests_properties(trace.tracks.${name} PROPERTIES TIMEOUT 120
      LABELS "trace;mp" ENVIRONMENT "XCOLL_BACKEND=${backend}")
  endfunction()
  trace_tracks_test(tcp.np3 tcp 3 collective chunk)
  if(TARGET xcoll_backend_nccl_like OR EXISTS ${PROJECT_SOURCE_DIR}/backends/nccl_like)
    # The ring's tracks over the net transport, whose proxy draws a span
    # per slot (the pairwise allreduce, the default where ranks outnumber
    # cores, draws one "pairwise" span per op on channel 0's track: the
    # entry below); over shm no proxy moves a slot, so no proxy span.
    trace_tracks_test(nccl_like.np3 nccl_like 3 collective channel primitive proxy)
    set_property(TEST trace.tracks.nccl_like.np3 APPEND PROPERTY ENVIRONMENT
      XCOLL_PAIRWISE=0 XCOLL_SHM_DISABLE=1)
    trace_tracks_test(nccl_like.shm.np3 nccl_like 3 collective channel primitive)
    set_property(TEST trace.tracks.nccl_like.shm.np3 APPEND PROPERTY
      ENVIRONMENT XCOLL_PAIRWISE=0)
    trace_tracks_test(nccl_like.pairwise.np3 nccl_like 3 collective channel)
    set_property(TEST trace.tracks.nccl_like.pairwise.np3 APPEND PROPERTY
      ENVIRONMENT XCOLL_PAIRWISE=1)
  endif()
endif()

