# security.cmake - attack tests (docs/security.md), label "security": a
# stranger without the job's secret at the store while a 4-rank job runs, a
# port scan with crafted HELLOs against every listener during startup, a rank
# killed during startup, a WORLD_SIZE mismatch, a duplicated RANK, orphans
# of a killed xcollrun and where the store binds (MASTER_ADDR, XCOLL_STORE_BIND). Each is
# a real multi-process job driven by tests/security/attack.py. The unit-level
# checks are unit.auth (the challenge-response) and unit.tcp_hello (crafted
# HELLO fields). Included by tests/CMakeLists.txt.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND AND TARGET xcollrun AND TARGET xcoll-perf)
  foreach(mode stranger scan dying worldsize duprank orphans bind)
    add_test(NAME security.${mode}
      COMMAND ${Python3_EXECUTABLE}
              ${CMAKE_CURRENT_SOURCE_DIR}/security/attack.py ${mode}
              ${PROJECT_BINARY_DIR})
    # Bounds inside the script are 150 s per job; a busy 2-core machine
    # gets headroom, and PROCESSORS 2 keeps ctest -j2 from doubling up.
    set_tests_properties(security.${mode} PROPERTIES TIMEOUT 300
      LABELS security PROCESSORS 2)
  endforeach()
endif()
