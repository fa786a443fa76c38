# nccl_like.cmake - tests of the nccl_like backend (backends/nccl_like/):
# the conformance suite at 1 to 8 ranks across net plugins (XCOLL_NET),
# protocols (XCOLL_PROTO), channel counts (XCOLL_NCHANNELS) and a FIFO small
# enough that messages wrap it many times (XCOLL_BUFFSIZE); bit-identical
# floats across ranks and repetitions; a killed or stopped rank; no thread
# left after abort. Included by tests/CMakeLists.txt after mp.cmake.
#
# Time budget: all entries together under about 5 minutes with ctest -j2 on
# an idle 2-core machine (docs/nccl_like.md has the measured times). Entries
# with several ranks ask for 2 processors so that -j2 runs them one at a
# time.
if(NOT XCOLL_HAVE_NCCL_LIKE OR NOT TARGET xcollrun)
  return()
endif()

add_executable(nl_determinism ${CMAKE_CURRENT_SOURCE_DIR}/nccl_like/nl_determinism.c)
target_link_libraries(nl_determinism PRIVATE xcoll_static m)
add_executable(nl_late_peer ${CMAKE_CURRENT_SOURCE_DIR}/nccl_like/nl_late_peer.c)
target_link_libraries(nl_late_peer PRIVATE xcoll_static m)
add_executable(nl_abort_threads ${CMAKE_CURRENT_SOURCE_DIR}/nccl_like/nl_abort_threads.c)
target_link_libraries(nl_abort_threads PRIVATE xcoll_static Threads::Threads)
add_executable(nl_stream ${CMAKE_CURRENT_SOURCE_DIR}/nccl_like/nl_stream.c)
target_link_libraries(nl_stream PRIVATE xcoll_static)

# Small FIFO: 8 slots of 1 KiB, so a 131072-element float32 collective
# wraps each channel's FIFO about 30 times per ring step.
set(NL_SMALL "XCOLL_BUFFSIZE=8K")

# nl_conf(NAME NPROC TIMEOUT_S ENV ARGS...): conformance.nccl_like.NAME
function(nl_conf name nproc timeout env)
  xcoll_add_conformance(nccl_like.${name} nccl_like ${nproc} ${timeout}
    "${env}" ${ARGN})
endfunction()

if(XCOLL_SANITIZE)
  # 2 channels, as the default was before it followed the cores: worker
  # threads of two channels, the proxy and the waiter all under the
  # sanitizers.
  foreach(np 1 2 3)
    nl_conf(np${np} ${np} 300 "XCOLL_NCHANNELS=2" --quick)
  endforeach()
  # The 3-rank entry runs the pairwise allreduce wherever it runs (it is
  # the default only where ranks outnumber cores): its links and stage
  # under the sanitizers; the ring's are at 2 ranks.
  set_property(TEST conformance.nccl_like.np3 APPEND PROPERTY ENVIRONMENT
    XCOLL_PAIRWISE=1)
  nl_conf(np2.ll.small 2 300 "XCOLL_PROTO=ll;${NL_SMALL}" --quick)
  # Rabenseifner's allreduce (rabenseifner.c) under ASan: its stage, its
  # halves of user buffers in and out of place (one thread per op: TSan's
  # time goes to the 3-rank entries above).
  if(NOT XCOLL_SANITIZE MATCHES "thread")
    nl_conf(np4.rabenseifner 4 300 "XCOLL_PAIRWISE=1;XCOLL_PROTO=simple"
      --quick --coll allreduce)
  endif()
