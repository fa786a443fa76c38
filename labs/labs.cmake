# The labs' scripts in ctest (label labs): small sizes, bounded time, the
# PyTorch ones under torchrun, the xtrain drivers under xcollrun. Without
# PyTorch (xcoll_torch not built), or without the trainer for the labs that
# run it, each is skipped (exit 77) with the reason.
set(xcoll_labs_dir ${CMAKE_CURRENT_LIST_DIR})
set(xcoll_lab_runs
  "01-setup.gloo|tcp|2|torchrun|01-setup/setup.py --backend gloo"
  "01-setup.xcoll|nccl_like|3|torchrun|01-setup/setup.py --backend xcoll"
  "02-ddp-basics|tcp|2|torchrun|02-ddp-basics/train.py --backend xcoll --limit 1200 --epochs 2 --out ${CMAKE_CURRENT_BINARY_DIR}/lab02-out"
  "03-dp-vs-ddp|tcp|1|xcollrun|03-dp-vs-ddp/compare.py --build ${PROJECT_BINARY_DIR} --devices 2 --steps 20"
  "04-fsdp|tcp|1|xcollrun|04-fsdp/fsdp.py --build ${PROJECT_BINARY_DIR} --ranks 4 --node-size 2 --steps 8"
  "04-fsdp.fsdp2|tcp|2|torchrun|04-fsdp/fsdp2_torch.py --steps 5"
  "05-nccl-vs-gloo.tcp|tcp|2|torchrun|05-nccl-vs-gloo/allreduce.py --max-bytes 262144 --iters 5"
  "05-nccl-vs-gloo.nccl_like|nccl_like|2|torchrun|05-nccl-vs-gloo/allreduce.py --max-bytes 262144 --iters 5")
foreach(entry ${xcoll_lab_runs})
  string(REPLACE "|" ";" fields "${entry}")
  list(GET fields 0 name)
  list(GET fields 1 backend)
  list(GET fields 2 ranks)
  list(GET fields 3 launcher)
  list(GET fields 4 command)
  separate_arguments(command UNIX_COMMAND "${command}")
  # The PyTorch scripts start as a PyTorch user starts them, under torchrun
  # (--standalone); the labs that drive xtrain are one process of xcollrun.
  if(launcher STREQUAL "torchrun")
    set(launch ${XCOLL_TORCH_PYTHON_FOUND} -m torch.distributed.run --standalone
               --nproc-per-node ${ranks})
  else()
    set(launch $<TARGET_FILE:xcollrun> --nproc-per-node ${ranks} --master-port 0)
  endif()
  if(command MATCHES "--build" AND NOT TARGET xtrain)
    # Labs 03 and 04 run the trainer: a build without it skips them.
    add_test(NAME labs.${name} COMMAND sh -c
      "echo 'skipped: this lab runs xtrain, which this build left out (XCOLL_BUILD_TRAINER=OFF)'; exit 77")
  elseif(XCOLL_HAVE_TORCH)
    add_test(NAME labs.${name}
      COMMAND ${launch} ${command}
      WORKING_DIRECTORY ${xcoll_labs_dir})
    set_tests_properties(labs.${name} PROPERTIES
      ENVIRONMENT "XCOLL_BACKEND=${backend};XCOLL_DEBUG=INFO;XCOLLRUN_PYTHON=${XCOLL_TORCH_PYTHON_FOUND};OMP_NUM_THREADS=1;PYTHONPATH=${XCOLL_TORCH_PYTHONPATH};XCOLL_TIMEOUT_S=60")
  else()
    add_test(NAME labs.${name} COMMAND sh -c
      "echo 'skipped: PyTorch is not importable or its headers are missing, so xcoll_torch was not built (bash scripts/setup.sh makes .venv with torch 2.13; XCOLL_WITH_TORCH, XCOLL_TORCH_PYTHON)'; exit 77")
  endif()
  set_tests_properties(labs.${name} PROPERTIES TIMEOUT 120 LABELS labs
    SKIP_RETURN_CODE 77)
endforeach()
