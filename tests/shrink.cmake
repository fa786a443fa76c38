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
    foreach(mode kill kill0 leave)
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
