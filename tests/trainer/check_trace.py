#!/usr/bin/env python3
"""check_trace.py - checks xtrain --trace files against XCOLL_TRACE's.

    check_trace.py STEPS BUCKETS MERGED_JSON

MERGED_JSON is tools/xcoll-trace-merge's output over the xtrain traces and
the XCOLL_TRACE traces of every rank of one DDP MLP run. For every rank it
checks that there are STEPS "step N" spans, each holding in time order one
load/forward/backward/ddp wait/optimizer step, that the per-layer backward
spans fc3, fc2, fc1 lie inside backward in that order, that BUCKETS
all-reduce spans per step start after the backward of the layers they hold
and end inside that step, and that xcoll's own span of each bucket's
all-reduce (same bytes, float32) lies inside the xtrain span of that bucket:
issue <= xcoll start and xcoll end <= observed completion, which only holds
if both files use the same clock. Exit 1 with the first violation.
"""
import json
import sys

EPS_US = 2.0  # ts and dur are printed with 3 decimals; leave room to round


def fail(msg):
    print("check_trace: " + msg)
    sys.exit(1)


def inside(inner, outer):
    return (inner["ts"] >= outer["ts"] - EPS_US and
            inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + EPS_US)


def main():
    steps, buckets, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    events = json.load(open(path))["traceEvents"]
    ranks = sorted({e["pid"] for e in events if e.get("ph") == "X"})
    if not ranks:
        fail("no spans at all")
    for rank in ranks:
        mine = [e for e in events if e.get("ph") == "X" and e["pid"] == rank]
        trainer = [e for e in mine if e["tid"] >= 1000]
        step_spans = sorted((e for e in trainer if e["name"].startswith("step ")),
                            key=lambda e: e["ts"])
        if len(step_spans) != steps:
            fail(f"rank {rank}: {len(step_spans)} step spans, expected {steps}")
        bucket_spans = []
        for k, step in enumerate(step_spans):
            if step["args"]["step"] != k + 1 or step["name"] != f"step {k + 1}":
                fail(f"rank {rank}: step span {k} is {step['name']} {step['args']}")
            within = sorted((e for e in trainer
                             if e is not step and inside(e, step)),
                            key=lambda e: (e["ts"], -e["dur"]))
            names = [e["name"] for e in within if e["tid"] == 1000]
            expected = ["load batch", "forward", "backward", "backward fc3",
                        "backward fc2", "backward fc1", "ddp wait",
                        "optimizer step"]
            if names != expected:
                fail(f"rank {rank} step {k + 1}: spans {names}, expected {expected}")
            by = {e["name"]: e for e in within}
            for layer in ("fc3", "fc2", "fc1"):
                if not inside(by["backward " + layer], by["backward"]):
                    fail(f"rank {rank} step {k + 1}: backward {layer} outside backward")
            ar = sorted((e for e in within if e["tid"] > 1000),
                        key=lambda e: e["args"]["bucket"])
            if [e["args"]["bucket"] for e in ar] != list(range(buckets)):
                fail(f"rank {rank} step {k + 1}: bucket spans {[e['name'] for e in ar]}")
            for e in ar:
                if e["tid"] != 1001 + e["args"]["bucket"]:
                    fail(f"rank {rank}: {e['name']} on track {e['tid']}")
                # the bucket holding fc1 can only start once fc1 is done
                last_layer = "fc1" if e["args"]["tensors"].startswith("fc1") else "fc2"
                done = by["backward " + last_layer]
                if e["ts"] < done["ts"] + done["dur"] - EPS_US:
                    fail(f"rank {rank} step {k + 1}: {e['name']} issued before "
                         f"the backward of {last_layer} ended")
            bucket_spans.extend(ar)
        # xcoll's spans of the gradient all-reduces, in issue order
        sizes = {e["args"]["bytes"] for e in bucket_spans}
        coll = sorted((e for e in mine if e["tid"] < 1000 and
                       e.get("cat") == "collective" and
                       e["args"].get("dtype") == "float32" and
                       e["args"].get("bytes") in sizes),
                      key=lambda e: e["ts"])
        bucket_spans.sort(key=lambda e: e["ts"])
        if len(coll) != len(bucket_spans):
            fail(f"rank {rank}: {len(coll)} xcoll all-reduce spans for "
                 f"{len(bucket_spans)} bucket spans (is XCOLL_TRACE set?)")
        for c, b in zip(coll, bucket_spans):
            if c["args"]["bytes"] != b["args"]["bytes"] or not inside(c, b):
                fail(f"rank {rank}: xcoll span {c} not inside xtrain span {b}")
    print(f"check_trace: {len(ranks)} rank(s), {steps} steps, {buckets} "
          "buckets each: spans nested and ordered, xcoll's all-reduces inside "
          "the bucket spans")


if __name__ == "__main__":
    main()
