# mp.cmake - multi-process tests: the conformance suite (every collective x
# dtype x op x count x in-place x blocking mode, on every backend and several
# world sizes) and the fault tests (dead or hung peer, bad environment).
# Included by tests/CMakeLists.txt. Every entry has a TIMEOUT and runs with
# XCOLL_TIMEOUT_S=60 unless it tests the timeout itself.
#
# Time budget: the whole ctest should stay under about 6 minutes with -j2 on
# a 2-core machine. Sum of test times measured on a quiet machine before the
# ucx_tcp entries were widened: 207 s for everything; the ucx_tcp entries at
# every world size, the forced-algorithm entries on both ucx variants and
# split_threads added about 140 s measured on a loaded machine (load 4 to 9),
# so less when quiet. Under sanitizers (XCOLL_SANITIZE) a --quick subset runs.
# Entries with several ranks ask for 2 processors, so ctest -j2 runs them one
# at a time instead of oversubscribing the cores twice over. The 4M-element
# count only runs at 2 and 4 ranks (".big").

add_executable(conformance ${CMAKE_CURRENT_SOURCE_DIR}/conformance/conformance.c)
target_link_libraries(conformance PRIVATE xcoll_static m)
add_executable(split_threads ${CMAKE_CURRENT_SOURCE_DIR}/conformance/split_threads.c)
target_link_libraries(split_threads PRIVATE xcoll_static Threads::Threads)
add_executable(prompt_waits ${CMAKE_CURRENT_SOURCE_DIR}/conformance/prompt_waits.c)
target_link_libraries(prompt_waits PRIVATE xcoll_static)
add_executable(mixed_calls ${CMAKE_CURRENT_SOURCE_DIR}/conformance/mixed_calls.c)
target_link_libraries(mixed_calls PRIVATE xcoll_static)
add_executable(staging ${CMAKE_CURRENT_SOURCE_DIR}/conformance/staging.c)
target_link_libraries(staging PRIVATE xcoll_static ${CMAKE_DL_LIBS})
add_executable(fault_init ${CMAKE_CURRENT_SOURCE_DIR}/faults/fault_init.c)
target_link_libraries(fault_init PRIVATE xcoll_static m)
add_executable(fault_peer ${CMAKE_CURRENT_SOURCE_DIR}/faults/fault_peer.c)
target_link_libraries(fault_peer PRIVATE xcoll_static m ${CMAKE_DL_LIBS})

set(XCOLL_MP_ENV "XCOLL_TIMEOUT_S=60")

# xcoll_add_mp_program(TEST PROGRAM BACKEND NPROC TIMEOUT_S EXTRA_ENV ARGS...)
# Registers TEST running PROGRAM on NPROC ranks under xcollrun, labels
# conformance and BACKEND.
function(xcoll_add_mp_program test program backend nproc timeout extra_env)
  add_test(NAME ${test}
    COMMAND $<TARGET_FILE:xcollrun> --nproc-per-node ${nproc} --master-port 0
            $<TARGET_FILE:${program}> ${ARGN})
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

# xcoll_add_conformance(NAME BACKEND NPROC TIMEOUT_S [EXTRA_ENV] ARGS...)
# Registers conformance.NAME running the suite on NPROC ranks.
function(xcoll_add_conformance name backend nproc timeout extra_env)
  xcoll_add_mp_program(conformance.${name} conformance ${backend} ${nproc}
                       ${timeout} "${extra_env}" --backend ${backend} ${ARGN})
endfunction()

set(XCOLL_BIG --min-count 4194304 --max-count 4194304)

