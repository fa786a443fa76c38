#!/usr/bin/env python3
"""check_tracks.py - checks the track structure of a merged xcoll trace.

    check_tracks.py MERGED_JSON RANKS CATEGORY...

The Trace Event Format draws the complete ("X") events of one (pid, tid) as
a stack: they must nest (Perfetto FAQ, https://perfetto.dev/docs/faq). For
every (pid, tid) that holds spans this checks that they nest properly (a
span that starts inside another ends inside it too), that the tid has one
thread_name and a thread_sort_index, that no two tids of a rank share a
name, that there are RANKS ranks each named by a process_name, and that each
rank has at least one span of every CATEGORY (collective, chunk, channel,
primitive, proxy). Exit 1 with the first violation.
"""
import json
import sys

EPS_US = 0.0015  # ts and dur are printed to the nanosecond


def fail(message):
    print("check_tracks: " + message)
    sys.exit(1)


def main():
    path, ranks, categories = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    thread_names, sort_indices, process_names = {}, set(), set()
    spans = {}
    for e in events:
        key = (e.get("pid"), e.get("tid"))
        if e.get("ph") == "M":
            if e["name"] == "thread_name":
                if key in thread_names:
                    fail(f"pid {key[0]} tid {key[1]} named twice")
                thread_names[key] = e["args"]["name"]
            elif e["name"] == "thread_sort_index":
                sort_indices.add(key)
            elif e["name"] == "process_name":
                process_names.add(e["pid"])
        elif e.get("ph") == "X":
            spans.setdefault(key, []).append(e)
        else:
            fail(f"unexpected phase {e.get('ph')!r}: {e}")
    pids = sorted({pid for pid, _ in spans})
    if pids != list(range(ranks)):
        fail(f"spans from ranks {pids}, expected 0..{ranks - 1}")
    if not set(pids) <= process_names:
        fail(f"ranks without a process_name: {set(pids) - process_names}")
    for pid in pids:
        names = [n for (p, _), n in thread_names.items() if p == pid]
        if len(names) != len(set(names)):
            fail(f"rank {pid}: two tracks share a name: {sorted(names)}")
        seen = {e["cat"] for (p, _), lane in spans.items() if p == pid
                for e in lane}
        for cat in categories:
            if cat not in seen:
                fail(f"rank {pid}: no '{cat}' span (categories: {sorted(seen)})")
    checked = 0
    for key, lane in spans.items():
        if key not in thread_names or key not in sort_indices:
            fail(f"pid {key[0]} tid {key[1]}: spans on an unnamed track")
        stack = []
        for e in sorted(lane, key=lambda e: (e["ts"], -e["dur"])):
            start, end = e["ts"], e["ts"] + e["dur"]
            while stack and stack[-1][1] <= start + EPS_US:
                stack.pop()
            if stack and end > stack[-1][1] + EPS_US:
                outer = stack[-1][2]
                fail(f"rank {key[0]} track '{thread_names[key]}': "
                     f"{e['name']} [{start:.3f}, {end:.3f}] overlaps "
                     f"{outer['name']} [{outer['ts']:.3f}, "
                     f"{outer['ts'] + outer['dur']:.3f}] without nesting")
            stack.append((start, end, e))
            checked += 1
    print(f"check_tracks: {checked} spans on {len(spans)} tracks of {ranks} "
          f"ranks nest properly")


if __name__ == "__main__":
    main()
