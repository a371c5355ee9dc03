"""Latency of one librdkafka transactional producer (confluent-kafka), sequential transactions.

Each transaction is begin_transaction, one 100-byte record to a partition, commit_transaction;
the time from begin to the commit's return is recorded. Prints one JSON object with the
percentiles in milliseconds. Used by bench/run.sh's `lr` scenario:

    python bench/lr_latency.py --bootstrap HOST:PORT --topic T --duration 10 --label NAME
"""

import argparse
import json
import time

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
    args = ap.parse_args()

    p = Producer({
        "bootstrap.servers": args.bootstrap,
        "transactional.id": "lr-latency-%d" % int(time.time() * 1000),
        "linger.ms": 0,
        "enable.idempotence": True,
        "acks": "all",
        **({"socket.nagle.disable": True} if args.nodelay else {}),
    })
    p.init_transactions(30)
    value = b"x" * 100
    samples = []
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
        if now >= measure_from:
            samples.append(ms)
        n += 1
    samples.sort()
    print(json.dumps({
        "label": args.label,
        "transactions": len(samples),
        "txn_per_s": round(len(samples) / args.duration, 1),
        "p50_ms": percentile(samples, 0.50),
        "p90_ms": percentile(samples, 0.90),
        "p99_ms": percentile(samples, 0.99),
        "max_ms": round(samples[-1], 3) if samples else None,
    }), flush=True)


if __name__ == "__main__":
    main()