if(TARGET xcollrun)
  if(XCOLL_SANITIZE)
    # Sanitized builds are several times slower: --quick (about 25 s at 4
    # ranks under address,undefined).
    foreach(np 1 2 3 4)
      xcoll_add_conformance(tcp.np${np} tcp ${np} 300 "" --quick)
    endforeach()
  else()
    # tcp: everything at 1 to 4 ranks (np4 split by collective so that no
    # entry runs long), --quick at 5 and 8 ranks.
    xcoll_add_conformance(tcp.np1 tcp 1 120 "")
    xcoll_add_conformance(tcp.np2 tcp 2 180 "")
    xcoll_add_conformance(tcp.np2.big tcp 2 180 "" ${XCOLL_BIG}
      --coll allreduce --coll reduce_scatter --coll reduce)
    xcoll_add_conformance(tcp.np3 tcp 3 240 "")
    xcoll_add_conformance(tcp.np4.allreduce tcp 4 180 ""
      --coll allreduce --coll errors)
    xcoll_add_conformance(tcp.np4.reduce_scatter tcp 4 180 ""
      --coll reduce_scatter --coll barrier)
    xcoll_add_conformance(tcp.np4.allgather_broadcast tcp 4 180 ""
      --coll allgather --coll broadcast)
    xcoll_add_conformance(tcp.np4.reduce tcp 4 180 "" --coll reduce)
    xcoll_add_conformance(tcp.np4.big tcp 4 180 "" ${XCOLL_BIG}
      --coll allreduce --coll allgather --coll broadcast)
    xcoll_add_conformance(tcp.np5 tcp 5 180 "" --quick)
    xcoll_add_conformance(tcp.np8 tcp 8 240 "" --quick)
  endif()
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
    # ucx: the same algorithms as tcp (core/algorithms) over another
    # transport, twice: with UCX's default transports (shared memory between
    # the ranks of one host) and with UCX_TLS=tcp (the path used between
    # hosts). Both variants get the same entries, at every world size the
    # tcp suite uses.
    if(XCOLL_SANITIZE)
      foreach(np 2 3)
        xcoll_add_conformance(ucx.np${np} ucx ${np} 300 "" --quick)
        xcoll_add_conformance(ucx_tcp.np${np} ucx ${np} 300 "UCX_TLS=tcp"
          --quick)
      endforeach()
    else()
      foreach(variant ucx ucx_tcp)
        set(tls "")
        if(variant STREQUAL "ucx_tcp")
          set(tls "UCX_TLS=tcp")
        endif()
        xcoll_add_conformance(${variant}.np1 ucx 1 120 "${tls}")
        xcoll_add_conformance(${variant}.np2 ucx 2 180 "${tls}")
        xcoll_add_conformance(${variant}.np2.big ucx 2 180 "${tls}"
          ${XCOLL_BIG} --coll allreduce)
        foreach(np 3 4 5)
          xcoll_add_conformance(${variant}.np${np} ucx ${np} 180 "${tls}"
            --quick)
        endforeach()
        # 8 ranks on 2 cores: UCX's tcp transport makes the 131073-element
        # counts slow (30 s), so ucx_tcp stops at 1021 elements there.
        set(np8_max "")
        if(variant STREQUAL "ucx_tcp")
          set(np8_max --max-count 1021)
        endif()
        xcoll_add_conformance(${variant}.np8 ucx 8 180 "${tls}" --quick
          ${np8_max})
        # Each algorithm forced, as for tcp above.
        foreach(np 3 4)
          foreach(algo ring recursive_doubling rabenseifner)
            xcoll_add_conformance(${variant}.np${np}.allreduce_${algo} ucx
              ${np} 240 "XCOLL_ALGO=allreduce:${algo};${tls}" --quick
              --coll allreduce)
          endforeach()
          foreach(algo binomial chain)
            xcoll_add_conformance(${variant}.np${np}.broadcast_${algo} ucx
              ${np} 240 "XCOLL_ALGO=broadcast:${algo};${tls}" --quick
              --coll broadcast)
          endforeach()
        endforeach()
      endforeach()
    endif()
  endif()

  # Two communicators split from the world (by parity; all ranks with the
  # keys reversed) used at the same time from two threads.
  set(XCOLL_SPLIT_BACKENDS tcp)
  if(XCOLL_HAVE_UCX)
    list(APPEND XCOLL_SPLIT_BACKENDS ucx)
  endif()
  foreach(backend ${XCOLL_SPLIT_BACKENDS})
    foreach(np 2 3 4)
      set(test conformance.split_threads.${backend}.np${np})
      add_test(NAME ${test}
        COMMAND $<TARGET_FILE:xcollrun> --nproc-per-node ${np} --master-port 0
                $<TARGET_FILE:split_threads>)
      set_tests_properties(${test} PROPERTIES TIMEOUT 120
        LABELS "conformance;${backend}" PROCESSORS 2
        ENVIRONMENT "${XCOLL_MP_ENV};XCOLL_BACKEND=${backend}")
    endforeach()
  endforeach()

  # Non-blocking calls waited for at once, which run on the waiting thread
  # once the library has learned the pattern; calls nobody waits for, or
  # only tests, must still complete (tests/conformance/prompt_waits.c).
  foreach(backend ${XCOLL_SPLIT_BACKENDS} nccl_like)
    foreach(np 2 3)
      xcoll_add_mp_program(conformance.prompt_waits.${backend}.np${np}
                           prompt_waits ${backend} ${np} 120 "XCOLL_TIMEOUT_S=20")
    endforeach()
  endforeach()

  # Irregular mixes: alltoallv with gaps and empty blocks, all-pairs groups
  # posted in a different order on each rank, 8 different calls in flight,
  # a split and the world interleaved (tests/conformance/mixed_calls.c).
  foreach(backend ${XCOLL_SPLIT_BACKENDS} nccl_like)
    foreach(np 1 3 5)
      xcoll_add_mp_program(conformance.mixed_calls.${backend}.np${np}
                           mixed_calls ${backend} ${np} 120 "XCOLL_TIMEOUT_S=30")
    endforeach()
  endforeach()

  # CUDA device buffers staged through pinned memory on tcp and ucx, over
  # the stand-in driver (tests/unit/fake_libcuda.c: device memory the host
  # cannot touch, copies that land only when their stream is synchronised).
  foreach(backend ${XCOLL_SPLIT_BACKENDS})
    foreach(np 2 3)
      set(test conformance.staging.${backend}.np${np})
      set(args "")
      if(XCOLL_SANITIZE)
        set(args --quick)
      endif()
      add_test(NAME ${test}
        COMMAND $<TARGET_FILE:xcollrun> --nproc-per-node ${np} --master-port 0
                $<TARGET_FILE:staging> ${args})
      set_tests_properties(${test} PROPERTIES TIMEOUT 180
        LABELS "conformance;${backend};staging" PROCESSORS 2
        ENVIRONMENT "${XCOLL_MP_ENV};XCOLL_BACKEND=${backend};XCOLL_DEVICE=cuda;FAKE_CUDA_DEVICES=8;LD_LIBRARY_PATH=$<TARGET_FILE_DIR:fake_libcuda>")
    endforeach()
  endforeach()

  # The same on a real GPU (label gpu): skipped, exit 77, without one.
  foreach(backend ${XCOLL_SPLIT_BACKENDS})
    set(test gpu.staging.${backend})
    add_test(NAME ${test}
      COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_staging.sh
              $<TARGET_FILE:xcollrun> $<TARGET_FILE:staging> ${backend})
    set_tests_properties(${test} PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
      LABELS "gpu;${backend}" PROCESSORS 2 ENVIRONMENT "${XCOLL_MP_ENV}")
  endforeach()

  # A peer dies (SIGKILL) or hangs (SIGSTOP) during an allreduce loop.
  foreach(mode kill stop)
    add_test(NAME faults.peer_${mode}
      COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/faults/fault_peer.sh
              $<TARGET_FILE:xcollrun> $<TARGET_FILE:fault_peer> ${mode})
    set_tests_properties(faults.peer_${mode} PROPERTIES TIMEOUT 90
      LABELS "faults;tcp" ENVIRONMENT XCOLL_BACKEND=tcp PROCESSORS 2)
    if(XCOLL_HAVE_UCX)
      add_test(NAME faults.peer_${mode}.ucx
        COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/faults/fault_peer.sh
                $<TARGET_FILE:xcollrun> $<TARGET_FILE:fault_peer> ${mode})
      set_tests_properties(faults.peer_${mode}.ucx PROPERTIES TIMEOUT 90
        LABELS "faults;ucx" ENVIRONMENT XCOLL_BACKEND=ucx PROCESSORS 2)
    endif()
  endforeach()

  # The right rank is blamed (tests/faults/fault_blame.sh): a rank stopped
  # mid-allreduce is named as the one that stopped making progress by every
  # survivor (rank 2, and rank 0, the store's host); a rank that made one
  # call fewer and destroyed its communicator is named as having left, and
  # its destroy returns at once.
  add_executable(fault_blame ${CMAKE_CURRENT_SOURCE_DIR}/faults/fault_blame.c)
  target_link_libraries(fault_blame PRIVATE xcoll_static m)
  set(_blame_backends tcp)
  if(XCOLL_HAVE_UCX)
    list(APPEND _blame_backends ucx)
  endif()
  if(XCOLL_HAVE_NCCL_LIKE)
    list(APPEND _blame_backends nccl_like)
  endif()
  foreach(backend IN LISTS _blame_backends)
    foreach(mode stop leave)
      foreach(victim 2 0)
        set(test faults.blame.${mode}.${backend}.rank${victim})
        add_test(NAME ${test}
          COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/faults/fault_blame.sh
                  $<TARGET_FILE:xcollrun> $<TARGET_FILE:fault_blame> ${mode}
                  ${victim})
        set_tests_properties(${test} PROPERTIES TIMEOUT 90
          LABELS "faults;${backend}" ENVIRONMENT XCOLL_BACKEND=${backend}
          PROCESSORS 2)
      endforeach()
    endforeach()
  endforeach()

  # A comm that breaks with 20000 requests queued fails each of them with a
  # few log lines in all, on every backend.
  add_executable(fault_quiet ${CMAKE_CURRENT_SOURCE_DIR}/faults/fault_quiet.c)
  target_link_libraries(fault_quiet PRIVATE xcoll_static m)
  set(_quiet_backends tcp)
  if(XCOLL_HAVE_UCX)
    list(APPEND _quiet_backends ucx)
  endif()
  if(XCOLL_HAVE_NCCL_LIKE)
    list(APPEND _quiet_backends nccl_like)
  endif()
  foreach(backend IN LISTS _quiet_backends)
    add_test(NAME faults.quiet_failure.${backend}
      COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/faults/fault_quiet.sh
              $<TARGET_FILE:xcollrun> $<TARGET_FILE:fault_quiet>)
    set_tests_properties(faults.quiet_failure.${backend} PROPERTIES TIMEOUT 90
      LABELS "faults;${backend}" ENVIRONMENT XCOLL_BACKEND=${backend}
      PROCESSORS 2)
  endforeach()
