# The torch.distributed backend (integrations/torch) against gloo, in the
# same processes, launched by xcollrun as torchrun would (the .py script runs
# with XCOLLRUN_PYTHON). Label torch. Without PyTorch each test is skipped
# (exit 77) with the reason; the cuda tests skip so without a GPU. Each takes
# 3-20 s alone; the whole label 46 s at -j2 on 2 quiet cores, 2.7 min under a
# load of 9; the TIMEOUTs leave room for worse.
set(xcoll_torch_tests
  "collectives.tcp.2:tcp:2:test_collectives.py"
  "collectives.tcp.3:tcp:3:test_collectives.py"
  "collectives.nccl_like.2:nccl_like:2:test_collectives.py"
  "collectives.nccl_like.3:nccl_like:3:test_collectives.py"
  "functional.tcp.2:tcp:2:test_functional.py"
  "functional.nccl_like.2:nccl_like:2:test_functional.py"
  "fsdp2.tcp.2:tcp:2:test_fsdp2.py"
  "fsdp2.nccl_like.2:nccl_like:2:test_fsdp2.py"
  "ddp.tcp.2:tcp:2:test_ddp.py"
  "ddp.nccl_like.3:nccl_like:3:test_ddp.py"
  "cuda.tcp.2:tcp:2:test_cuda.py"
  "cuda.nccl_like.2:nccl_like:2:test_cuda.py"
  "cuda.nccl_like.4:nccl_like:4:test_cuda.py")
foreach(entry ${xcoll_torch_tests})
  string(REPLACE ":" ";" fields "${entry}")
  list(GET fields 0 name)
  list(GET fields 1 backend)
  list(GET fields 2 ranks)
  list(GET fields 3 script)
  if(XCOLL_HAVE_TORCH)
    add_test(NAME torch.${name}
      COMMAND $<TARGET_FILE:xcollrun> --nproc-per-node ${ranks} --master-port 0
              ${CMAKE_CURRENT_SOURCE_DIR}/torch/${script}
      WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/torch)
    set_tests_properties(torch.${name} PROPERTIES
      ENVIRONMENT "XCOLL_BACKEND=${backend};XCOLLRUN_PYTHON=${XCOLL_TORCH_PYTHON_FOUND};PYTHONPATH=${XCOLL_TORCH_PYTHONPATH};XCOLL_TIMEOUT_S=60")
  else()
    add_test(NAME torch.${name} COMMAND sh -c
      "echo 'skipped: PyTorch is not importable or its headers are missing, so xcoll_torch was not built (bash scripts/setup.sh makes .venv with torch 2.13; XCOLL_WITH_TORCH, XCOLL_TORCH_PYTHON)'; exit 77")
  endif()
  set_tests_properties(torch.${name} PROPERTIES TIMEOUT 180 LABELS torch
    SKIP_RETURN_CODE 77)
endforeach()

# Launched by torchrun 2.x itself (python -m torch.distributed.run
# --standalone): the default group on xcoll from torchrun's variables and
# store, named "xcoll" and "cpu:xcoll,cuda:xcoll". About 5 s each.
foreach(entry "torchrun.xcoll.2|xcoll" "torchrun.cpu_cuda.2|cpu:xcoll,cuda:xcoll")
  string(REPLACE "|" ";" fields "${entry}")
  list(GET fields 0 name)
  list(GET fields 1 backend)
  if(XCOLL_HAVE_TORCH)
    add_test(NAME torch.${name}
      COMMAND ${XCOLL_TORCH_PYTHON_FOUND} -m torch.distributed.run --standalone
              --nproc-per-node 2 ${CMAKE_CURRENT_SOURCE_DIR}/torch/test_torchrun.py
              ${backend}
      WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/torch)
    set_tests_properties(torch.${name} PROPERTIES
      ENVIRONMENT "PYTHONPATH=${XCOLL_TORCH_PYTHONPATH};XCOLL_TIMEOUT_S=60;OMP_NUM_THREADS=1")
  else()
    add_test(NAME torch.${name} COMMAND sh -c
      "echo 'skipped: xcoll_torch was not built (bash scripts/setup.sh makes .venv with torch 2.13; XCOLL_WITH_TORCH, XCOLL_TORCH_PYTHON)'; exit 77")
  endif()
  set_tests_properties(torch.${name} PROPERTIES TIMEOUT 180 LABELS torch
    SKIP_RETURN_CODE 77)
endforeach()

# pip install of the checkout (pyproject.toml, scikit-build-core) into a
# fresh venv, then a 2-rank allreduce from the installed package alone
# (torch/pip_install.sh). Label packaging. About 1.5 min the first time on
# 2 cores (libxcoll and the extension, one job), seconds when WORK/build
# is warm.
if(XCOLL_HAVE_TORCH)
  add_test(NAME packaging.pip_install_torch
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/torch/pip_install.sh
            ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/pip-install-test
            ${XCOLL_TORCH_PYTHON_FOUND})
  set_tests_properties(packaging.pip_install_torch PROPERTIES
    ENVIRONMENT "XCOLL_TIMEOUT_S=60" RUN_SERIAL ON)
