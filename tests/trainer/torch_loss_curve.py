#!/usr/bin/env python3
"""torch_loss_curve.py XTRAIN XCOLLRUN DATA_DIR [STEPS]

xtrain against PyTorch on the same problem: xtrain writes its initial MLP
(--export-init); PyTorch loads it into the same nn.Module (fc1, fc2, fc3 as
nn.Linear, ReLU), feeds the same float32 inputs in the same order
(--sampler sequential: samples 0..63, 64..127, ...) with SGD(lr=0.02,
momentum=0.9) and batch 64, and both log the mean cross-entropy of every
update before it is applied. The two curves must agree step by step within
float32 summation order (relative difference <= 1e-4). Done for one
process and for 2-rank DDP (2 x 32 = the same 64 samples per update).
Also: a file written from a PyTorch state_dict is read by --init-from
bitwise, and a transposed weight is refused with a message naming it.
Exit 77 (ctest's SKIP_RETURN_CODE) when torch cannot be imported.
"""
import gzip
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError:
    # Debian's python3-torch lives in /usr/bin/python3; PATH may hold another.
    if os.path.exists("/usr/bin/python3") and sys.executable != "/usr/bin/python3" \
            and not os.environ.get("XTRAIN_TORCH_REEXEC"):
        os.environ["XTRAIN_TORCH_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    print("torch is not installed (apt-get install python3-torch): skipped")
    sys.exit(77)


def blas_of_torch():
    """'openblas', 'mkl' or 'other': the BLAS behind torch's CPU matmul."""
    config = torch.__config__.show().lower()
    if "blas_info=open" in config:
        return "openblas"
    return "mkl" if "blas_info=mkl" in config or "mkl" in config else "other"


# xtrain multiplies with OpenBLAS. A PyTorch on another BLAS (the PyPI
# wheels use MKL) rounds its sums in another order, and SGD with momentum
# through ReLU amplifies that: the curves agree to 1e-7 for about 10 steps,
# then drift to a few 1e-3 by step 50. Debian's python3-torch uses
# OpenBLAS: prefer it when this torch does not.
if blas_of_torch() != "openblas" and os.path.exists("/usr/bin/python3") \
        and sys.executable != "/usr/bin/python3" and not os.environ.get("XTRAIN_TORCH_REEXEC"):
    probe = subprocess.run(["/usr/bin/python3", "-c", "import torch, numpy"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if probe.returncode == 0:
        os.environ["XTRAIN_TORCH_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)

TOLERANCE = 1e-4
BATCH = 64
# Steps compared when torch's BLAS is not xtrain's (see above).
OTHER_BLAS_STEPS = 10


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, t in header.items():
        assert t["dtype"] == "F32", (name, t["dtype"])
        b, e = t["data_offsets"]
        arr = np.frombuffer(data[b:e], dtype="<f4").reshape(t["shape"])
        tensors[name] = torch.from_numpy(arr.copy())
    return tensors, meta


def write_safetensors(path, tensors):
    header, chunks, at = {}, [], 0
    for name, t in tensors.items():
        raw = t.detach().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [at, at + len(raw)]}
        chunks.append(raw)
        at += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def load_idx(data_dir, count):
    with gzip.open(os.path.join(data_dir, "train-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), dtype=np.uint8, offset=16)
    with gzip.open(os.path.join(data_dir, "train-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), dtype=np.uint8, offset=8)
    return images.reshape(-1, 784)[:count], labels[:count]


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(784, 256)
        self.fc2 = torch.nn.Linear(256, 256)
        self.fc3 = torch.nn.Linear(256, 10)

    def forward(self, x):
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


def torch_curve(init, meta, images, labels, steps):
    torch.set_num_threads(1)
    model = MLP()
    model.load_state_dict(init)
    # xtrain's data_fill_batch, in float32: x = pixel * scale - shift.
    mean = np.float32(meta["data_mean"])
    std = np.float32(meta["data_std"])
    scale = np.float32(1.0) / (np.float32(255.0) * std)
    shift = mean / std
    x_all = images.astype(np.float32) * scale - shift
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    losses = []
    for s in range(steps):
        x = torch.from_numpy(x_all[s * BATCH:(s + 1) * BATCH])
        y = torch.from_numpy(labels[s * BATCH:(s + 1) * BATCH].astype(np.int64))
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def xtrain_curve(cmd, log_json, env=None):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    losses = []
    with open(log_json) as f:
        for line in f:
            o = json.loads(line)
            if o.get("event") == "step":
                losses.append(o["loss"])
    return losses


def compare(name, ours, theirs):
    assert len(ours) == len(theirs), (name, len(ours), len(theirs))
    rel = [abs(a - b) / abs(b) for a, b in zip(ours, theirs)]
    worst = max(range(len(rel)), key=lambda i: rel[i])
    print("%s: %d steps, loss %.6f -> %.6f (torch %.6f -> %.6f), max relative "
          "difference %.3g at step %d (limit %g)"
          % (name, len(ours), ours[0], ours[-1], theirs[0], theirs[-1],
             rel[worst], worst + 1, TOLERANCE))
    return rel[worst] <= TOLERANCE


def main():
    xtrain, xcollrun, data_dir = sys.argv[1:4]
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 50
    if blas_of_torch() != "openblas" and steps > OTHER_BLAS_STEPS:
        print(f"torch {torch.__version__} multiplies with {blas_of_torch()}, "
              f"xtrain with OpenBLAS: comparing the first {OTHER_BLAS_STEPS} "
              f"steps (Debian's python3-torch, on OpenBLAS, compares {steps})")
        steps = OTHER_BLAS_STEPS
    tmp = tempfile.mkdtemp()
    init_path = os.path.join(tmp, "init.safetensors")
    common = ["--model", "mlp", "--sampler", "sequential", "--epochs", "1",
              "--train-limit", str(steps * BATCH), "--test-limit", "100",
              "--lr", "0.02", "--momentum", "0.9", "--log-every", "1",
              "--data-dir", data_dir, "--seed", "3"]
    one = xtrain_curve([xtrain] + common + ["--batch-size", str(BATCH),
                        "--export-init", init_path, "--log-json",
                        os.path.join(tmp, "one.json")],
                       os.path.join(tmp, "one.json"))
    init, meta = read_safetensors(init_path)
    images, labels = load_idx(data_dir, steps * BATCH)
    reference = torch_curve(init, meta, images, labels, steps)
    ok = compare("xtrain none vs torch", one, reference)
    ddp = xtrain_curve([xcollrun, "--nproc-per-node", "2", "--master-port", "0",
                        xtrain] + common + ["--strategy", "ddp", "--batch-size",
                        str(BATCH // 2), "--init-from", init_path, "--log-json",
                        os.path.join(tmp, "ddp.json")],
                       os.path.join(tmp, "ddp.json"))
    ok &= compare("xtrain ddp 2x32 vs torch", ddp, reference)

    # --init-from a PyTorch-written state_dict, read back bitwise.
    torch.manual_seed(1)
    theirs = MLP().state_dict()
    write_safetensors(os.path.join(tmp, "torch.safetensors"), theirs)
    subprocess.run([xtrain] + common + ["--max-steps", "1", "--batch-size", "64",
                    "--init-from", os.path.join(tmp, "torch.safetensors"),
                    "--export-init", os.path.join(tmp, "back.safetensors")],
                   check=True, stdout=subprocess.DEVNULL)
    back, _ = read_safetensors(os.path.join(tmp, "back.safetensors"))
    for name, t in theirs.items():
        if not torch.equal(back[name], t):
            print("--init-from: %s differs after the round trip" % name)
            ok = False
    bad = dict(theirs)
    bad["fc1.weight"] = theirs["fc1.weight"].t().contiguous()
    write_safetensors(os.path.join(tmp, "bad.safetensors"), bad)
    p = subprocess.run([xtrain] + common + ["--init-from",
                        os.path.join(tmp, "bad.safetensors")],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode == 0 or "fc1.weight has shape (784, 256)" not in p.stderr:
        print("a transposed fc1.weight was not refused clearly: rc %d, %s"
              % (p.returncode, p.stderr))
        ok = False
    subprocess.run(["rm", "-rf", tmp])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
