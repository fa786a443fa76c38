#!/usr/bin/env python3
"""Compare an xcoll collective with torch.distributed (gloo) and Open MPI.

One run measures, for each world size and each message size, one float32
collective (--coll: allreduce, the default, broadcast or reduce with root
0, all in place; allgather, reduce_scatter or alltoall, out of place; sum
where it reduces; the size as nccl-tests takes it: the buffer, or for the
last three all P blocks of one rank, rounded down to a multiple of 4 * P
bytes) on:
  xcoll-<backend>  tools/xcoll-perf under XCOLL_BACKEND=<backend> (tcp, and
                   ucx when it is compiled in); the variant
                   nccl_like-net is nccl_like with XCOLL_SHM_DISABLE=1 (every
                   connection through the proxy over the net plugin, the
                   transport between hosts)
  gloo             bench/torch_allreduce.py (torch.distributed, gloo backend)
  ompi-sm          bench/mpi_allreduce.c under mpirun, Open MPI's default
                   shared-memory transport (btl vader/sm)
  ompi-tcp         the same with --mca btl self,tcp (loopback TCP, like xcoll-tcp
                   and gloo)
and prints one Markdown table per world size: time (us) and busbw (GB/s) per
peer, then xcoll/gloo and xcoll/ompi-tcp ratios of busbw (above 1: xcoll
moves more bytes per second) and of latency (below 1: xcoll is faster).
Every peer times the same way: warmup calls, a barrier, timed calls, mean time
per call, max over ranks; busbw = size / time * nccl-tests' factor for all
of them (allreduce 2(P-1)/P; allgather, reduce_scatter, alltoall (P-1)/P;
broadcast, reduce 1; docs/benchmarks.md). A peer that cannot run is printed
as "missing: ..." with what to install, never left out silently.

    bench/allreduce.sh --nproc "2 4"
    bench/allreduce.sh --from 8 --iters 20 --out results.md
    bench/allreduce.sh --coll alltoall --sizes 4K:64M
    bench/allreduce.sh --coll broadcast --sizes 8,4K --peers ompi-sm
    bench/allreduce.sh --coll alltoall --sizes 64 --nonblocking --peers ompi-sm

--nonblocking times every peer's non-blocking form, each call waited for
at once (a torch program's work.wait() after an async_op=True call).
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KIB = 1024
MIB = 1024 * 1024


def parse_bytes(text):
    text = text.strip()
    scale = {"K": KIB, "M": MIB, "G": 1024 * MIB}.get(text[-1:].upper(), 1)
    digits = text[:-1] if scale != 1 else text
    value = int(digits) * scale
    if value <= 0 or value % 4:
        raise argparse.ArgumentTypeError(f"size '{text}' must be a positive multiple of 4 bytes")
    return value


def human_bytes(value):
    for unit, scale in (("G", 1024 * MIB), ("M", MIB), ("K", KIB)):
        if value >= scale and value % scale == 0:
            return f"{value // scale}{unit}"
    return str(value)


def size_list(args):
    """Sizes in bytes: --sizes MIN:MAX (doubling) or a comma-separated list."""
    spec = args.sizes
    if "," in spec:
        return sorted({parse_bytes(x) for x in spec.split(",") if x.strip()})
    low_text, _, high_text = spec.partition(":")
    low = parse_bytes(args.from_bytes) if args.from_bytes else parse_bytes(low_text)
    high = parse_bytes(high_text or low_text)
    sizes = []
    size = low
    while size <= high:
        sizes.append(size)
        size *= 2
    return sizes


def plan_for(size, args):
    """(iters, warmup) for one size: --iters up to 256 KiB, then fewer, so that
    every size moves about the same number of bytes and large sizes stay
    quick on a small machine; never below 3 timed calls."""
    iters = max(3, min(args.iters, args.iters * 256 * KIB // size))
    warmup = max(1, min(args.warmup, iters // 3))
    return iters, warmup


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Peer:
    """One column group of the table, and why it has no figures if it has none."""

    def __init__(self, name):
        self.name = name
        self.missing = None  # "apt-get install ..." style hint
        self.results = {}  # (world_size, size) -> {"time_us": t, "wrong": w}
        self.failures = []  # sentences

    def add(self, world_size, size, time_us, wrong):
        self.results[(world_size, size)] = {"time_us": time_us, "wrong": wrong}


def run_bounded(cmd, env, timeout, log_path):
    """Run cmd, stdout returned, stderr to log_path. (returncode, stdout)."""
    with open(log_path, "w") as log:
        try:
            proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=log,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            return 124, exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
    return proc.returncode, proc.stdout


def last_line(path):
    try:
        with open(path) as f:
            lines = [line.strip() for line in f if line.strip()]
        return lines[-1] if lines else ""
    except OSError:
        return ""


def json_rows(text):
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return rows


# ---- xcoll ----

# Backend variants: a name --backends takes -> (XCOLL_BACKEND, extra environment).
VARIANTS = {"nccl_like-net": ("nccl_like", {"XCOLL_SHM_DISABLE": "1"})}


def backend_env(name):
    return VARIANTS.get(name, (name, {}))

def xcoll_backends_built(build):
    """Backends listed by xcoll-info, or None when it cannot say."""
    info = os.path.join(build, "tools", "xcoll-info")
    if not os.access(info, os.X_OK):
        return None
    try:
        out = subprocess.run([info], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    names, inside = [], False
    for line in out.splitlines():
        if line.startswith("backends compiled in"):
            inside = True
        elif inside and line.startswith("  ") and line.split():
            names.append(line.split()[0])
        elif inside:
            break
    return names


def band_plans(sizes, args):
    """Group sizes into runs of one xcoll-perf each: same (iters, warmup) and
    each size twice the previous, so that -b/-e/-f 2 reproduce them."""
    bands = []
    for size in sizes:
        plan = plan_for(size, args)
        if bands and bands[-1]["plan"] == plan and bands[-1]["sizes"][-1] * 2 == size:
            bands[-1]["sizes"].append(size)
        else:
            bands.append({"plan": plan, "sizes": [size]})
    return bands


COLLS = ("allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall")
# SIZE is P blocks of one rank (nccl-tests): a multiple of 4 * P bytes.
BLOCKED = ("allgather", "reduce_scatter", "alltoall")
# In place, as MPI_IN_PLACE and torch's in-place calls run them; the others
# take two buffers in every library.
IN_PLACE = ("allreduce", "broadcast", "reduce")


def sizes_at(sizes, world_size, coll):
    """The sizes a world size runs: each rounded down to a multiple of 4 * P
    bytes for the blocked collectives, as xcoll-perf rounds them."""
    if coll not in BLOCKED:
        return sizes
    unit = 4 * world_size
    return sorted({s - s % unit for s in sizes if s >= unit})


def run_xcoll(peer, backend, perf, world_size, sizes, args, logdir):
    for band in band_plans(sizes, args):
        iters, warmup = band["plan"]
        port = free_port()
        json_path = os.path.join(logdir, f"{peer.name}-np{world_size}-{band['sizes'][0]}.jsonl")
        if os.path.exists(json_path):
            os.unlink(json_path)
        # -z 1 -a 3: blocking calls, slowest rank's time, as the other
        # columns are timed (xcoll-perf's defaults are nccl-tests' -z 0 -a 1);
        # -z 2 with --nonblocking: each non-blocking call waited for at once.
        cmd = [perf, "--coll", args.coll,
               "-b", str(band["sizes"][0]), "-e", str(band["sizes"][-1]), "-f", "2",
               "-z", "2" if args.nonblocking else "1", "-a", "3",
               "-n", str(iters), "-w", str(warmup), "-d", "float32", "-o", "sum",
               "-c", "1" if args.check else "0", "--json", json_path]
        procs, logs = [], []
        for rank in range(world_size):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world_size),
                       LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world_size),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       XCOLL_BACKEND=backend_env(backend)[0], **backend_env(backend)[1])
            log_path = os.path.join(logdir, f"{peer.name}-np{world_size}-{band['sizes'][0]}-rank{rank}.log")
            logs.append(log_path)
            log = open(log_path, "w")
            procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))
            log.close()
        deadline = time.monotonic() + args.timeout
        codes = []
        for proc in procs:
            try:
                codes.append(proc.wait(timeout=max(1.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                for p in procs:
                    p.kill()
                    p.wait()
                codes.append(124)
                break
        rows = json_rows(open(json_path).read()) if os.path.exists(json_path) else []
        # In place where the peers run it so (IN_PLACE), else out of place.
        # Rows carry the size xcoll-perf ran (rounded as sizes_at rounds).
        half = "ip" if args.coll in IN_PLACE else "oop"
        for row in rows:
            peer.add(world_size, row["size"], row[f"{half}_time_us"],
                     row.get(f"{half}_wrong") or 0)
        bad = [(r, c) for r, c in enumerate(codes) if c != 0]
        if bad:
            rank, code = bad[0]
            what = "timed out" if code == 124 else f"exit {code}"
            peer.failures.append(
                f"{peer.name} at world size {world_size}, sizes {human_bytes(band['sizes'][0])}"
                f"..{human_bytes(band['sizes'][-1])}: rank {rank} {what}: "
                f"{last_line(logs[rank])} (log {logs[rank]})")
            return  # later bands would fail the same way


# ---- gloo ----

def torch_python():
    """A Python interpreter that has torch.distributed with gloo, or None."""
    candidates = [sys.executable, "/usr/bin/python3", shutil.which("python3")]
    probe = "import torch.distributed as d; assert d.is_available() and d.is_gloo_available()"
    for python in dict.fromkeys(c for c in candidates if c):
        try:
            if subprocess.run([python, "-c", probe], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=120).returncode == 0:
                return python
        except (OSError, subprocess.TimeoutExpired):
            continue
    return None


def run_plans_peer(peer, cmd, world_size, logdir, timeout):
    log_path = os.path.join(logdir, f"{peer.name}-np{world_size}.log")
    code, out = run_bounded(cmd, os.environ.copy(), timeout, log_path)
    for row in json_rows(out):
        peer.add(world_size, row["size"], row["time_us"], row["wrong"])
    if code != 0:
        what = "timed out" if code == 124 else f"exit {code}"
        peer.failures.append(f"{peer.name} at world size {world_size}: {what}: "
                             f"{last_line(log_path)} (log {log_path})")


def plan_args(sizes, args):
    return [f"{size}:{iters}:{warmup}" for size in sizes for iters, warmup in [plan_for(size, args)]]


# ---- Open MPI ----

def build_mpi_program(build, logdir):
    """Compile bench/mpi_allreduce.c into <build>/bench; returns (path, error)."""
    mpicc = shutil.which("mpicc")
    if not mpicc or not shutil.which("mpirun"):
        return None, "apt-get install openmpi-bin libopenmpi-dev"
    source = os.path.join(ROOT, "bench", "mpi_allreduce.c")
    target_dir = os.path.join(build, "bench")
    os.makedirs(target_dir, exist_ok=True)
    target = os.path.join(target_dir, "mpi_allreduce")
    if os.path.exists(target) and os.path.getmtime(target) >= os.path.getmtime(source):
        return target, None
    log_path = os.path.join(logdir, "mpicc.log")
    code, _ = run_bounded([mpicc, "-O2", "-Wall", "-Wextra", "-o", target, source],
                          os.environ.copy(), 120, log_path)
    if code != 0:
        return None, f"mpicc failed: {last_line(log_path)} (log {log_path})"
    return target, None


# ---- the table ----

def fmt_time(cell):
    return f"{cell['time_us']:.1f}" if cell else "-"


def busbw_factor(coll, world_size):
    """nccl-tests' busbw factor (doc/PERFORMANCE.md): 2(P-1)/P for allreduce,
    (P-1)/P for allgather, reduce_scatter and alltoall, 1 for broadcast and
    reduce."""
    if coll in ("broadcast", "reduce"):
        return 1.0
    scale = 2.0 if coll == "allreduce" else 1.0
    return scale * (world_size - 1) / world_size


def busbw(size, time_us, world_size, coll="allreduce"):
    if not time_us or time_us <= 0:
        return None
    return size / (time_us * 1e-6) / 1e9 * busbw_factor(coll, world_size)


def fmt_ratio(a, b):
    return f"{a / b:.2f}" if a and b else "-"


def table(peers, reference, world_size, sizes, compare=("gloo", "ompi-tcp"),
          coll="allreduce"):
    others = [next((p for p in peers if p.name == name), None) for name in compare]
    head = ["size"]
    for peer in peers:
        head += [f"{peer.name} us", f"{peer.name} GB/s"]
    if reference:
        r = reference.name
        head += [f"busbw {r}/{name}" for name in compare]
        head += [f"latency {r}/{name}" for name in compare]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" for _ in head) + "|"]
    for size in sizes:
        row = [human_bytes(size)]
        for peer in peers:
            cell = peer.results.get((world_size, size))
            bw = busbw(size, cell["time_us"], world_size, coll) if cell else None
            flag = " WRONG" if cell and cell["wrong"] else ""
            row += [fmt_time(cell) + flag, f"{bw:.3f}" if bw is not None else "-"]
        if reference:
            ref = reference.results.get((world_size, size))
            t_ref = ref["time_us"] if ref else None
            times = [(o.results.get((world_size, size)) or {}).get("time_us") if o else None
                     for o in others]
            # busbw ratio = inverse time ratio (same size, same factor).
            row += [fmt_ratio(t, t_ref) for t in times]
            row += [fmt_ratio(t_ref, t) for t in times]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(
        description="an xcoll collective vs torch.distributed gloo vs Open MPI (one run, one table)")
    parser.add_argument("--compare", default="gloo ompi-tcp",
                        help='peers the first xcoll backend is divided by in the ratio '
                             'columns (default "gloo ompi-tcp")')
    parser.add_argument("--coll", default="allreduce", choices=COLLS,
                        help="the collective to compare (default allreduce); broadcast "
                             "and reduce with root 0")
    parser.add_argument("--sizes", default="4K:64M",
                        help="MIN:MAX in bytes, doubling (K/M/G suffixes), or a comma list (default 4K:64M)")
    parser.add_argument("--from", dest="from_bytes", default=None,
                        help="smallest size, overriding MIN of --sizes (e.g. 8)")
    parser.add_argument("--iters", type=int, default=50,
                        help="timed calls per size up to 256 KiB; fewer above, at least 3 (default 50)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls per size (default 5)")
    parser.add_argument("--nproc", default="2 4", help='world sizes (default "2 4")')
    parser.add_argument("--backends", default="tcp ucx", help='xcoll backends (default "tcp ucx")')
    parser.add_argument("--peers", default="gloo ompi-sm ompi-tcp",
                        help='other libraries (default "gloo ompi-sm ompi-tcp")')
    parser.add_argument("--build", default=None,
                        help="xcoll build directory (default $XCOLL_BUILD_DIR, build-perf, build)")
    parser.add_argument("--nonblocking", action="store_true",
                        help="time each call's non-blocking form waited for at once "
                             "(xcoll-perf -z 2; MPI_I* + MPI_Wait; async_op=True + wait())")
    parser.add_argument("--no-check", dest="check", action="store_false",
                        help="skip xcoll-perf's result check (-c 0)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds one launch may take before it is killed (default 300)")
    parser.add_argument("--out", default=None, help="also write the tables to this Markdown file")
    args = parser.parse_args()
    if args.iters < 1 or args.warmup < 0:
        parser.error("--iters must be >= 1 and --warmup >= 0")
    try:
        sizes = size_list(args)
        world_sizes = [int(x) for x in args.nproc.split()]
    except (ValueError, argparse.ArgumentTypeError) as exc:
        parser.error(str(exc))
    if not sizes or not world_sizes or min(world_sizes) < 1:
        parser.error("need at least one size and one world size >= 1")

    build = args.build or os.environ.get("XCOLL_BUILD_DIR")
    if not build:
        build = next((os.path.join(ROOT, d) for d in ("build-perf", "build")
                      if os.path.isdir(os.path.join(ROOT, d))), os.path.join(ROOT, "build"))
    build = os.path.abspath(build)
    logdir = os.path.join(build, "bench-logs")
    os.makedirs(logdir, exist_ok=True)

    peers = []
    perf = os.path.join(build, "tools", "xcoll-perf")
    built = xcoll_backends_built(build)
    for backend in args.backends.split():
        peer = Peer(f"xcoll-{backend}")
        peers.append(peer)
        if not os.access(perf, os.X_OK):
            peer.missing = (f"{perf} not built (cmake -S {ROOT} -B {build} && "
                            f"cmake --build {build} -j2)")
        elif built is not None and backend_env(backend)[0] not in built:
            peer.missing = (f"backend {backend} not compiled in"
                            + (" (apt-get install libucx-dev, configure with -DXCOLL_WITH_UCX=ON)"
                               if backend == "ucx" else ""))
    wanted = args.peers.split()
    unknown = [name for name in wanted if name not in ("gloo", "ompi-sm", "ompi-tcp")]
    if unknown:
        parser.error(f"unknown peer {unknown[0]}: --peers takes gloo, ompi-sm, ompi-tcp")
    python = torch_python() if "gloo" in wanted else None
    mpi_program, mpi_error = (build_mpi_program(build, logdir)
                              if any(p.startswith("ompi") for p in wanted) else (None, None))
    for name in wanted:
        peer = Peer(name)
        peers.append(peer)
        if name == "gloo" and not python:
            peer.missing = "apt-get install python3-torch (no python3 with torch.distributed gloo)"
        elif name.startswith("ompi") and not mpi_program:
            peer.missing = mpi_error
    reference = next((p for p in peers if p.name.startswith("xcoll-") and not p.missing), None)

    started = time.monotonic()
    for world_size in world_sizes:
        for peer in peers:
            if peer.missing:
                continue
            print(f"# running {peer.name} at world size {world_size} ...", file=sys.stderr, flush=True)
            at = sizes_at(sizes, world_size, args.coll)
            if peer.name.startswith("xcoll-"):
                # The unrounded sizes: xcoll-perf rounds each itself.
                unit = 4 * world_size if args.coll in BLOCKED else 4
                run_xcoll(peer, peer.name[len("xcoll-"):], perf, world_size,
                          [s for s in sizes if s >= unit], args, logdir)
            elif peer.name == "gloo":
                cmd = [python, os.path.join(ROOT, "bench", "torch_allreduce.py"),
                       "--nproc", str(world_size), "--port", str(free_port()),
                       "--timeout", str(args.timeout), "--coll", args.coll]
                if args.nonblocking:
                    cmd.append("--nonblocking")
                cmd += plan_args(at, args)
                run_plans_peer(peer, cmd, world_size, logdir, args.timeout + 30)
            else:
                mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(world_size)]
                if peer.name == "ompi-tcp":
                    mpirun += ["--mca", "btl", "self,tcp"]
                mpi = [mpi_program] + (["--nonblocking"] if args.nonblocking else [])
                run_plans_peer(peer, mpirun + mpi + ["--coll", args.coll] + plan_args(at, args),
                               world_size, logdir, args.timeout)

    what = ("float32" + (" sum" if args.coll in ("allreduce", "reduce", "reduce_scatter") else "")
            + (", root 0" if args.coll in ("broadcast", "reduce") else "")
            + (", in place" if args.coll in IN_PLACE else ", out of place")
            + ("; each call non-blocking, waited for at once (xcoll-perf -z 2, "
               "MPI_I* + MPI_Wait, async_op=True + wait())" if args.nonblocking else ""))
    factor = {"allreduce": "2(P-1)/P", "broadcast": "1", "reduce": "1"}.get(args.coll, "(P-1)/P")
    report = [f"# {args.coll}: xcoll vs gloo vs Open MPI", "",
              f"{what}; sizes {human_bytes(sizes[0])}..{human_bytes(sizes[-1])}; "
              f"iters {args.iters} (fewer above 256K, at least 3), warmup {args.warmup}; "
              f"host {socket.gethostname()}, {os.cpu_count()} CPUs; "
              f"took {time.monotonic() - started:.0f} s.",
              f"time = mean per call on the slowest rank (us); busbw = size/time * {factor} (GB/s).", ""]
    notes = []
    for peer in peers:
        if peer.missing:
            notes.append(f"missing: {peer.name} ({peer.missing})")
        for failure in peer.failures:
            notes.append(f"failed: {failure}")
        wrong = [k for k, v in peer.results.items() if v["wrong"]]
        if wrong:
            notes.append(f"WRONG RESULTS: {peer.name} at (world size, bytes) {sorted(wrong)}")
    report += [f"- {n}" for n in notes] + ([""] if notes else [])
    shown = [p for p in peers if not p.missing]
    for world_size in world_sizes:
        report += [f"## world size {world_size}", "",
                   table(shown, reference, world_size, sizes_at(sizes, world_size, args.coll),
                         args.compare.split(), args.coll), ""]
    text = "\n".join(report)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    failed = any(p.failures for p in peers) or any("WRONG" in n for n in notes)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
