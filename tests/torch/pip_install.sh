#!/bin/sh
# pip_install.sh - `pip install` of the checkout as a user would, then a
# 2-rank allreduce from the installed package alone: builds the wheel
# (pip wheel --no-build-isolation, scikit-build-core; incremental in
# WORK/build), installs it into a fresh venv (WORK/venv, which sees the
# project's torch through a .pth file, as --system-site-packages would see a
# system torch), and runs torchrun from outside the checkout with no
# PYTHONPATH or LD_LIBRARY_PATH: xcoll_torch must load libxcoll.so.0 from
# beside itself (RUNPATH $ORIGIN).
#   sh pip_install.sh SOURCE_DIR WORK_DIR PYTHON
# PYTHON: the project's Python with torch, scikit-build-core (scripts/setup.sh).
set -eu
src=$1 work=$2 python=$3
mkdir -p "$work"
step() { echo "== [$(date +%T)] $*"; }

step "pip wheel (CUDA off, one build job)"
rm -rf "$work/dist"
CMAKE_BUILD_PARALLEL_LEVEL=1 "$python" -m pip wheel --quiet \
  --no-build-isolation --no-deps -w "$work/dist" \
  --config-settings=build-dir="$work/build" \
  --config-settings=cmake.define.XCOLL_WITH_CUDA=OFF "$src"
wheel=$(ls "$work"/dist/xcoll_torch-*.whl)
echo "wheel: $wheel"

step "fresh venv, pip install the wheel"
rm -rf "$work/venv"
"$python" -m venv --system-site-packages "$work/venv"
site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
vsite=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$site" >"$vsite/project_torch.pth"
"$work/venv/bin/python" -m pip install --quiet --no-deps --no-index "$wheel"

step "import and a 2-rank allreduce under torchrun, from $work"
cd "$work"
unset PYTHONPATH LD_LIBRARY_PATH
where=$("$work/venv/bin/python" -c 'import xcoll_torch; print(xcoll_torch.__file__)')
case $where in
"$vsite"/*) echo "xcoll_torch: $where" ;;
*) echo "FAIL: xcoll_torch was imported from $where, not from $vsite" >&2; exit 1 ;;
esac
cat >"$work/allreduce.py" <<'PY'
import torch, torch.distributed as dist, xcoll_torch
dist.init_process_group("xcoll")
t = torch.full((1024,), float(dist.get_rank() + 1))
dist.all_reduce(t)
want = dist.get_world_size() * (dist.get_world_size() + 1) / 2
assert torch.equal(t, torch.full((1024,), want)), t[:4]
print(f"rank {dist.get_rank()}: allreduce from the installed package: ok")
dist.destroy_process_group()
PY
OMP_NUM_THREADS=1 "$work/venv/bin/python" -m torch.distributed.run \
  --standalone --nproc-per-node 2 "$work/allreduce.py"
step "done"