else()
  nl_conf(np1 1 120 "")
  # The entries below connect the ring over shm (the default between ranks
  # of one host) unless they set XCOLL_SHM_DISABLE=1, which the ones that
  # test a net plugin do: the net transport keeps np2.simple, np2.ll.nch1,
  # np3.slot_path, np4.ll.net and the ucx entries.
  # socket plugin, simple protocol, 2 channels (the default on a host with
  # 2 cores per rank; np5 and np8 below take the default, which on a 2-core
  # machine is 1), all combinations; over TCP (XCOLL_SOCKET_UNIX=0), as
  # between hosts: the other entries connect this host's ranks over Unix
  # sockets, the default
  nl_conf(np2.simple 2 240
    "XCOLL_NET=socket;XCOLL_SHM_DISABLE=1;XCOLL_SOCKET_UNIX=0;XCOLL_PROTO=simple;XCOLL_NCHANNELS=2")
  nl_conf(np2.ll.nch1 2 240
    "XCOLL_NET=socket;XCOLL_SHM_DISABLE=1;XCOLL_PROTO=ll;XCOLL_NCHANNELS=1"
    --quick)
  nl_conf(np2.simple.nch4.small 2 240
    "XCOLL_PROTO=simple;XCOLL_NCHANNELS=4;${NL_SMALL}" --quick)
  # The most channels there are (NL_MAX_CHANNELS), over shm.
  nl_conf(np2.simple.nch32.small 2 240
    "XCOLL_PROTO=simple;XCOLL_NCHANNELS=32;${NL_SMALL}" --quick)
  nl_conf(np2.big 2 240 "XCOLL_PROTO=simple" ${XCOLL_BIG} --coll allreduce)
  nl_conf(np3.simple.nch1 3 240 "XCOLL_PROTO=simple;XCOLL_NCHANNELS=1" --quick)
  # Only the workers run kernels (XCOLL_WAIT_RUNS=0): the path every
  # nonblocking call takes, here for the blocking calls too.
  nl_conf(np3.workers_only 3 240 "XCOLL_WAIT_RUNS=0;XCOLL_NCHANNELS=2" --quick)
  # Direct sends off (XCOLL_DIRECT=0): the slot path, as a CUDA rank runs
  # it, on the socket plugin where direct sends are the default.
  nl_conf(np3.slot_path 3 240
    "XCOLL_DIRECT=0;XCOLL_SHM_DISABLE=1;XCOLL_SOCKET_UNIX=0;XCOLL_PROTO=simple;${NL_SMALL}"
    --quick)
  nl_conf(np3.ll.nch4.small 3 240 "XCOLL_PROTO=ll;XCOLL_NCHANNELS=4;${NL_SMALL}"
    --quick)
  # The ring at 4 host ranks (XCOLL_PAIRWISE=0: the pairwise allreduce is
  # the default where ranks outnumber cores, as on a 2-core machine).
  nl_conf(np4.simple 4 240
    "XCOLL_PROTO=simple;XCOLL_NCHANNELS=2;XCOLL_PAIRWISE=0" --quick)
  # The pairwise allreduce (backends/nccl_like/pairwise.c) wherever the
  # tests run: 2 ranks with 2 channels, 4 ranks with 8 KiB FIFOs (pieces of
  # a few KiB, so every owner holds units from many loops).
  nl_conf(np2.pairwise 2 240
    "XCOLL_PAIRWISE=1;XCOLL_PROTO=simple;XCOLL_NCHANNELS=2" --quick
    --coll allreduce)
  nl_conf(np4.pairwise.small 4 240
    "XCOLL_PAIRWISE=1;XCOLL_RABENSEIFNER=0;XCOLL_PROTO=simple;${NL_SMALL}"
    --quick --coll allreduce)
  # Rabenseifner's allreduce over the mesh (backends/nccl_like/
  # rabenseifner.c), which a power-of-two world runs in place of the
  # pairwise allreduce: 4 ranks (2 levels) and 8 (3 levels).
  nl_conf(np4.rabenseifner 4 240 "XCOLL_PAIRWISE=1;XCOLL_PROTO=simple"
    --quick --coll allreduce)
  nl_conf(np8.rabenseifner 8 300 "XCOLL_PAIRWISE=1;XCOLL_PROTO=simple"
    --quick --coll allreduce --max-count 70001)
  nl_conf(np4.ll.small 4 240 "XCOLL_PROTO=ll;${NL_SMALL}" --quick
    --max-count 1021)
  nl_conf(np4.ll.net 4 240
    "XCOLL_PROTO=ll;XCOLL_SHM_DISABLE=1;XCOLL_BRUCK=0;${NL_SMALL}" --quick
    --max-count 1021)
  nl_conf(np4.auto.nch4 4 240 "XCOLL_PROTO=auto;XCOLL_NCHANNELS=4" --quick
    --coll allreduce --coll errors)
  # The Bruck allreduce off (XCOLL_BRUCK=0): the gather algorithm on host
  # ranks, as GPU ranks and mixed rings run it.
  nl_conf(np4.ll.gather 4 240 "XCOLL_PROTO=ll;XCOLL_BRUCK=0" --quick
    --coll allreduce --max-count 1021)
  nl_conf(np5 5 240 "" --quick)
  nl_conf(np8 8 300 "" --quick --max-count 1021)
  # The ucx net plugin (net/ucx/) comes with UCX.
  if(XCOLL_HAVE_UCX AND EXISTS ${PROJECT_SOURCE_DIR}/net/ucx)
    nl_conf(np2.ucx.simple 2 240
      "XCOLL_NET=ucx;XCOLL_SHM_DISABLE=1;XCOLL_PROTO=simple" --quick)
    nl_conf(np3.ucx.pairwise 3 240
      "XCOLL_NET=ucx;XCOLL_PROTO=simple;XCOLL_PAIRWISE=1" --quick
      --coll allreduce)
    # 4 KiB slots, not NL_SMALL's 1 KiB: the ucx plugin's sends are
    # synchronous (a match round trip each), and 1 KiB slots made this
    # entry 50-80 s; it still wraps the FIFO several times per ring step.
    nl_conf(np3.ucx.ll 3 240
      "XCOLL_NET=ucx;XCOLL_SHM_DISABLE=1;XCOLL_PROTO=ll;XCOLL_BUFFSIZE=32K"
      --quick)
    nl_conf(np4.ucx 4 240 "XCOLL_NET=ucx;XCOLL_SHM_DISABLE=1" --quick
      --max-count 1021)
  endif()
endif()

