#!/usr/bin/env python3
"""Renders the JSON results of bench/run.sh as Markdown tables (for docs/performance.md).

    python3 bench/tables.py OUT_DIR
"""
import glob
import json
import os
import sys


def ms(us):
    v = us / 1000.0
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def q(s):
    return f"{ms(s['p50_us'])} / {ms(s['p90_us'])} / {ms(s['p99_us'])} / {ms(s['p999_us'])}"


def load(path):
    with open(path) as f:
        return json.load(f)


def run_rows(files):
    rows = []
    for f in files:
        for r in load(f).get("results", []):
            rows.append(r)
    return rows


def main():
    out = sys.argv[1]
    files = []
    for pat in ["matrix-embedded-ppt*.json", "matrix-daemon-ppt*.json", "matrix-daemon-tv2.json",
                "coordinator-ppt*.json", "coordinator-tv2.json", "ceiling-*.json",
                "latency-*.json", "kafka-ppt*.json", "kafka-fsync.json"]:
        files += sorted(glob.glob(os.path.join(out, pat)))
    print("| setup | producers | partitions/txn | TV | committed txn/s | retries/txn "
          "| AddPartitionsToTxn p50/p90/p99/p99.9 ms | Produce p50/p90/p99/p99.9 ms "
          "| EndTxn p50/p90/p99/p99.9 ms | server CPU s / 1000 txn | server peak RSS MiB "
          "| other load % |")
    print("|---|---:|---:|---:|---:|---:|---|---|---|---:|---:|---:|")
    for r in run_rows(files):
        n = max(r["committed"] + r["aborted"], 1)
        cpu = sum(s["cpu_s_per_1000_txn"] for s in r["servers"])
        peak = sum(s["peak_rss_mib"] for s in r["servers"])
        label = r["label"] + (f" @{r['rate']:.0f}/s" if r.get("rate") else "")
        err = f" ({r['errors']} errors)" if r["errors"] else ""
        print(f"| {label}{err} | {r['producers']} | {r['partitions_per_txn']} | {r['txn_version']} "
              f"| {r['committed_per_s']:,.0f} | {r['retries'] / n:.2f} | {q(r['add_partitions'])} "
              f"| {q(r['produce'])} | {q(r['end_txn'])} | {cpu:.3f} | {peak:.1f} "
              f"| {r['other_busy'] * 100:.0f} |")
    for name in ["fsync.json", "fsync-4k.json"]:
        p = os.path.join(out, name)
        if os.path.exists(p):
            f = load(p)
            print(f"\nfsync probe ({f['write_bytes']} B write + fdatasync): {f['fsyncs_per_s']:,.0f}/s, "
                  f"p50 {f['latency']['p50_us']} us, p99 {f['latency']['p99_us']} us (load {f['loadavg']})")
    for name in ["recovery-generate.json", "recovery-load-probe.json"]:
        p = os.path.join(out, name)
        if os.path.exists(p):
            print(f"\n{name}: {json.dumps(load(p))}")
    p = os.path.join(out, "recovery.json")  # one line per daemon binary
    if os.path.exists(p):
        with open(p) as f:
            for line in filter(str.strip, f):
                print(f"\nrecovery.json: {json.dumps(json.loads(line))}")


if __name__ == "__main__":
    main()
