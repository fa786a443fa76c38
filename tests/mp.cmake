# mp.cmake - multi-process tests: the conformance suite (every collective x
# dtype x op x count x in-place x blocking mode, on every backend and several
# world sizes) and the fault tests (dead or hung peer, bad environment).
# Included by tests/CMakeLists.txt. Every entry has a TIMEOUT and runs with
# XCOLL_TIMEOUT_S=60 unless it tests the timeout itself.
#
# Time budget: the conformance entries together take a few minutes with -j2
# on a 2-core machine. Entries with several ranks ask for 2 processors, so
# ctest -j2 runs them one at a time instead of oversubscribing the cores
# twice over. The 4M-element count only runs at 2 and 4 ranks (".big").

add_executable(conformance ${CMAKE_CURRENT_SOURCE_DIR}/conformance/conformance.c)
target_link_libraries(conformance PRIVATE xcoll_static m)
add_executable(fault_init ${CMAKE_CURRENT_SOURCE_DIR}/faults/fault_init.c)
target_link_libraries(fault_init PRIVATE xcoll_static)
add_executable(fault_peer ${CMAKE_CURRENT_SOURCE_DIR}/faults/fault_peer.c)
target_link_libraries(fault_peer PRIVATE xcoll_static)

set(XCOLL_MP_ENV "XCOLL_TIMEOUT_S=60")

# xcoll_add_conformance(NAME BACKEND NPROC TIMEOUT_S [EXTRA_ENV] ARGS...)
# Registers conformance.NAME running the suite on NPROC ranks.
function(xcoll_add_conformance name backend nproc timeout extra_env)
  set(test conformance.${name})
  add_test(NAME ${test}
    COMMAND $<TARGET_FILE:xcollrun> --nproc-per-node ${nproc} --master-port 0
            $<TARGET_FILE:conformance> --backend ${backend} ${ARGN})
  set(env ${XCOLL_MP_ENV} XCOLL_BACKEND=${backend})
  if(extra_env)
    list(APPEND env ${extra_env})
  endif()
  set(procs 1)
  if(nproc GREATER 1)
    set(procs 2)
  endif()
  set_tests_properties(${test} PROPERTIES TIMEOUT ${timeout}
    LABELS "conformance;${backend}" ENVIRONMENT "${env}" PROCESSORS ${procs})
endfunction()

# xcoll_add_conformance_set(PREFIX BACKEND EXTRA_ENV NPROCS...)
# The standard split for one backend: small world sizes run everything, the
# larger ones run --quick (rotating the in-place and blocking-mode choices),
# and np4 is split by collective so that no single entry runs long.
function(xcoll_add_conformance_set prefix backend extra_env)
  foreach(np ${ARGN})
    if(XCOLL_SANITIZE)
      # Sanitized builds are slow: a quick pass over small counts.
      xcoll_add_conformance(${prefix}.np${np} ${backend} ${np} 300
        "${extra_env}" --quick --max-count 1021)
    elseif(np EQUAL 4)
      xcoll_add_conformance(${prefix}.np4.allreduce ${backend} 4 240
        "${extra_env}" --coll allreduce --coll errors)
      xcoll_add_conformance(${prefix}.np4.reduce_scatter ${backend} 4 240
        "${extra_env}" --coll reduce_scatter --coll barrier)
      xcoll_add_conformance(${prefix}.np4.allgather_broadcast ${backend} 4 240
        "${extra_env}" --coll allgather --coll broadcast)
      xcoll_add_conformance(${prefix}.np4.reduce ${backend} 4 240
        "${extra_env}" --coll reduce)
      xcoll_add_conformance(${prefix}.np4.big ${backend} 4 240
        "${extra_env}" --min-count 4194304 --max-count 4194304
        --coll allreduce --coll reduce_scatter --coll allgather
        --coll broadcast)
    elseif(np EQUAL 2)
      xcoll_add_conformance(${prefix}.np2 ${backend} 2 240 "${extra_env}")
      xcoll_add_conformance(${prefix}.np2.big ${backend} 2 240
        "${extra_env}" --min-count 4194304 --max-count 4194304)
    elseif(np LESS 4)
      xcoll_add_conformance(${prefix}.np${np} ${backend} ${np} 240
        "${extra_env}")
    else()
      xcoll_add_conformance(${prefix}.np${np} ${backend} ${np} 240
        "${extra_env}" --quick)
    endif()
  endforeach()
endfunction()

if(TARGET xcollrun)
  xcoll_add_conformance_set(tcp tcp "" 1 2 3 4 5 8)
  # Each algorithm forced, since the size-based choice leaves some of them
  # out at some world sizes (e.g. the allreduce ring only above 1 MiB when P
  # is a power of two). 3 ranks: not a power of two (Rabenseifner's fold);
  # 4 ranks: a power of two.
  if(NOT XCOLL_SANITIZE)
    foreach(np 3 4)
      foreach(algo ring recursive_doubling rabenseifner)
        xcoll_add_conformance(tcp.np${np}.allreduce_${algo} tcp ${np} 240
          "XCOLL_ALGO=allreduce:${algo}" --quick --coll allreduce)
      endforeach()
      foreach(algo binomial chain)
        xcoll_add_conformance(tcp.np${np}.broadcast_${algo} tcp ${np} 240
          "XCOLL_ALGO=broadcast:${algo}" --quick --coll broadcast)
      endforeach()
    endforeach()
  endif()
  if(XCOLL_HAVE_UCX)
    xcoll_add_conformance_set(ucx ucx "" 1 2 3 4 5 8)
    # UCX restricted to its TCP transport: the path used between hosts.
    xcoll_add_conformance(ucx_tcp.np3 ucx 3 240 "UCX_TLS=tcp" --quick)
    xcoll_add_conformance(ucx_tcp.np4 ucx 4 240 "UCX_TLS=tcp" --quick
      --max-count 1021)
  endif()

  # A peer dies (SIGKILL) or hangs (SIGSTOP) during an allreduce loop.
  foreach(mode kill stop)
    add_test(NAME faults.peer_${mode}
      COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/faults/fault_peer.sh
              $<TARGET_FILE:xcollrun> $<TARGET_FILE:fault_peer> ${mode})
    set_tests_properties(faults.peer_${mode} PROPERTIES TIMEOUT 90
      LABELS faults PROCESSORS 2)
  endforeach()
else()
  message(STATUS "xcoll: tools/xcollrun.c missing: multi-process tests skipped")
endif()

# Bad environments for communicator creation (one process each).
foreach(case no_master port_taken rank_abc world_size_0 rank_out_of_range
    master_port_70000 backend_nope timeout_negative algo_bogus debug_loud
    nsocks_0 chunk_size_12q)
  add_test(NAME faults.env.${case}
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/faults/fault_env.sh
            $<TARGET_FILE:fault_init> ${case})
  set_tests_properties(faults.env.${case} PROPERTIES TIMEOUT 30 LABELS faults)
endforeach()

include(${CMAKE_CURRENT_SOURCE_DIR}/trainer.cmake OPTIONAL)
include(${CMAKE_CURRENT_SOURCE_DIR}/launcher.cmake OPTIONAL)
