# security.cmake - attack tests (docs/security.md), label "security": a
# stranger without the job's secret at the store while a 4-rank job runs, a
# port scan with crafted HELLOs against every listener during startup, a rank
# killed during startup, a WORLD_SIZE mismatch, a duplicated RANK, orphans
# of a killed xcollrun, where the store binds (MASTER_ADDR, XCOLL_STORE_BIND),
# and strangers holding or flooding connections on the startup listeners
# and the rendezvous store (crowd.*, flood.*). Each is a real multi-process
# job driven by tests/security/attack.py. The unit-level checks are
# unit.auth (the challenge-response), unit.tcp_hello (crafted HELLO fields)
# and unit.store_strangers (the store's listener). Included by
# tests/CMakeLists.txt.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND AND TARGET xcollrun AND TARGET xcoll-perf)
  # The crowd and flood tests hold one rank at its first listen() until the
  # stranger is in place (hold_listen.c, preloaded into the job's ranks).
  add_library(xcoll_hold_listen MODULE security/hold_listen.c)
  target_link_libraries(xcoll_hold_listen PRIVATE ${CMAKE_DL_LIBS})
  set(attacks stranger scan dying worldsize duprank orphans bind)
  foreach(kind unix tcpnet mesh store)
    list(APPEND attacks "crowd ${kind} 40" "crowd ${kind} 1000" "flood ${kind}")
  endforeach()
  # More idle connections than rank 0 has descriptors (ulimit -n 1024).
  list(APPEND attacks "crowd store 1100")
  foreach(attack IN LISTS attacks)
    string(REPLACE " " ";" args "${attack}")
    string(REPLACE " " "." name "${attack}")
    list(GET args 0 mode)
    list(REMOVE_AT args 0)
    add_test(NAME security.${name}
      COMMAND ${Python3_EXECUTABLE}
              ${CMAKE_CURRENT_SOURCE_DIR}/security/attack.py ${mode}
              ${PROJECT_BINARY_DIR} ${args})
    # Bounds inside the script are 150 s per job; a busy 2-core machine
    # gets headroom, and PROCESSORS 2 keeps ctest -j2 from doubling up.
    set_tests_properties(security.${name} PROPERTIES TIMEOUT 300
      LABELS security PROCESSORS 2)
  endforeach()
endif()

# The rendezvous store's listener against strangers (deadline, bounds, a
# stderr that blocks): a unit test, in the security label too.
if(TEST unit.store_strangers)
  set_tests_properties(unit.store_strangers PROPERTIES LABELS "unit;security")
endif()