# Bit-identical floats across ranks and repetitions, both protocols; the
# ring (300007 floats) and the gather allreduce (1000 floats, < 4 KiB;
# over LL that size runs the Bruck allreduce, and gather with
# XCOLL_BRUCK=0); the pairwise allreduce (300007 floats, SIMPLE).
foreach(proto simple ll)
  foreach(algo ring gather bruck pairwise)
    set(test nccl_like.determinism.${proto}.np3)
    set(count 300007)
    set(extra "XCOLL_PAIRWISE=0")
    if(algo STREQUAL "pairwise")
      if(proto STREQUAL "ll")
        continue()
      endif()
      set(test nccl_like.determinism.pairwise.np3)
      set(extra "XCOLL_PAIRWISE=1")
    elseif(algo STREQUAL "gather")
      set(test nccl_like.determinism.gather.${proto}.np3)
      set(count 1000)
      set(extra "XCOLL_BRUCK=0")
    elseif(algo STREQUAL "bruck")
      if(proto STREQUAL "simple")
        continue()
      endif()
      set(test nccl_like.determinism.bruck.np3)
      set(count 1000)
    endif()
    add_test(NAME ${test}
      COMMAND $<TARGET_FILE:xcollrun> --nproc-per-node 3 --master-port 0
              $<TARGET_FILE:nl_determinism> ${count} 3)
    set_tests_properties(${test} PROPERTIES TIMEOUT 120
      LABELS "conformance;nccl_like" PROCESSORS 2
      ENVIRONMENT "${XCOLL_MP_ENV};XCOLL_BACKEND=nccl_like;XCOLL_PROTO=${proto};${NL_SMALL};${extra}")
  endforeach()
endforeach()

# A rank that comes late to each collective in turn: the others sleep in
# poll on their sockets meanwhile and must finish with the right sums
# (gather and ring sizes; 3 ranks, and 4 ranks with 2 sockets per
# connection).
foreach(np 3 4)
  set(test nccl_like.late_peer.np${np})
  add_test(NAME ${test}
    COMMAND $<TARGET_FILE:xcollrun> --nproc-per-node ${np} --master-port 0
            $<TARGET_FILE:nl_late_peer> 200)
  set_tests_properties(${test} PROPERTIES TIMEOUT 120
    LABELS "conformance;nccl_like" PROCESSORS 2
    ENVIRONMENT "${XCOLL_MP_ENV};XCOLL_BACKEND=nccl_like")
endforeach()
set_property(TEST nccl_like.late_peer.np4 APPEND PROPERTY ENVIRONMENT
  XCOLL_NSOCKS_PERPEER=2)

# XCOLL_PROTO differing between ranks (each chooses every op's protocol
# and algorithm from its own): creation fails on both with XCOLL_ERR_ENV
# (10) naming the variable and both values, not a hang or a garbled ring.
if(TARGET fault_init)
  add_test(NAME faults.env.nccl_like.proto_differs
    COMMAND $<TARGET_FILE:xcollrun> --nproc-per-node 2 --master-port 0
            sh -c "[ \"$RANK\" = 1 ] && export XCOLL_PROTO=ll; exec \"$0\" --expect 10 --contains XCOLL_PROTO --contains \"'ll' on rank 1\" --max-s 10"
            $<TARGET_FILE:fault_init>)
  set_tests_properties(faults.env.nccl_like.proto_differs PROPERTIES
    TIMEOUT 60 LABELS "faults;nccl_like" PROCESSORS 2
    ENVIRONMENT "XCOLL_BACKEND=nccl_like;XCOLL_TIMEOUT_S=10")
endif()

# A rank killed mid-collective: every other rank (not only its ring
# neighbours) fails within 5 s naming it; a stopped rank: TIMEOUT at
# XCOLL_TIMEOUT_S. The harness is shared with tcp and ucx (tests/faults/).
# Four forms: the ring (XCOLL_PAIRWISE=0; the default runs the pairwise
# allreduce where ranks outnumber cores); 16-element allreduces, which 4
# host ranks run as the Bruck allreduce (backends/nccl_like/bruck.c: rank 1
# has no link from rank 2 and must learn of it from the others); the
# pairwise allreduce (backends/nccl_like/pairwise.c: every rank has a link
# to every other); and Rabenseifner's (rabenseifner.c: each rank waits on
# one partner at a time, the others must learn of a death from it).
# nl_fault_peer(SUFFIX ENV...): faults.peer_{kill,stop}.nccl_like.SUFFIX.
function(nl_fault_peer suffix)
  foreach(mode kill stop)
    set(test faults.peer_${mode}.nccl_like${suffix})
    add_test(NAME ${test}
      COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/faults/fault_peer.sh
              $<TARGET_FILE:xcollrun> $<TARGET_FILE:fault_peer> ${mode})
    set_tests_properties(${test} PROPERTIES TIMEOUT 90
      LABELS "faults;nccl_like" PROCESSORS 2
      ENVIRONMENT "XCOLL_BACKEND=nccl_like;${ARGN}")
  endforeach()
