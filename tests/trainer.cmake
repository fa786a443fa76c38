# Trainer tests (included from tests/CMakeLists.txt): gradient checks and
# optimizer/sampler unit tests (cmocka), DDP and FSDP equivalence with 2, 3
# and 4 ranks, DataParallel with 2, 3 and 4 threads, FSDP's per-rank memory,
# gradient accumulation, checkpoint resume, bad data and flags, the --trace
# output, mixed precision and DDP communication hooks, and (when UCX is
# built) tcp vs ucx giving equal parameters.
# Multi-process tests run through xcollrun with --master-port 0.
if(TARGET xtrain)
  add_executable(test_trainer_layers ${CMAKE_CURRENT_LIST_DIR}/trainer/test_layers.c)
  target_include_directories(test_trainer_layers PRIVATE ${CMOCKA_INCLUDE_DIR})
  target_link_libraries(test_trainer_layers PRIVATE xtrain_core ${CMOCKA_LIBRARY} m)
  add_test(NAME trainer.layers COMMAND test_trainer_layers)
  set_tests_properties(trainer.layers PROPERTIES TIMEOUT 60 LABELS trainer)

  # --model gpt: its layers and the whole model against finite differences,
  # causality, hook order, text windows, deterministic generation.
  add_executable(test_trainer_gpt ${CMAKE_CURRENT_LIST_DIR}/trainer/test_gpt.c)
  target_include_directories(test_trainer_gpt PRIVATE ${CMOCKA_INCLUDE_DIR})
  target_link_libraries(test_trainer_gpt PRIVATE xtrain_core ${CMOCKA_LIBRARY} m)
  add_test(NAME trainer.gpt.layers COMMAND test_trainer_gpt)
  set_tests_properties(trainer.gpt.layers PROPERTIES TIMEOUT 60 LABELS trainer)
  # Mixed precision: the float16/bfloat16 casts against an independent
  # reference, and the loss scaler's rules.
  add_executable(test_trainer_mixed ${CMAKE_CURRENT_LIST_DIR}/trainer/test_mixed.c)
  target_link_libraries(test_trainer_mixed PRIVATE xtrain_core m)
  add_test(NAME trainer.mixed_casts COMMAND test_trainer_mixed)
  set_tests_properties(trainer.mixed_casts PROPERTIES TIMEOUT 60 LABELS trainer)

  # DDP communication hooks on one rank: fp16/bf16 rounding, PowerSGD's
  # approximation, orthonormal P and error feedback.
  add_executable(test_trainer_comm_hooks ${CMAKE_CURRENT_LIST_DIR}/trainer/test_comm_hooks.c)
  target_link_libraries(test_trainer_comm_hooks PRIVATE xtrain_core m)
  add_test(NAME trainer.comm_hooks COMMAND test_trainer_comm_hooks)
  set_tests_properties(trainer.comm_hooks PROPERTIES TIMEOUT 60 LABELS trainer)

  # The files of trainer/ (xtrain_core and the xtrain program) call each
  # other in no loop: scripts/check-layers.sh derives "file A calls file B"
  # from the object files' symbols (nm), as unit.nccl_like_layers does for
  # backends/nccl_like.
  add_test(NAME unit.trainer_layers
    COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/check-layers.sh
      "$<TARGET_OBJECTS:xtrain_core>" "$<TARGET_OBJECTS:xtrain>"
    COMMAND_EXPAND_LISTS)
  set_tests_properties(unit.trainer_layers PROPERTIES TIMEOUT 30
    LABELS "unit;trainer")

  add_executable(xtrain_compare_params ${CMAKE_CURRENT_LIST_DIR}/trainer/compare_params.c)
  target_link_libraries(xtrain_compare_params PRIVATE m)

  set(XTRAIN_TEST_DIR ${CMAKE_CURRENT_LIST_DIR}/trainer)
  set(XTRAIN_DATA_DIR /usr/share/datasets/fashion-mnist)

  foreach(n 2 3 4)
    add_test(NAME trainer.ddp_equivalence.sgd.${n}
      COMMAND sh ${XTRAIN_TEST_DIR}/ddp_equivalence.sh $<TARGET_FILE:xtrain>
        $<TARGET_FILE:xcollrun> $<TARGET_FILE:xtrain_compare_params> ${n} sgd 1e-5)
    set_tests_properties(trainer.ddp_equivalence.sgd.${n} PROPERTIES TIMEOUT 60
      LABELS "trainer;mp")
  endforeach()
  # AdamW divides by sqrt(v): rounding differences in near-zero gradients are
  # amplified, so its bound is 1e-4 (measured 1.3e-7 with 2 ranks, 6.3e-8 with 4).
  foreach(n 2 4)
    add_test(NAME trainer.ddp_equivalence.adamw.${n}
      COMMAND sh ${XTRAIN_TEST_DIR}/ddp_equivalence.sh $<TARGET_FILE:xtrain>
        $<TARGET_FILE:xcollrun> $<TARGET_FILE:xtrain_compare_params> ${n} adamw 1e-4)
    set_tests_properties(trainer.ddp_equivalence.adamw.${n} PROPERTIES TIMEOUT 60
      LABELS "trainer;mp")
  endforeach()
  # 2 ranks x 2 micro-batches under no_sync == one process with batch 4B.
  add_test(NAME trainer.ddp_grad_accum
    COMMAND sh ${XTRAIN_TEST_DIR}/ddp_equivalence.sh $<TARGET_FILE:xtrain>
      $<TARGET_FILE:xcollrun> $<TARGET_FILE:xtrain_compare_params> 2 sgd 1e-5 2)
  set_tests_properties(trainer.ddp_grad_accum PROPERTIES TIMEOUT 60 LABELS "trainer;mp")

  # FSDP vs DDP vs one process, per rank count: each variant also changes
  # one FSDP option so that every path is compared: backward prefetch post
  # and none, forward prefetch on, units grouped by --fsdp-min-params
  # (fc2+fc3 in one unit), gradient accumulation, hybrid_shard over 2
  # simulated nodes of 2 ranks (and 2 nodes of 1).
  set(XTRAIN_FSDP_VARIANTS_2 "full_shard --forward-prefetch on"
    "shard_grad_op --grad-accum 2" "hybrid_shard:1")
  set(XTRAIN_FSDP_VARIANTS_3 "full_shard --backward-prefetch post"
    "shard_grad_op --forward-prefetch on")
  set(XTRAIN_FSDP_VARIANTS_4
    "full_shard --backward-prefetch none --fsdp-min-params 100000"
    "shard_grad_op --fsdp-min-params 100000" "hybrid_shard:2")
  foreach(n 2 3 4)
    add_test(NAME trainer.fsdp_equivalence.sgd.${n}
      COMMAND sh ${XTRAIN_TEST_DIR}/fsdp_equivalence.sh $<TARGET_FILE:xtrain>
        $<TARGET_FILE:xcollrun> $<TARGET_FILE:xtrain_compare_params> ${n} sgd
        1e-5 ${XTRAIN_FSDP_VARIANTS_${n}})
    set_tests_properties(trainer.fsdp_equivalence.sgd.${n} PROPERTIES
      TIMEOUT 200 LABELS "trainer;mp")
  endforeach()
  # The same on --model gpt (a tiny transformer, one unit per block):
  # full_shard, shard_grad_op and hybrid_shard vs DDP vs one process.
  set(XTRAIN_GPT_FSDP_VARIANTS_2 "full_shard --forward-prefetch on"
    "shard_grad_op --grad-accum 2" "hybrid_shard:1")
  set(XTRAIN_GPT_FSDP_VARIANTS_3 "full_shard --backward-prefetch post"
    "shard_grad_op" "hybrid_shard:3")
  set(XTRAIN_GPT_FSDP_VARIANTS_4 "full_shard --backward-prefetch none"
    "shard_grad_op --fsdp-min-params 5000" "hybrid_shard:2")
  foreach(n 2 3 4)
    add_test(NAME trainer.gpt.fsdp_equivalence.sgd.${n}
      COMMAND sh ${XTRAIN_TEST_DIR}/fsdp_equivalence.sh --model gpt
        $<TARGET_FILE:xtrain> $<TARGET_FILE:xcollrun>
        $<TARGET_FILE:xtrain_compare_params> ${n} sgd 1e-5
        ${XTRAIN_GPT_FSDP_VARIANTS_${n}})
    set_tests_properties(trainer.gpt.fsdp_equivalence.sgd.${n} PROPERTIES
      TIMEOUT 200 LABELS "trainer;mp")
  endforeach()
  # AdamW: 1e-4, for the reason given for ddp_equivalence.adamw.
  add_test(NAME trainer.fsdp_equivalence.adamw.2
    COMMAND sh ${XTRAIN_TEST_DIR}/fsdp_equivalence.sh $<TARGET_FILE:xtrain>
      $<TARGET_FILE:xcollrun> $<TARGET_FILE:xtrain_compare_params> 2 adamw
      1e-4 full_shard)
  set_tests_properties(trainer.fsdp_equivalence.adamw.2 PROPERTIES
    TIMEOUT 120 LABELS "trainer;mp")
  add_test(NAME trainer.fsdp_memory.4
    COMMAND sh ${XTRAIN_TEST_DIR}/fsdp_memory.sh $<TARGET_FILE:xtrain>
      $<TARGET_FILE:xcollrun> 4)
  set_tests_properties(trainer.fsdp_memory.4 PROPERTIES TIMEOUT 160 LABELS "trainer;mp")

  # DataParallel: 2, 3, 4 replica threads (and 3 with accumulation) vs one
  # process with the same batch.
  add_test(NAME trainer.dp_equivalence
    COMMAND sh ${XTRAIN_TEST_DIR}/dp_equivalence.sh $<TARGET_FILE:xtrain>
      $<TARGET_FILE:xtrain_compare_params>)
  set_tests_properties(trainer.dp_equivalence PROPERTIES TIMEOUT 90 LABELS trainer)

  add_test(NAME trainer.grad_accum
    COMMAND sh ${XTRAIN_TEST_DIR}/grad_accum.sh $<TARGET_FILE:xtrain>
      $<TARGET_FILE:xtrain_compare_params>)
  set_tests_properties(trainer.grad_accum PROPERTIES TIMEOUT 60 LABELS trainer)

  foreach(opt sgd adamw)
    add_test(NAME trainer.resume.${opt}
      COMMAND sh ${XTRAIN_TEST_DIR}/resume.sh $<TARGET_FILE:xtrain>
        $<TARGET_FILE:xcollrun> $<TARGET_FILE:xtrain_compare_params> ${opt})
    set_tests_properties(trainer.resume.${opt} PROPERTIES TIMEOUT 60
      LABELS "trainer;mp")
  endforeach()

  # xtrain --elastic: rank 2 of 4 killed mid-epoch, the survivors shrink
  # and finish bitwise equal, test accuracy >= 0.88 (tests/trainer/elastic.sh;
  # the run is deterministic: 0.8870, a fault-free one 0.8849).
  add_test(NAME trainer.elastic
    COMMAND sh ${XTRAIN_TEST_DIR}/elastic.sh $<TARGET_FILE:xtrain>
      $<TARGET_FILE:xcollrun> ${XTRAIN_DATA_DIR} 0.88)
  set_tests_properties(trainer.elastic PROPERTIES TIMEOUT 180
    LABELS "trainer;faults;mp" PROCESSORS 2)
  # Rank 0 killed instead: with xcollrun --store-host launcher the store
  # outlives it and the job goes on as above; with the store in rank 0 it
  # dies with it and the survivors fail at once, saying so.
  add_test(NAME trainer.elastic.rank0
    COMMAND sh ${XTRAIN_TEST_DIR}/elastic.sh $<TARGET_FILE:xtrain>
      $<TARGET_FILE:xcollrun> ${XTRAIN_DATA_DIR} 0.88 0 launcher)
  add_test(NAME trainer.elastic.rank0_store_in_rank0
    COMMAND sh ${XTRAIN_TEST_DIR}/elastic.sh $<TARGET_FILE:xtrain>
      $<TARGET_FILE:xcollrun> ${XTRAIN_DATA_DIR} 0.88 0 rank0)
  set_tests_properties(trainer.elastic.rank0
    trainer.elastic.rank0_store_in_rank0 PROPERTIES TIMEOUT 180
    LABELS "trainer;faults;mp" PROCESSORS 2)

  # FSDP checkpoints: full and sharded resume bitwise, full across
  # strategies and world sizes, sharded refusals (tests/trainer/fsdp_checkpoint.sh).
  foreach(opt sgd adamw)
    add_test(NAME trainer.fsdp_checkpoint.${opt}
      COMMAND sh ${XTRAIN_TEST_DIR}/fsdp_checkpoint.sh $<TARGET_FILE:xtrain>
        $<TARGET_FILE:xcollrun> $<TARGET_FILE:xtrain_compare_params> ${opt})
    set_tests_properties(trainer.fsdp_checkpoint.${opt} PROPERTIES TIMEOUT 200
      LABELS "trainer;mp")
  endforeach()

  # Sharded saves killed at every point of the two-phase save, on each
  # rank: --resume loads the last complete set, bitwise, on every rank, or
  # every rank refuses (tests/trainer/checkpoint_kill.sh).
  add_test(NAME trainer.fsdp_checkpoint.kill
    COMMAND sh ${XTRAIN_TEST_DIR}/checkpoint_kill.sh $<TARGET_FILE:xtrain>
      $<TARGET_FILE:xcollrun> $<TARGET_FILE:xtrain_compare_params>)
  set_tests_properties(trainer.fsdp_checkpoint.kill PROPERTIES TIMEOUT 200
    LABELS "trainer;mp" PROCESSORS 2)

  # xtrain vs PyTorch from the same --export-init, sample order and
  # optimizer: the loss curves agree step by step (needs python3 with torch).
  find_package(Python3 COMPONENTS Interpreter)
  if(Python3_Interpreter_FOUND)
    add_test(NAME trainer.torch_loss_curve
      COMMAND ${Python3_EXECUTABLE} ${XTRAIN_TEST_DIR}/torch_loss_curve.py
        $<TARGET_FILE:xtrain> $<TARGET_FILE:xcollrun> ${XTRAIN_DATA_DIR})
    set_tests_properties(trainer.torch_loss_curve PROPERTIES TIMEOUT 200
      LABELS "trainer;mp" SKIP_RETURN_CODE 77)
    # The same for --model gpt against bench/gpt_torch.py's GPT, AdamW.
    add_test(NAME trainer.torch_gpt_loss_curve
      COMMAND ${Python3_EXECUTABLE} ${XTRAIN_TEST_DIR}/torch_gpt_loss_curve.py
        $<TARGET_FILE:xtrain> $<TARGET_FILE:xcollrun>)
    set_tests_properties(trainer.torch_gpt_loss_curve PROPERTIES TIMEOUT 200
      LABELS "trainer;mp" SKIP_RETURN_CODE 77)
  endif()

  # Same run over XCOLL_BACKEND=tcp and ucx: bitwise equal parameters.
  if(XCOLL_HAVE_UCX)
    add_test(NAME trainer.backend_equivalence.ucx_tcp
      COMMAND sh ${XTRAIN_TEST_DIR}/backend_equivalence.sh $<TARGET_FILE:xtrain>
        $<TARGET_FILE:xcollrun> $<TARGET_FILE:xtrain_compare_params>)
    set_tests_properties(trainer.backend_equivalence.ucx_tcp PROPERTIES
      TIMEOUT 120 LABELS "trainer;mp")
  endif()

  add_test(NAME trainer.trace
    COMMAND sh ${XTRAIN_TEST_DIR}/trace.sh $<TARGET_FILE:xtrain>
      $<TARGET_FILE:xcollrun> ${PROJECT_SOURCE_DIR}/tools/xcoll-trace-merge)
  set_tests_properties(trainer.trace PROPERTIES TIMEOUT 60 LABELS "trainer;mp")

  add_test(NAME trainer.gpt.data
    COMMAND sh ${XTRAIN_TEST_DIR}/gpt_data.sh $<TARGET_FILE:xtrain>)
  set_tests_properties(trainer.gpt.data PROPERTIES TIMEOUT 60 LABELS trainer)
  add_test(NAME trainer.gpt.train
    COMMAND sh ${XTRAIN_TEST_DIR}/gpt_train.sh $<TARGET_FILE:xtrain>
      $<TARGET_FILE:xtrain_compare_params>)
  set_tests_properties(trainer.gpt.train PROPERTIES TIMEOUT 120 LABELS trainer)
  # Mixed precision and DDP communication hooks (tests/trainer/mixed_precision.sh):
  # bfloat16 and PowerSGD accuracy within 1 point of float32, wire bytes per
  # step against their formulas, float16 dynamic loss scaling.
  foreach(mode accuracy wire loss_scale)
    add_test(NAME trainer.mixed_precision.${mode}
      COMMAND sh ${XTRAIN_TEST_DIR}/mixed_precision.sh $<TARGET_FILE:xtrain>
        $<TARGET_FILE:xcollrun> ${mode})
    set_tests_properties(trainer.mixed_precision.${mode} PROPERTIES TIMEOUT 240
      LABELS "trainer;mp")
  endforeach()

  add_test(NAME trainer.bad_inputs
    COMMAND sh ${XTRAIN_TEST_DIR}/bad_inputs.sh $<TARGET_FILE:xtrain> ${XTRAIN_DATA_DIR})
  set_tests_properties(trainer.bad_inputs PROPERTIES TIMEOUT 60 LABELS trainer)
endif()

# Live progress under xcollrun, where stdout is a pipe (tests/trainer/progress.sh).
if(TARGET xtrain)
  add_test(NAME trainer.progress
    COMMAND sh ${XTRAIN_TEST_DIR}/progress.sh $<TARGET_FILE:xtrain>
      $<TARGET_FILE:xcollrun> ${XTRAIN_DATA_DIR})
  set_tests_properties(trainer.progress PROPERTIES TIMEOUT 150 LABELS "trainer;mp")
endif()

# trainer/plot.sh draws a real log (needs gnuplot, installed by setup.sh).
find_program(XCOLL_GNUPLOT gnuplot)
if(TARGET xtrain AND XCOLL_GNUPLOT)
  add_test(NAME trainer.plot
    COMMAND sh ${PROJECT_SOURCE_DIR}/tests/trainer/plot.sh $<TARGET_FILE:xtrain>
      ${PROJECT_SOURCE_DIR}/trainer/plot.sh ${XTRAIN_DATA_DIR})
  set_tests_properties(trainer.plot PROPERTIES TIMEOUT 120 LABELS trainer)
endif()
