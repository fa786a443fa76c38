# Hardening tests (issue 11): collective desync detection on every host
# backend. Included from tests/CMakeLists.txt after mp.cmake.
if(TARGET xcollrun)
  add_executable(fault_desync ${CMAKE_CURRENT_SOURCE_DIR}/faults/fault_desync.c)
  target_link_libraries(fault_desync PRIVATE xcoll_static m)
  set(desync_backends tcp)
  if(XCOLL_HAVE_UCX)
    list(APPEND desync_backends ucx)
  endif()
  # Each case at 2 ranks, and the root case also at 3 (the odd root's
  # messages reach a rank that waits for someone else).
  foreach(backend ${desync_backends})
    foreach(spec op:2 dtype:2 count:2 root:2 kind:2 root:3 kind:3)
      string(REPLACE ":" ";" parts ${spec})
      list(GET parts 0 case)
      list(GET parts 1 np)
      set(test faults.desync.${backend}.${case}.np${np})
      add_test(NAME ${test}
        COMMAND $<TARGET_FILE:xcollrun> --nproc-per-node ${np} --master-port 0
                $<TARGET_FILE:fault_desync> ${case})
      # XCOLL_TIMEOUT_S=60: a detection by timeout would miss the 10 s bound.
      set_tests_properties(${test} PROPERTIES TIMEOUT 90
        LABELS "faults;${backend}" PROCESSORS 2
        ENVIRONMENT "XCOLL_TIMEOUT_S=60;XCOLL_BACKEND=${backend}")
    endforeach()
  endforeach()
endif()

# Checkpoint header validation and stale temporary files (trainer/checkpoint.c).
if(TARGET xtrain_core)
  add_executable(test_trainer_checkpoint ${CMAKE_CURRENT_SOURCE_DIR}/trainer/test_checkpoint.c)
  target_include_directories(test_trainer_checkpoint PRIVATE ${CMOCKA_INCLUDE_DIR})
  target_link_libraries(test_trainer_checkpoint PRIVATE xtrain_core ${CMOCKA_LIBRARY} m)
  add_test(NAME trainer.checkpoint COMMAND test_trainer_checkpoint)
  set_tests_properties(trainer.checkpoint PROPERTIES TIMEOUT 60 LABELS trainer)
endif()