endfunction()
# The ring's entries run over shm (the default between ranks of one host:
# a dead peer closes no FIFO, its socket and pidfd tell), at 4 ranks and
# at 3 (.np3), and over the net transport (.net: XCOLL_SHM_DISABLE=1).
foreach(cfg ";XCOLL_PAIRWISE=0" ".np3;XCOLL_PAIRWISE=0;FAULT_PEER_NPROC=3"
            ".net;XCOLL_PAIRWISE=0;XCOLL_SHM_DISABLE=1"
            ".small;FAULT_PEER_COUNT=16"
            ".pairwise;XCOLL_PAIRWISE=1;XCOLL_RABENSEIFNER=0"
            ".rabenseifner;XCOLL_PAIRWISE=1")
  list(GET cfg 0 suffix)
  list(SUBLIST cfg 1 -1 extra)
  nl_fault_peer("${suffix}" ${extra})
endforeach()
# The ring over the ucx net plugin, where ranks of one host reach each
# other through UCX shared memory and watch each other's process through a
# pidfd (net/ucx/net_ucx.c).
if(XCOLL_HAVE_UCX AND EXISTS ${PROJECT_SOURCE_DIR}/net/ucx)
  nl_fault_peer(.ucx XCOLL_NET=ucx XCOLL_SHM_DISABLE=1 XCOLL_PAIRWISE=0)
endif()

# No thread left after xcoll_comm_abort + xcoll_comm_destroy.
add_test(NAME faults.abort_threads.nccl_like
  COMMAND $<TARGET_FILE:xcollrun> --nproc-per-node 3 --master-port 0
          $<TARGET_FILE:nl_abort_threads>)
set_tests_properties(faults.abort_threads.nccl_like PROPERTIES TIMEOUT 60
  LABELS "faults;nccl_like" PROCESSORS 2
  ENVIRONMENT "${XCOLL_MP_ENV};XCOLL_BACKEND=nccl_like")

# 300 nonblocking collectives issued before any is waited on: more than a
# channel's queue holds (NL_QUEUE_DEPTH), so start() waits for room; each
# result checked (tests/nccl_like/nl_stream.c). Also on tcp, whose calls
# go through core's queue.
foreach(spec "nccl_like;2" "nccl_like;3" "tcp;2")
  list(GET spec 0 backend)
  list(GET spec 1 np)
  add_test(NAME conformance.stream.${backend}.np${np}
    COMMAND $<TARGET_FILE:xcollrun> --nproc-per-node ${np} --master-port 0
            $<TARGET_FILE:nl_stream>)
  set_tests_properties(conformance.stream.${backend}.np${np} PROPERTIES
    TIMEOUT 120 LABELS "conformance;${backend}" PROCESSORS 2
    PASS_REGULAR_EXPRESSION "STREAM-OK rank 0"
    FAIL_REGULAR_EXPRESSION "STREAM-BAD|FATAL"
    ENVIRONMENT "${XCOLL_MP_ENV};XCOLL_BACKEND=${backend}")
endforeach()

# The mesh (Bruck, pairwise, Rabenseifner, point-to-point) between ranks of
# one host goes through shared memory, every link (tests/nccl_like/
# nl_mesh.sh: one INFO line per link), while the allreduces and the
# exchanges (alltoall, gather, scatter, send/recv over the mesh) pass; with
# XCOLL_SHM_DISABLE=1 every link goes through the net plugin; with it on
# one rank only (.mixed: NL_MESH_NET_RANK), that rank's links go through
# net and the others' through shm, links of both kinds in one op. .cma:
# XCOLL_SHM_CMA=1, messages from 8 B copied once, from the sender's memory (CMA; the
# exchange's quick sizes are small), and every rank must have received
# some that way (skipped where the kernel refuses process_vm_readv between
# the ranks); .nocma: XCOLL_SHM_CMA=0, none (NL_MESH_CMA). Variables of
# a case are separated by "|".
set(_conf_allreduce "--backend;nccl_like;--coll;allreduce")
foreach(case "shm.np4;SHM;conformance;;${_conf_allreduce}"
             "shm.np3.exchange;SHM;exchange;"
             "shm.np4.exchange.cma;SHM;exchange;XCOLL_SHM_CMA=1|XCOLL_SHM_CMA_MIN=8|NL_MESH_CMA=on"
             "shm.np4.exchange.nocma;SHM;exchange;XCOLL_SHM_CMA=0|XCOLL_SHM_CMA_MIN=8|NL_MESH_CMA=off"
             "shm.np2.exchange.cma;SHM;exchange;XCOLL_SHM_CMA=1|XCOLL_SHM_CMA_MIN=8|NL_MESH_CMA=on"
             "net.np4;NET;conformance;XCOLL_SHM_DISABLE=1;${_conf_allreduce}"
             "mixed.np4;SHM;conformance;NL_MESH_NET_RANK=1;${_conf_allreduce}"
             "mixed.np3.exchange;SHM;exchange;NL_MESH_NET_RANK=2")
  list(GET case 0 name)
  list(GET case 1 want)
  list(GET case 2 program)
  list(GET case 3 env)
  string(REPLACE "|" ";" env "${env}")
  set(args)
  list(LENGTH case n)
  if(n GREATER 4)
    list(SUBLIST case 4 -1 args)
  endif()
  string(REGEX MATCH "np([0-9]+)" _np "${name}")
  set(test nccl_like.mesh.${name})
  add_test(NAME ${test}
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/nccl_like/nl_mesh.sh ${want}
            $<TARGET_FILE:xcollrun> ${CMAKE_MATCH_1}
            $<TARGET_FILE:${program}> --quick ${args})
  set_tests_properties(${test} PROPERTIES TIMEOUT 240
    LABELS "conformance;nccl_like" PROCESSORS 2 SKIP_RETURN_CODE 77
    ENVIRONMENT "${XCOLL_MP_ENV};XCOLL_BACKEND=nccl_like;${env}")
