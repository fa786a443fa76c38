# ibverbs.cmake - tests of the ibverbs net plugin (net/ibverbs/), label
# "ibverbs": without RDMA hardware, over the emulated verbs provider
# tests/ibverbs_emu/ (libxcoll-ibverbs-emu.so, loaded by the plugin through
# XCOLL_IBVERBS_LIB); with a real device, the same suite (ibverbs.hw, else
# reported skipped). Included by tests/CMakeLists.txt after nccl_like.cmake.
#
# Kept out of the unit/conformance/faults labels (the sanitizer pass) and
# out of sanitized builds: the emulator writes into other processes with
# process_vm_writev. Time budget: the label well under 2 minutes on a busy
# 2-core machine (docs/ibverbs.md has the measured times).
if(NOT XCOLL_HAVE_IBVERBS OR NOT XCOLL_HAVE_NCCL_LIKE OR NOT TARGET xcollrun
   OR XCOLL_SANITIZE)
  return()
endif()

add_library(xcoll-ibverbs-emu SHARED
  ${CMAKE_CURRENT_SOURCE_DIR}/ibverbs_emu/emu_verbs.c)
target_include_directories(xcoll-ibverbs-emu PRIVATE ${IBVERBS_INCLUDE_DIR})
target_link_libraries(xcoll-ibverbs-emu PRIVATE Threads::Threads)
add_executable(ib_probe ${CMAKE_CURRENT_SOURCE_DIR}/ibverbs_emu/ib_probe.c)
target_link_libraries(ib_probe PRIVATE ${CMAKE_DL_LIBS})

set(IB_EMU_ENV "${XCOLL_MP_ENV};XCOLL_BACKEND=nccl_like;XCOLL_NET=ibverbs;XCOLL_SHM_DISABLE=1"
    "XCOLL_IBVERBS_LIB=$<TARGET_FILE:xcoll-ibverbs-emu>")
set(IB_SCRIPTS ${CMAKE_CURRENT_SOURCE_DIR}/ibverbs_emu)

# ib_test(NAME TIMEOUT_S ENV COMMAND...): ibverbs.NAME, on 2 processors.
function(ib_test name timeout env)
  add_test(NAME ibverbs.${name} COMMAND ${ARGN})
  set_tests_properties(ibverbs.${name} PROPERTIES TIMEOUT ${timeout}
    LABELS "ibverbs;nccl_like" PROCESSORS 2 ENVIRONMENT "${env}")
endfunction()

# The plugin called directly, in one process: devices, reg_mr's cache, 32
# messages in flight, truncation, tag mismatch, a close (no engine).
add_executable(test_ib_plugin ${IB_SCRIPTS}/test_ib_plugin.c)
target_link_libraries(test_ib_plugin PRIVATE xcoll_static xcoll_internal)
target_compile_definitions(test_ib_plugin PRIVATE XCOLL_HAVE_IBVERBS)
set(IB_PLUGIN_ENV "MASTER_ADDR=127.0.0.1"
    "XCOLL_IBVERBS_LIB=$<TARGET_FILE:xcoll-ibverbs-emu>")
add_test(NAME ibverbs.plugin COMMAND test_ib_plugin plugin)
add_test(NAME ibverbs.plugin_nodevice COMMAND test_ib_plugin nodevice)
set_tests_properties(ibverbs.plugin ibverbs.plugin_nodevice PROPERTIES
  TIMEOUT 30 LABELS "ibverbs;nccl_like")
set_tests_properties(ibverbs.plugin PROPERTIES ENVIRONMENT "${IB_PLUGIN_ENV}")
set_tests_properties(ibverbs.plugin_nodevice PROPERTIES
  ENVIRONMENT "${IB_PLUGIN_ENV};XCOLL_IBEMU_DEVICES=0")

