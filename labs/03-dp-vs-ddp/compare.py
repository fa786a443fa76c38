#!/usr/bin/env python3
"""compare.py - lab 3: DataParallel against DistributedDataParallel, one
table of samples/s at the same global batch.

Rows: xtrain --strategy dp (one process, one thread per replica: scatter the
batch, replicate the parameters from replica 0 every step, gather outputs,
reduce gradients onto replica 0, as torch.nn.DataParallel does); xtrain
--strategy ddp (one process per rank, bucketed allreduces over xcoll during
backward); PyTorch DDP on gloo and on xcoll (ddp_torch.py). torch's own
DataParallel cannot run here: it needs CUDA devices.

    python3 labs/03-dp-vs-ddp/compare.py --build build --devices 2

Needs build/trainer/xtrain and build/tools/xcollrun; the PyTorch rows run
under torchrun with the Python that runs this script (it must import torch
2.x: .venv/bin/python) and xcoll_torch on PYTHONPATH
(build/integrations/torch) or installed. A run can itself be
started by xcollrun with one process (ctest does): the runs it starts get
their own launcher and port.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                 "GROUP_RANK", "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def run(command, env):
    result = subprocess.run(command, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, timeout=600, check=False)
    out = result.stdout.decode(errors="replace")
    if result.returncode != 0:
        sys.exit("compare.py: %s failed (%d):\n%s" % (" ".join(command),
                                                     result.returncode, out))
    return out


def last_json(text, key):
    """The last JSON line of text (xcollrun prefixes lines with [rank N])."""
    for line in reversed(text.splitlines()):
        line = line.split("] ", 1)[1] if line.startswith("[rank") else line
        if line.startswith("{") and key in line:
            return json.loads(line)
    sys.exit("compare.py: no JSON line with %s in:\n%s" % (key, text))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--devices", type=int, default=2,
                        help="DP replicas = DDP ranks")
    parser.add_argument("--global-batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--no-torch", action="store_true",
                        help="leave out the PyTorch rows")
    args = parser.parse_args()
    if args.global_batch % args.devices:
        sys.exit("--global-batch must be a multiple of --devices")
    xtrain = os.path.join(args.build, "trainer", "xtrain")
    xcollrun = os.path.join(args.build, "tools", "xcollrun")
    for path in (xtrain, xcollrun):
        if not os.access(path, os.X_OK):
            sys.exit(f"compare.py: {path} not found: build xcoll first")
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env.setdefault("XCOLLRUN_PYTHON", sys.executable)
    n, per_rank = args.devices, args.global_batch // args.devices
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        common = ["--model", "mlp", "--threads", "1", "--epochs", "100",
                  "--max-steps", str(args.steps), "--test-limit", "500"]
        log = os.path.join(tmp, "dp.json")
        run([xtrain, "--strategy", "dp", "--dp-devices", str(n), "--batch-size",
             str(args.global_batch), "--log-json", log] + common, env)
        rows.append(("xtrain dp (%d threads, 1 process)" % n, last_json(open(log).read(), "summary")))
        log = os.path.join(tmp, "ddp.json")
        run([xcollrun, "--nproc-per-node", str(n), "--master-port", "0", xtrain,
             "--strategy", "ddp", "--batch-size", str(per_rank), "--log-json", log] + common, env)
        rows.append(("xtrain ddp (%d processes, %s)" % (n, env.get("XCOLL_BACKEND", "tcp")),
                     last_json(open(log).read(), "summary")))
        if not args.no_torch:
            for backend in ("gloo", "xcoll"):
                out = run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node", str(n),
                           os.path.join(HERE, "ddp_torch.py"), "--backend", backend,
                           "--batch-size", str(per_rank), "--steps", str(args.steps)], env)
                result = last_json(out, "samples_per_s")
                rows.append((result["who"] + " (%d processes)" % n, result))
    print(f"global batch {args.global_batch}, {args.steps} updates, MLP 784-256-256-10, "
          f"{os.cpu_count()} cores")
    print("| run | samples/s | communication per update |")
    print("|---|---|---|")
    for name, r in rows:
        if "comm_time_s" in r:
            comm = "%.2f ms" % (1e3 * r["comm_time_s"] / max(r["step"], 1))
        else:
            comm = "(backward with allreduces: %.2f ms)" % r["backward_ms"]
        print("| %s | %.0f | %s |" % (name, r["samples_per_s"], comm))


if __name__ == "__main__":
    main()