else()
  message(STATUS "xcoll: tools/xcollrun.c missing: multi-process tests skipped")
endif()

# Bad environments for communicator creation (one process each).
foreach(case no_master port_taken rank_abc world_size_0 rank_out_of_range
    master_port_70000 backend_nope timeout_negative algo_bogus debug_loud
    nsocks_0 chunk_size_12q proto_ll128_on_tcp ib_timeout_99_on_tcp)
  add_test(NAME faults.env.${case}
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/faults/fault_env.sh
            $<TARGET_FILE:fault_init> ${case})
  set_tests_properties(faults.env.${case} PROPERTIES TIMEOUT 30 LABELS faults)
endforeach()

include(${CMAKE_CURRENT_SOURCE_DIR}/trainer.cmake OPTIONAL)
include(${CMAKE_CURRENT_SOURCE_DIR}/launcher.cmake OPTIONAL)

# The calls that move data without reducing it (alltoall, alltoallv,
# gather, scatter, send/recv in groups), tests/conformance/exchange.c, on
# every backend at 1, 2, 3, 4, 5 and 8 ranks (nccl_like: host ranks, over
# the mesh, backends/nccl_like/p2p.c); Bruck's alltoall forced at 3 ranks,
# where the size rule would not pick it; nccl_like at 3 ranks with its
# ring over the net plugin rather than shm (XCOLL_SHM_DISABLE=1), and with
# the example plugin, whose memory nccl_like registers (it sends from
# unregistered memory only over socket and ucx): there p2p.c copies through
# registered slots.
add_executable(exchange ${CMAKE_CURRENT_SOURCE_DIR}/conformance/exchange.c)
target_link_libraries(exchange PRIVATE xcoll_static ${CMAKE_DL_LIBS})
function(xcoll_add_exchange name backend nproc timeout extra_env)
  xcoll_add_mp_program(conformance.exchange.${name} exchange ${backend}
                       ${nproc} ${timeout} "${extra_env}" ${ARGN})