else()
  add_test(NAME packaging.pip_install_torch COMMAND sh -c
    "echo 'skipped: no Python with torch and scikit-build-core (bash scripts/setup.sh makes .venv)'; exit 77")
endif()
set_tests_properties(packaging.pip_install_torch PROPERTIES TIMEOUT 900
  LABELS packaging SKIP_RETURN_CODE 77)

# xcoll's own programs under torchrun 2.x: torchrun's agent serves a
# TCPStore at MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True), where
# xcoll_comm_init_env then meets the other ranks (core/torch_store.c).
# xcoll-perf with --check on tcp (2 ranks) and nccl_like (3), and 20 DDP
# updates of xtrain. 5-15 s each.
set(xcoll_torchrun_programs
  "xcoll_perf.tcp.2|tcp|2|$<TARGET_FILE:xcoll-perf> -b 8 -e 256K -f 8 -n 3 -w 1 --check 1"
  "xcoll_perf.nccl_like.3|nccl_like|3|$<TARGET_FILE:xcoll-perf> -b 8 -e 256K -f 8 -n 3 -w 1 --check 1")
if(TARGET xtrain)
  list(APPEND xcoll_torchrun_programs
    "xtrain.tcp.2|tcp|2|$<TARGET_FILE:xtrain> --strategy ddp --max-steps 20 --epochs 1 --threads 1")
endif()
foreach(entry ${xcoll_torchrun_programs})
  string(REPLACE "|" ";" fields "${entry}")
  list(GET fields 0 name)
  list(GET fields 1 backend)
  list(GET fields 2 ranks)
  list(GET fields 3 program)
  separate_arguments(program UNIX_COMMAND "${program}")
  if(XCOLL_HAVE_TORCH)
    add_test(NAME torch.torchrun.${name}
      COMMAND ${XCOLL_TORCH_PYTHON_FOUND} -m torch.distributed.run --standalone
              --nproc-per-node ${ranks} --no-python ${program})
    set_tests_properties(torch.torchrun.${name} PROPERTIES
      ENVIRONMENT "XCOLL_BACKEND=${backend};XCOLL_TIMEOUT_S=60;OMP_NUM_THREADS=1")
  else()
    add_test(NAME torch.torchrun.${name} COMMAND sh -c
      "echo 'skipped: no Python with torch for torchrun (bash scripts/setup.sh makes .venv)'; exit 77")
  endif()
  set_tests_properties(torch.torchrun.${name} PROPERTIES TIMEOUT 120
    LABELS torch SKIP_RETURN_CODE 77)
endforeach()

# The trainer's benchmark scripts at tiny sizes, each checked by a script of
# tests/trainer that every row of every table has its figures (the speed is
# not judged). NAME|BENCH_SCRIPT|CHECK|TIMEOUT:
# - fsdp_gpt_bench: bench/fsdp_gpt.sh (xtrain's FSDP beside PyTorch's FSDP2
#   on the gpt, gloo and xcoll); 9 short runs of 2 ranks, six of them
#   starting Python with torch: about 80 s on 2 busy cores.
# - tables_bench: bench/trainer_tables.sh (every comparison table of
#   docs/trainer.md from one command) with QUICK=1 at 2 ranks; about 27
#   short runs (train.sh's on the MLP and the CNN), eleven of them starting
#   Python with torch: 70 s under a load of 4 on 2 cores, 100 s under 6 to 8.
foreach(entry "fsdp_gpt_bench|fsdp_gpt.sh|fsdp_gpt_bench.sh|420"
              "tables_bench|trainer_tables.sh|trainer_tables.sh|360")
  string(REPLACE "|" ";" fields "${entry}")
  list(GET fields 0 name)
  list(GET fields 1 script)
  list(GET fields 2 check)
  list(GET fields 3 timeout)
  if(TARGET xtrain AND XCOLL_HAVE_TORCH)
    add_test(NAME trainer.${name}
      COMMAND sh ${PROJECT_SOURCE_DIR}/tests/trainer/${check}
        ${PROJECT_SOURCE_DIR}/bench/${script} ${PROJECT_BINARY_DIR}
        ${XCOLL_TORCH_PYTHON_FOUND})
    set_tests_properties(trainer.${name} PROPERTIES
      ENVIRONMENT "XCOLL_TIMEOUT_S=60")
  elseif(TARGET xtrain)
    add_test(NAME trainer.${name} COMMAND sh -c
      "echo 'skipped: PyTorch is not importable or its headers are missing, so xcoll_torch was not built (bash scripts/setup.sh makes .venv with torch 2.13; XCOLL_WITH_TORCH, XCOLL_TORCH_PYTHON)'; exit 77")
  endif()
  if(TARGET xtrain)
    set_tests_properties(trainer.${name} PROPERTIES TIMEOUT ${timeout}
      LABELS "trainer;torch" SKIP_RETURN_CODE 77)
  endif()
endforeach()