endforeach()

# Malformed variables of this backend fail creation naming the variable.
foreach(case nchannels_0 nchannels_33 buffsize_12q buffsize_100 proto_fast)
  add_test(NAME faults.env.nccl_like.${case}
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/nccl_like/nl_env.sh
            $<TARGET_FILE:fault_init> ${case})
  set_tests_properties(faults.env.nccl_like.${case} PROPERTIES TIMEOUT 30
    LABELS "faults;nccl_like")
endforeach()

# nl_unit_test(NAME TIMEOUT LABELS): unit.NAME, a cmocka program
# tests/nccl_like/test_NAME.c that reaches into the backend's internals.
function(nl_unit_test name timeout labels)
  add_executable(test_${name} ${CMAKE_CURRENT_SOURCE_DIR}/nccl_like/test_${name}.c)
  target_include_directories(test_${name} PRIVATE ${CMOCKA_INCLUDE_DIR}
    ${PROJECT_SOURCE_DIR}/backends/nccl_like
    ${PROJECT_SOURCE_DIR}/backends/nccl_like/transport
    ${PROJECT_SOURCE_DIR}/kernels ${PROJECT_SOURCE_DIR}/net)
  target_link_libraries(test_${name} PRIVATE xcoll_static xcoll_internal
    ${CMOCKA_LIBRARY} Threads::Threads m)
  target_compile_definitions(test_${name} PRIVATE XCOLL_HAVE_NCCL_LIKE)
  add_test(NAME unit.${name} COMMAND test_${name})
  set_tests_properties(unit.${name} PROPERTIES TIMEOUT ${timeout}
    LABELS "${labels}")
endfunction()

# The engine with ranks as threads and an in-memory net plugin (no sockets,
# no core dispatch): every collective, both protocols, 1 and 3 channels, a
# FIFO wrapped many times, ops in flight, a death, an abort.
nl_unit_test(nl_engine 120 "unit;nccl_like")
set_tests_properties(unit.nl_engine PROPERTIES PROCESSORS 2)

# The shm transport's choice of pairs, and a stranger of another job that
# connects to the FIFO listener first: closed with no fd, while the real
# previous rank gets the segment (label security too).
nl_unit_test(nl_shm 60 "unit;nccl_like;security")

# The files of backends/nccl_like call each other in no loop (failure.c is
# the ground floor, nccl_like.c the front door): scripts/check-layers.sh
# derives "file A calls file B" from the object files' symbols (nm).
add_test(NAME unit.nccl_like_layers
  COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/check-layers.sh
    "$<FILTER:$<TARGET_OBJECTS:xcoll_objects>,INCLUDE,/backends/nccl_like/>"
  COMMAND_EXPAND_LISTS)
set_tests_properties(unit.nccl_like_layers PROPERTIES TIMEOUT 30
  LABELS "unit;nccl_like")

# The Bruck collectives (backends/nccl_like/bruck.c) give the gather
# algorithm's bits (allreduce) and the ring's (reduce, reduce_scatter):
# nl_mixed's calls on a host-only ring with them and with XCOLL_BRUCK=0
# (nl_mixed.sh compares every rank's result hashes); np2 (broadcast and
# reduce only: the others keep the ring there), np4 with 2 sockets per
# connection, np5 a world that is no power of two.
add_executable(nl_mixed ${CMAKE_CURRENT_SOURCE_DIR}/nccl_like/nl_mixed.c)
target_link_libraries(nl_mixed PRIVATE xcoll_static m ${CMAKE_DL_LIBS})
# nl_mixed_test(TEST CFG ENV): nl_mixed.sh at CFG = "NAME;GPU_RANKS;EXTRA
# ENV..." (the rank count is NAME's number), ENV before EXTRA ENV.
function(nl_mixed_test prefix cfg env)
  list(GET cfg 0 name)
  list(GET cfg 1 ranks)
  list(SUBLIST cfg 2 -1 extra)
  string(REGEX MATCH "[0-9]+" np "${name}")
  set(test ${prefix}.${name})
  add_test(NAME ${test}
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/nccl_like/nl_mixed.sh
            $<TARGET_FILE:xcollrun> $<TARGET_FILE:nl_mixed> ${np} ${ranks}
            --quick)
  set_tests_properties(${test} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
    LABELS "conformance;nccl_like" PROCESSORS 2
    ENVIRONMENT "${XCOLL_MP_ENV};XCOLL_BACKEND=nccl_like;${env};${extra}")