endfunction()
if(TARGET xcollrun)
  set(xcoll_exchange_backends tcp)
  if(XCOLL_HAVE_UCX)
    list(APPEND xcoll_exchange_backends ucx)
  endif()
  if(XCOLL_HAVE_NCCL_LIKE)
    list(APPEND xcoll_exchange_backends nccl_like)
  endif()
  foreach(backend ${xcoll_exchange_backends})
    foreach(np 1 2 3 4 5 8)
      set(quick "")
      if(XCOLL_SANITIZE OR np GREATER 4)
        set(quick --quick)
      endif()
      xcoll_add_exchange(${backend}.np${np} ${backend} ${np} 240 "" ${quick})
    endforeach()
  endforeach()
  xcoll_add_exchange(tcp.np3.bruck tcp 3 240 "XCOLL_ALGO=alltoall:bruck"
                     --only alltoall)
  if(XCOLL_HAVE_NCCL_LIKE)
    set(quick "")
    if(XCOLL_SANITIZE)
      set(quick --quick)
    endif()
    xcoll_add_exchange(nccl_like.np3.noshm nccl_like 3 240
                       "XCOLL_SHM_DISABLE=1" ${quick})
    if(TARGET xcoll-net-example)
      xcoll_add_exchange(nccl_like.np3.net_example nccl_like 3 240
                         "XCOLL_NET_PLUGIN=$<TARGET_FILE:xcoll-net-example>"
                         --quick)
    endif()
  endif()
endif()
