#!/usr/bin/env python3
"""trace_lanes.py - spread overlapping chunk spans of an xcoll trace over
separate tracks so that trace viewers draw all of them (docs/tracing.md).

xcoll writes every span of one rank and communicator on one track (tid =
communicator id). The chunk pipeline keeps two receives and two sends in
flight, so chunk spans overlap without nesting, and the Trace Event Format
expects the spans of one track to nest. This script keeps the collective
spans where they are and moves each chunk span to the first "lane" track of
its rank, communicator and kind (send, recv, reduce) where it does not overlap
the previous span. Lanes are named "<kind> lane <n>" in the viewer.

    python3 trace_lanes.py merged.json -o lanes.json
"""
import argparse
import json
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("input", help="a trace from xcoll-trace-merge")
    parser.add_argument("-o", "--output", default="-", help="default: stdout")
    args = parser.parse_args()

    with open(args.input, encoding="utf-8") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data

    kinds = {"send": 1, "recv": 2, "reduce": 3}
    lane_end = {}  # (pid, comm tid, kind, lane) -> end time of its last span
    names = {}     # new tid -> (pid, name)
    spans = [e for e in events if e.get("ph") == "X"]
    others = [e for e in events if e.get("ph") != "X"]
    for event in sorted(spans, key=lambda e: e["ts"]):
        kind = event.get("name")
        if event.get("cat") != "chunk" or kind not in kinds:
            continue
        pid, comm = event["pid"], event["tid"]
        lane = 0
        while lane_end.get((pid, comm, kind, lane), -1.0) > event["ts"]:
            lane += 1
        lane_end[(pid, comm, kind, lane)] = event["ts"] + event["dur"]
        # collective spans keep tid = comm; lanes get distinct tids after it
        tid = comm * 1000 + kinds[kind] * 100 + lane + 1
        event["tid"] = tid
        names[tid] = (pid, f"comm {comm} {kind} lane {lane}")
    for tid, (pid, name) in sorted(names.items()):
        others.append({"name": "thread_name", "ph": "M", "pid": pid,
                       "tid": tid, "args": {"name": name}})
        others.append({"name": "thread_sort_index", "ph": "M", "pid": pid,
                       "tid": tid, "args": {"sort_index": tid}})
    result = {"traceEvents": others + spans, "displayTimeUnit": "ms"}
    out = sys.stdout if args.output == "-" else open(args.output, "w",
                                                     encoding="utf-8")
    json.dump(result, out)
    out.write("\n")
    if out is not sys.stdout:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