# The conformance suite over the emulator, 2 to 4 ranks, both protocols.
# 2 ranks: the whole --quick suite. 3 and 4 ranks: a FIFO of 8 slots of
# 1 KiB (XCOLL_BUFFSIZE=8K) that messages up to 64 Ki elements wrap many
# times, so that all 8 slots carry clear-to-send entries at once; the
# larger --quick counts take minutes with so small a FIFO (as in
# nccl_like.cmake's np4.ll.small).
foreach(proto simple ll)
  ib_test(emu.np2.${proto} 120 "${IB_EMU_ENV};XCOLL_PROTO=${proto}"
    $<TARGET_FILE:xcollrun> --nproc-per-node 2 --master-port 0
    $<TARGET_FILE:conformance> --backend nccl_like --quick)
  foreach(np 3 4)
    ib_test(emu.np${np}.${proto}.small 120
      "${IB_EMU_ENV};XCOLL_PROTO=${proto};XCOLL_BUFFSIZE=8K"
      $<TARGET_FILE:xcollrun> --nproc-per-node ${np} --master-port 0
      $<TARGET_FILE:conformance> --backend nccl_like --quick
      --max-count 65536)
  endforeach()
endforeach()

# A killed rank: the survivors fail within 5 s naming it (the shared
# harness of tests/faults/).
ib_test(emu.peer_kill 90 "${IB_EMU_ENV}"
  bash ${CMAKE_CURRENT_SOURCE_DIR}/faults/fault_peer.sh
  $<TARGET_FILE:xcollrun> $<TARGET_FILE:fault_peer> kill)

# A wrong rkey in every clear-to-send: the emulator's remote access error
# completion must surface as an error naming the peer.
ib_test(emu.bad_rkey 60 "${IB_EMU_ENV};XCOLL_IB_DEBUG_FAULT=bad_rkey;XCOLL_DEBUG=WARN"
  bash ${IB_SCRIPTS}/ib_expect_fail.sh 40
  "net ibverbs: rank [0-9]+: sending to rank [0-9]+ failed on the QP: remote access error"
  $<TARGET_FILE:xcollrun> --nproc-per-node 2 --master-port 0
  $<TARGET_FILE:conformance> --backend nccl_like --quick --coll allreduce)

# Protocol bugs made on purpose in the plugin: a write that does not wait
# for its clear-to-send, and a clear-to-send taken twice. The emulator must
# make each fail (proof that the tests over it catch such bugs).
foreach(fault skip_cts reuse_cts)
  ib_test(emu.${fault} 60
    "${IB_EMU_ENV};XCOLL_IB_DEBUG_FAULT=${fault};XCOLL_DEBUG=WARN"
    bash ${IB_SCRIPTS}/ib_expect_fail.sh 40
    "net ibverbs: rank [0-9]+: sending to rank [0-9]+ failed on the QP"
    $<TARGET_FILE:xcollrun> --nproc-per-node 2 --master-port 0
    $<TARGET_FILE:conformance> --backend nccl_like --quick --coll allreduce)
endforeach()

# No device (the emulator's list made empty) and no library: selecting the
# plugin fails saying so.
ib_test(no_device 30 "${IB_EMU_ENV};XCOLL_IBEMU_DEVICES=0"
  bash ${IB_SCRIPTS}/ib_expect_fail.sh 20 "no RDMA device was found"
  $<TARGET_FILE:xcollrun> --nproc-per-node 2 --master-port 0
  $<TARGET_FILE:conformance> --backend nccl_like --quick --coll barrier)
ib_test(no_library 30
  "${XCOLL_MP_ENV};XCOLL_BACKEND=nccl_like;XCOLL_NET=ibverbs;XCOLL_IBVERBS_LIB=/nonexistent/libibverbs.so.1"
  bash ${IB_SCRIPTS}/ib_expect_fail.sh 20 "no RDMA device was found: cannot load"
  $<TARGET_FILE:xcollrun> --nproc-per-node 2 --master-port 0
  $<TARGET_FILE:conformance> --backend nccl_like --quick --coll barrier)

# A real device: the same suite, else SKIPPED with the probe's reason.
ib_test(hw 600 "${XCOLL_MP_ENV};XCOLL_BACKEND=nccl_like;XCOLL_NET=ibverbs;XCOLL_SHM_DISABLE=1"
  bash ${IB_SCRIPTS}/ib_hw.sh $<TARGET_FILE:ib_probe>
  $<TARGET_FILE:xcollrun> $<TARGET_FILE:conformance>)
set_tests_properties(ibverbs.hw PROPERTIES SKIP_RETURN_CODE 77)
