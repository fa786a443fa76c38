#!/usr/bin/env python3
"""nccl_like.py - nccl_like (SIMPLE and LL) against tcp with xcoll-perf,
allreduce float32 sum, at P=2 and P=4 ranks on this host, in interleaved
rounds so that a shared, loaded machine slows every backend alike:

  round r: for P in NPROCS: for kind in (lat, bw): tcp, simple, ll, ring,
           slot, gather [, base]

simple is XCOLL_PROTO=simple with the default algorithm: where ranks
outnumber cores (P=4 on 2 cores) that is the pairwise allreduce
(backends/nccl_like/pairwise.c), else the ring; ring is SIMPLE with
XCOLL_PAIRWISE=0 (the ring kernel everywhere);
slot is SIMPLE with XCOLL_DIRECT=0 (every step copied through a slot);
gather is LL with XCOLL_BRUCK=0 (latency rows only: the small allreduce as
the gather algorithm instead of the Bruck allreduce, which ll runs on 3 or
more host ranks).

Each row is then the MEDIAN over the rounds of the time (latency rows,
8 B .. 4 KiB, us) or busbw (bandwidth rows, 1 MiB .. 16 MiB, GB/s), and of the
per-round ratio nccl_like / tcp, with the ratio's range [min-max]. The
targets the headings name: LL latency <= 1.0x tcp, busbw >= 0.8x tcp.

Usage: bench/nccl_like.sh [BUILD_DIR [BASE_BUILD_DIR]]
  BASE_BUILD_DIR: another build (e.g. main's) whose nccl_like is measured in
  the same rounds (SIMPLE for bandwidth, LL for latency: the columns "base")
  for before/after figures taken under the same load.
Env: ROUNDS (default 3), ITERS_LAT (200), ITERS_BW (20), NPROCS ("2 4").
The load average (uptime) is printed before and after."""
import os
import statistics
import subprocess
import sys


def uptime():
    return subprocess.run(["uptime"], capture_output=True,
                          text=True).stdout.strip()


def measure(build, nprocs, args, env_extra):
    """rank 0's rows of xcoll-perf: {bytes: (time_us, busbw)}."""
    env = dict(os.environ, XCOLL_TIMEOUT_S="120", **env_extra)
    cmd = [os.path.join(build, "tools", "xcollrun"), "--nproc-per-node",
           str(nprocs), "--master-port", "0",
           os.path.join(build, "tools", "xcoll-perf")] + args + [
               "-z", "1", "-a", "3", "-c", "1"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True,
                         timeout=600).stdout
    rows = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) > 9 and f[0] == "[rank" and f[2].isdigit():
            rows[int(f[2])] = (float(f[7]), float(f[9]))
    return rows


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    base = sys.argv[2] if len(sys.argv) > 2 else None
    rounds = int(os.environ.get("ROUNDS", "3"))
    iters_lat = os.environ.get("ITERS_LAT", "200")
    iters_bw = os.environ.get("ITERS_BW", "20")
    nprocs = [int(n) for n in os.environ.get("NPROCS", "2 4").split()]
    for b in [build] + ([base] if base else []):
        if not os.access(os.path.join(b, "tools", "xcoll-perf"), os.X_OK):
            sys.exit("build %s first (cmake --build %s)" % (b, b))
    kinds = {
        "lat": ["-b", "8", "-e", "4096", "-f", "8", "-n", iters_lat, "-w",
                "20"],
        "bw": ["-b", "1M", "-e", "16M", "-f", "4", "-n", iters_bw, "-w", "3"],
    }
    runs = [("tcp", build, {"XCOLL_BACKEND": "tcp"}),
            ("simple", build, {"XCOLL_BACKEND": "nccl_like",
                               "XCOLL_PROTO": "simple"}),
            ("ll", build, {"XCOLL_BACKEND": "nccl_like", "XCOLL_PROTO": "ll"}),
            # SIMPLE's allreduce as the ring kernel, where the default
            # (XCOLL_PAIRWISE=auto) runs the pairwise schedule: ranks
            # outnumber cores.
            ("ring", build, {"XCOLL_BACKEND": "nccl_like",
                             "XCOLL_PROTO": "simple", "XCOLL_PAIRWISE": "0"}),
            # The same build with direct sends off: every step through a
            # slot, as before them (and as a CUDA rank runs).
            ("slot", build, {"XCOLL_BACKEND": "nccl_like",
                             "XCOLL_PROTO": "simple", "XCOLL_DIRECT": "0"}),
            ("gather", build, {"XCOLL_BACKEND": "nccl_like",
                               "XCOLL_PROTO": "ll", "XCOLL_BRUCK": "0"})]
    if base:
        runs.append(("base", base, {"XCOLL_BACKEND": "nccl_like"}))
    print("# before:", uptime())
    # data[(P, kind, name)] = list over rounds of {bytes: (time, busbw)}
    data = {}
    for _ in range(rounds):
        for p in nprocs:
            for kind, args in kinds.items():
                for name, b, env in runs:
                    if name == "gather" and kind != "lat":
                        continue
                    env = dict(env)
                    if name == "base":
                        env["XCOLL_PROTO"] = "ll" if kind == "lat" else "simple"
                    data.setdefault((p, kind, name), []).append(
                        measure(b, p, args, env))
    print("# after: ", uptime())
    print("# %d rounds, medians; ratio = nccl_like / tcp per round, "
          "median [min-max]" % rounds)
    names = [n for n, _, _ in runs]
    for p in nprocs:
        for kind in kinds:
            col = 0 if kind == "lat" else 1
            what = ("latency, time in us; target LL <= 1.00x tcp"
                    if kind == "lat" else
                    "bus bandwidth, GB/s; target >= 0.80x tcp")
            print("## P=%d: allreduce float32, %s" % (p, what))
            shown = [n for n in names if (p, kind, n) in data]
            print("%9s " % "bytes" + "".join("%9s " % n for n in shown) +
                  "".join("%18s " % (n + "/tcp") for n in shown[1:]))
            sizes = sorted(data[(p, kind, "tcp")][0])
            for size in sizes:
                line = "%9d " % size
                for n in shown:
                    vals = [r[size][col] for r in data[(p, kind, n)]
                            if size in r]
                    line += ("%9.1f " if kind == "lat" else "%9.3f ") % (
                        statistics.median(vals) if vals else float("nan"))
                for n in shown[1:]:
                    ratios = [r[size][col] / t[size][col]
                              for r, t in zip(data[(p, kind, n)],
                                              data[(p, kind, "tcp")])
                              if size in r and size in t and t[size][col]]
                    if ratios:
                        line += "%6.2f [%4.2f-%4.2f] " % (
                            statistics.median(ratios), min(ratios),
                            max(ratios))
                    else:
                        line += "%18s " % "-"
                print(line)


if __name__ == "__main__":
    main()