endfunction()
foreach(cfg "np2;none;" "np3;none;XCOLL_PROTO=ll"
            "np4;none;XCOLL_NSOCKS_PERPEER=2" "np5;none;")
  nl_mixed_test(nccl_like.bruck_vs_gather "${cfg}"
    "NL_MIXED_SECOND_ENV=XCOLL_BRUCK=0")
endforeach()

# The pairwise allreduce (backends/nccl_like/pairwise.c) gives the ring's
# bits: nl_mixed's calls with XCOLL_PAIRWISE=1 and then 0 on a host-only
# ring; np3 with 8 KiB FIFOs (many pieces of 1 KiB steps, every owner's
# units cut from several loops), np4 with 2 channels (the ring's channel
# shares), np5 a world that is no power of two.
foreach(cfg "np2;none;" "np3;none;${NL_SMALL}"
            "np4;none;XCOLL_NCHANNELS=2;XCOLL_NSOCKS_PERPEER=2" "np5;none;")
  nl_mixed_test(nccl_like.pairwise_vs_ring "${cfg}"
    "XCOLL_PAIRWISE=1;XCOLL_RABENSEIFNER=0;NL_MIXED_SECOND_ENV=XCOLL_PAIRWISE=0")
endforeach()

# Rabenseifner's allreduce on nccl_like (backends/nccl_like/
# rabenseifner.c) reduces in core's order: its results are bitwise those of
# tcp's Rabenseifner (core/algorithms/allreduce_rabenseifner.c), an
# independent implementation over another transport. Allreduces only (the
# two backends' other collectives reduce in other orders); SIMPLE at every
# size, so that every count runs it; 2, 4 and 8 ranks (1 to 3 levels).
foreach(cfg "np2;none;" "np4;none;XCOLL_NSOCKS_PERPEER=2" "np8;none;")
  nl_mixed_test(nccl_like.rabenseifner_vs_tcp "${cfg}"
    "XCOLL_PAIRWISE=1;XCOLL_PROTO=simple;NL_MIXED_KINDS=allreduce;NL_MIXED_SECOND_ENV=XCOLL_BACKEND=tcp XCOLL_ALGO=allreduce:rabenseifner")
endforeach()

