"""Latency of one librdkafka transactional producer (confluent-kafka), sequential transactions.

Each transaction is begin_transaction, one 100-byte record to a partition, commit_transaction;
the time from begin to the commit's return is recorded. Prints one JSON object with the
percentiles in milliseconds. Used by bench/run.sh's `lr` scenario:

    python bench/lr_latency.py --bootstrap HOST:PORT --topic T --duration 10 --label NAME

With --split, librdkafka's protocol debug log (which names each response's round-trip time) is
captured, and each transaction's time is split into the round trips of its AddPartitionsToTxn,
Produce and EndTxn requests (the servers' share, including loopback) and the rest (the client's
own share: librdkafka's timers and thread hand-offs, and Python).
"""

import argparse
import json
import os
import re
import tempfile
import time

TXN_END = b"lr-latency: transaction end\n"
RTT = re.compile(rb"Received (AddPartitionsToTxn|Produce|EndTxn)Response .*rtt ([0-9.]+)ms")


def round_trips_per_transaction(log):
    """Sums, per transaction, the round trips named in librdkafka's debug log `log` (bytes)."""
    sums, current = [], 0.0
    for line in log.splitlines():
        if line == TXN_END.rstrip(b"\n"):
            sums.append(current)
            current = 0.0
            continue
        m = RTT.search(line)
        if m:
            current += float(m.group(2))
    return sums

from confluent_kafka import Producer


def percentile(sorted_ms, q):
    if not sorted_ms:
        return None
    i = min(len(sorted_ms) - 1, int(round(q * (len(sorted_ms) - 1))))
    return round(sorted_ms[i], 3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--label", default="")
    ap.add_argument("--nodelay", action="store_true", help="socket.nagle.disable=true")
    ap.add_argument("--split", action="store_true",
                    help="split each transaction into the servers' round trips and the client's rest")
    args = ap.parse_args()

    # librdkafka writes its debug log to file descriptor 2: send it to a file while measuring.
    log_file = tempfile.TemporaryFile() if args.split else None
    if log_file is not None:
        saved_stderr = os.dup(2)
        os.dup2(log_file.fileno(), 2)

    p = Producer({
        "bootstrap.servers": args.bootstrap,
        "transactional.id": "lr-latency-%d" % int(time.time() * 1000),
        "linger.ms": 0,
        "enable.idempotence": True,
        "acks": "all",
        **({"socket.nagle.disable": True} if args.nodelay else {}),
        **({"debug": "protocol"} if args.split else {}),
    })
    p.init_transactions(30)
    value = b"x" * 100
    samples, measured = [], []
    start = time.monotonic()
    measure_from = start + args.warmup
    end = measure_from + args.duration
    n = 0
    while True:
        now = time.monotonic()
        if now >= end:
            break
        t0 = time.perf_counter()
        p.begin_transaction()
        p.produce(args.topic, value, partition=n % args.partitions)
        p.commit_transaction(30)
        ms = (time.perf_counter() - t0) * 1000.0
        if log_file is not None:
            os.write(2, TXN_END)
        if now >= measure_from:
            samples.append(ms)
            measured.append(n)
        n += 1
    split = {}
    if log_file is not None:
        log_file.seek(0)
        trips = round_trips_per_transaction(log_file.read())
        totals = dict(zip(measured, samples))
        servers = sorted(trips[i] for i in measured if i < len(trips))
        rest = sorted(totals[i] - trips[i] for i in measured if i < len(trips))
        split = {
            "round_trips_p50_ms": percentile(servers, 0.50),
            "round_trips_p99_ms": percentile(servers, 0.99),
            "client_rest_p50_ms": percentile(rest, 0.50),
            "client_rest_p99_ms": percentile(rest, 0.99),
        }
    samples.sort()
    print(json.dumps({
        "label": args.label,
        "transactions": len(samples),
        "txn_per_s": round(len(samples) / args.duration, 1),
        "p50_ms": percentile(samples, 0.50),
        "p90_ms": percentile(samples, 0.90),
        "p99_ms": percentile(samples, 0.99),
        "max_ms": round(samples[-1], 3) if samples else None,
        **split,
    }), flush=True)
    if log_file is not None:
        del p  # its shutdown is logged too: into the file, before stderr is given back
        os.dup2(saved_stderr, 2)


if __name__ == "__main__":
    main()