# GPU ranks (backends/nccl_like/gpu_engine.c) over the stand-in driver
# (tests/unit/fake_libcuda.c), which runs the ring kernels' host build on
# threads, one per block, from a worker thread per stream: device memory the
# host cannot touch, FIFOs in "mapped" memory, events, streams ordered.
# This proves the engine's host half (launch parameters, mapped FIFOs, the
# order across streams, completion, the proxy driving a kernel it does not
# run) and the mixed ring's wire compatibility; not the CUDA build of the
# kernels, which only a GPU runs (label gpu, scripts/gpu-check.sh). Needs
# the fatbin (nvcc at build time): a GPU rank is refused without one.
if(XCOLL_HAVE_CUDA AND TARGET staging)
  set(_fake_env "FAKE_CUDA_DEVICES=8;LD_LIBRARY_PATH=$<TARGET_FILE_DIR:fake_libcuda>")
  set(_quick "")
  if(XCOLL_SANITIZE)
    set(_quick --quick)
  endif()
  # Every collective on device buffers, every rank a GPU rank: the staging
  # program (tests/conformance/staging.c) on nccl_like.
  # GPU ranks on devices of their own connect over shm; .p2p: on one
  # device (XCOLL_DEVICE=cuda:0), over p2p; .32ch: the most channels
  # (blocks) a launch may have.
  foreach(cfg "np2;2;" "np3.ll.small;3;XCOLL_PROTO=ll;${NL_SMALL}"
              "np3.simple.4ch;3;XCOLL_PROTO=simple;XCOLL_NCHANNELS=4;${NL_SMALL}"
              "np2.p2p;2;XCOLL_DEVICE=cuda:0"
              "np3.p2p.simple.4ch;3;XCOLL_DEVICE=cuda:0;XCOLL_PROTO=simple;XCOLL_NCHANNELS=4;${NL_SMALL}"
              "np2.p2p.32ch;2;XCOLL_DEVICE=cuda:0;XCOLL_NCHANNELS=32;${NL_SMALL}")
    list(GET cfg 0 name)
    list(GET cfg 1 np)
    list(SUBLIST cfg 2 -1 extra)
    set(test conformance.gpu_ranks.nccl_like.${name})
    add_test(NAME ${test}
      COMMAND $<TARGET_FILE:xcollrun> --nproc-per-node ${np} --master-port 0
              $<TARGET_FILE:staging> ${_quick})
    set_tests_properties(${test} PROPERTIES TIMEOUT 240
      LABELS "conformance;nccl_like;staging" PROCESSORS 2
      ENVIRONMENT "${XCOLL_MP_ENV};XCOLL_BACKEND=nccl_like;XCOLL_DEVICE=cuda;${_fake_env};${extra}")
  endforeach()
  # XCOLL_NCHANNELS unset, a GPU rank proposes its device's SMs / 8: the
  # stand-in reports 132 SMs (an H100's), so both ranks run 16 channels.
  set(test conformance.gpu_ranks.nccl_like.np2.channels_by_device)
  add_test(NAME ${test}
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/nccl_like/nl_channels.sh 16
            $<TARGET_FILE:xcollrun> 2 $<TARGET_FILE:staging> --quick)
  set_tests_properties(${test} PROPERTIES TIMEOUT 240
    LABELS "conformance;nccl_like;staging" PROCESSORS 2
    ENVIRONMENT "${XCOLL_MP_ENV};XCOLL_BACKEND=nccl_like;XCOLL_DEVICE=cuda;${_fake_env};FAKE_CUDA_SMS=132")
  # Mixed rings: GPU ranks and host ranks in one ring, results bit-identical
  # to a host-only ring's (tests/nccl_like/nl_mixed.sh). XCOLL_RABENSEIFNER=0:
  # a host-only world of 4 ranks on a 2-core machine would otherwise run
  # Rabenseifner's allreduce (tcp's bits, not the ring's); the pairwise one
  # it runs instead gives the ring's bits.
  # Each GPU rank on a device of its own (FAKE_CUDA_DEVICES=8): a GPU rank
  # and a host rank, or two GPU ranks on different GPUs, connect over shm
  # (the GPU rank maps the segments into its device); .net: with
  # XCOLL_SHM_DISABLE=1 they stay on net. The .p2p entries share one GPU
  # (NL_MIXED_DEVICES=1): neighbouring GPU ranks connect over p2p (the
  # receiver's slots in device memory, cuMem over a POSIX fd; .ipc: CUDA
  # IPC, the stand-in without cuMem), the others over shm;
  # XCOLL_P2P_DISABLE=1 puts the GPU pairs on shm, and with
  # XCOLL_SHM_DISABLE=1 too on net. .no_mps: GPU ranks sharing a GPU
  # whose driver says MPS is off get one warning (none under MPS);
  # .no_host_register: a device that cannot register host memory keeps
  # its GPU rank's connections on net; .export_refused: a device whose
  # cuMem export fails at run time shares its slots by CUDA IPC, and with
  # IPC refused too (.both_refused) its GPU pairs go over shm. NL_MIXED_TRANSPORTS: the transports
  # the INFO lines must name (tests/nccl_like/nl_mixed.sh). An all-GPU
  # ring fixes XCOLL_NCHANNELS=2, a GPU rank's default, so that the
  # host-only ring it is compared with cuts the same chunks.
  foreach(cfg "np2;0;NL_MIXED_TRANSPORTS=SHM" "np3;1;NL_MIXED_TRANSPORTS=SHM"
              "np4;0,2;XCOLL_NCHANNELS=4;NL_MIXED_TRANSPORTS=SHM"
              "np4.ll.small;3;XCOLL_PROTO=ll;${NL_SMALL};NL_MIXED_TRANSPORTS=SHM"
              "np2.net;0;XCOLL_SHM_DISABLE=1;NL_MIXED_TRANSPORTS=NET"
              "np4.gpu_pair;1,2;NL_MIXED_TRANSPORTS=SHM"
              "np2.p2p;all;NL_MIXED_DEVICES=1;NL_MIXED_TRANSPORTS=P2P"
              "np4.p2p;0,1;NL_MIXED_DEVICES=1;XCOLL_NCHANNELS=2;NL_MIXED_TRANSPORTS=P2P SHM"
              "np3.p2p.ll.small;all;NL_MIXED_DEVICES=1;XCOLL_NCHANNELS=2;XCOLL_PROTO=ll;${NL_SMALL};NL_MIXED_TRANSPORTS=P2P"
              "np3.p2p.ipc;all;NL_MIXED_DEVICES=1;XCOLL_NCHANNELS=2;FAKE_CUDA_NO_VMM=1;NL_MIXED_TRANSPORTS=P2P"
              "np3.p2p.no_mps;all;NL_MIXED_DEVICES=1;XCOLL_NCHANNELS=2;FAKE_CUDA_MPS=0;NL_MIXED_TRANSPORTS=P2P;NL_MIXED_GREP=share one GPU .* without MPS;NL_MIXED_GREP_COUNT=1"
              "np2.p2p.mps;all;NL_MIXED_DEVICES=1;FAKE_CUDA_MPS=1;NL_MIXED_TRANSPORTS=P2P;NL_MIXED_GREP=without MPS;NL_MIXED_GREP_COUNT=0"
              "np2.no_host_register;0;FAKE_CUDA_HOST_REGISTER=0;NL_MIXED_TRANSPORTS=NET"
              "np2.p2p.export_refused;all;NL_MIXED_DEVICES=1;FAKE_CUDA_EXPORT_REFUSED=1;NL_MIXED_TRANSPORTS=P2P;NL_MIXED_GREP=p2p: .*CUDA IPC;NL_MIXED_GREP_COUNT=2"
              "np2.p2p.both_refused;all;NL_MIXED_DEVICES=1;FAKE_CUDA_EXPORT_REFUSED=1;FAKE_CUDA_IPC_REFUSED=1;NL_MIXED_TRANSPORTS=SHM"
              "np2.p2p_disabled;all;NL_MIXED_DEVICES=1;XCOLL_P2P_DISABLE=1;NL_MIXED_TRANSPORTS=SHM"
              "np2.p2p_shm_disabled;all;NL_MIXED_DEVICES=1;XCOLL_P2P_DISABLE=1;XCOLL_SHM_DISABLE=1;NL_MIXED_TRANSPORTS=NET")
    nl_mixed_test(nccl_like.mixed_ring "${cfg}"
      "${_fake_env};XCOLL_RABENSEIFNER=0")
  endforeach()
  # The calls core runs over p2p.c's mesh on a mixed ring: alltoall,
  # alltoallv, gather, scatter and send/recv groups (tests/conformance/
  # exchange.c --gpu-ranks), one GPU rank (its buffers in device memory,
  # staged through pinned memory) and two host ranks; every result against
  # exchange.c's reference. gpu1: the GPU rank between the host ranks;
  # gpu0: the GPU rank is rank 0 (root 0's cases, the final allreduce).
  if(TARGET exchange)
    foreach(ranks 1 0)
      set(test nccl_like.mixed_ring.exchange.np3.gpu${ranks})
      add_test(NAME ${test}
        COMMAND $<TARGET_FILE:xcollrun> --nproc-per-node 3 --master-port 0
                $<TARGET_FILE:exchange> --gpu-ranks ${ranks} ${_quick})
      set_tests_properties(${test} PROPERTIES TIMEOUT 240
        LABELS "conformance;nccl_like" PROCESSORS 2 SKIP_RETURN_CODE 77
        ENVIRONMENT "${XCOLL_MP_ENV};XCOLL_BACKEND=nccl_like;${_fake_env}")
    endforeach()
  endif()
  # A peer killed (SIGKILL) or stopped (SIGSTOP) in an allreduce loop with
  # GPU ranks in the ring: survivors fail within the bound naming it, a
  # GPU rank's kernel included (the abort flag in mapped memory). gpu0_3:
  # ranks 0 and 3 GPU, the victim (2) a host rank; gpu2: the victim is the
  # GPU rank.
  foreach(cfg "kill;0,3" "stop;0,3" "kill;2")
    list(GET cfg 0 mode)
    list(GET cfg 1 ranks)
    string(REPLACE "," "_" tag "${ranks}")
    set(test faults.peer_${mode}.nccl_like.gpu${tag})
    add_test(NAME ${test}
      COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/faults/fault_peer.sh
              $<TARGET_FILE:xcollrun> $<TARGET_FILE:fault_peer> ${mode})
    set_tests_properties(${test} PROPERTIES TIMEOUT 90
      LABELS "faults;nccl_like" PROCESSORS 2
      ENVIRONMENT "XCOLL_BACKEND=nccl_like;FAULT_PEER_GPU_RANKS=${ranks};${_fake_env}")
  endforeach()
  # A desync in a mixed ring (tests/faults/fault_desync.c): every rank fails
  # with PROTOCOL naming both calls, over LL (the fingerprint's digest in
  # the LL flags, checked by GPU and host ranks alike) and SIMPLE. GPU rank
  # 1 sits between host ranks; GPU rank 2 makes the odd call.
  foreach(spec "ll;op;1" "ll;count;2" "simple;op;1")
    list(GET spec 0 proto)
    list(GET spec 1 case)
    list(GET spec 2 ranks)
    set(test faults.desync.nccl_like.mixed.${proto}.${case}.np3)
    add_test(NAME ${test}
      COMMAND $<TARGET_FILE:xcollrun> --nproc-per-node 3 --master-port 0
              $<TARGET_FILE:fault_desync> ${case})
    set_tests_properties(${test} PROPERTIES TIMEOUT 90
      LABELS "faults;nccl_like" PROCESSORS 2
      ENVIRONMENT "XCOLL_TIMEOUT_S=60;XCOLL_BACKEND=nccl_like;XCOLL_PROTO=${proto};FAULT_DESYNC_GPU_RANKS=${ranks};${_fake_env}")
  endforeach()
  # The same on a real GPU (label gpu): skipped, exit 77, without one.
  set(_exchange "")
  if(TARGET exchange)
    set(_exchange $<TARGET_FILE:exchange>)
  endif()
  add_test(NAME gpu.nccl_like
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_nccl_like.sh
            $<TARGET_FILE:xcollrun> $<TARGET_FILE:staging>
            ${CMAKE_CURRENT_SOURCE_DIR}/nccl_like/nl_mixed.sh
            $<TARGET_FILE:nl_mixed> $<TARGET_FILE:fault_desync> ${_exchange})
  set_tests_properties(gpu.nccl_like PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77
    LABELS "gpu;nccl_like" PROCESSORS 2 ENVIRONMENT "${XCOLL_MP_ENV}")
endif()
