"""End-to-end client programs on kafka-python.

Usage: python kp.py SUBCOMMAND [options]; JSON event lines on stdout as in lr.py.

  txns     a transactional producer running a pattern of commits and aborts; with
           --recover-after-s S, a transaction whose sends or end do not complete within S
           seconds is abandoned and a new producer instance with the same transactional_id
           takes over (see cmd_txns_recovering)
  consume  an assign()-based reader (read_committed or read_uncommitted)
  fence    zombie fencing: a second producer with the same transactional_id fences the first
  stall    a transaction that is begun, written to, then left idle past its timeout
"""

import argparse
import logging
import sys
import threading
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from common import Deadline, emit, log, parse_partitions, parse_pattern, tagged, txn_values


def producer(args, txn_id):
    return KafkaProducer(
        bootstrap_servers=args.bootstrap.split(","),
        transactional_id=txn_id,
        enable_idempotence=True,
        acks="all",
        transaction_timeout_ms=args.txn_timeout_ms,
        linger_ms=5,
        request_timeout_ms=10000,
        retry_backoff_ms=100,
        reconnect_backoff_ms=100,
        reconnect_backoff_max_ms=1000,
    )


def describe(exc):
    return {"error": type(exc).__name__, "message": str(exc)}


def send_all(p, topic, values, timeout=10):
    """Sends (partition, value) pairs and waits for each acknowledgement: returns offsets."""
    futures = [(part, v, p.send(topic, value=v.encode(), partition=part)) for part, v in values]
    p.flush(timeout)
    out = []
    for part, v, f in futures:
        md = f.get(timeout)
        out.append([part, v, md.offset])
    return out


def committed(p, topic, values):
    """One transaction of `p` sending (partition, value) pairs, committed: their offsets."""
    p.begin_transaction()
    rec = send_all(p, topic, values)
    p.commit_transaction()
    return rec


def outcome_of(fn):
    """{"ok": True} if `fn()` returns, else {"ok": False} with the exception described."""
    try:
        fn()
        return {"ok": True}
    except Exception as exc:  # noqa: BLE001 - an error is an outcome the test checks
        return dict(ok=False, **describe(exc))


def close_quietly(p):
    """Closes a producer that may be fenced or stalled, ignoring what that raises."""
    try:
        p.close(timeout=2)
    except Exception:  # noqa: BLE001
        pass


def cmd_txns(args):
    if args.recover_after_s > 0:
        return cmd_txns_recovering(args)
    partitions = parse_partitions(args.partitions)
    p = producer(args, args.txn_id)
    p.init_transactions()
    emit("init", txn_id=args.txn_id)
    for txn, action in enumerate(parse_pattern(args.pattern)):
        values = txn_values(args.prefix, txn, partitions, args.per_partition)
        p.begin_transaction()
        emit("produced", txn=txn, values=[[part, v] for part, v in values])
        record = send_all(p, args.topic, values)
        if action == "commit":
            p.commit_transaction()
        else:
            p.abort_transaction()
        emit(action, txn=txn, values=record, undelivered=[])
        if args.sleep_ms:
            time.sleep(args.sleep_ms / 1000.0)
    emit("done")
    p.close(timeout=5)
    return 0


def run_bounded(fn, seconds):
    """Runs fn in a daemon thread: (True, its result), its exception raised here, or
    (False, None) if it did not return within seconds (kafka-python's commit_transaction and
    abort_transaction have no timeout)."""
    box = {}

    def target():
        try:
            box["ok"] = fn()
        except Exception as exc:  # noqa: BLE001 - handed to the caller
            box["err"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        return False, None
    if "err" in box:
        raise box["err"]
    return True, box.get("ok")


def close_in_background(p):
    """Closes an abandoned producer without waiting for it (its sender may be wedged)."""

    def target():
        try:
            p.close(timeout=0)
        except Exception as exc:  # noqa: BLE001
            log("closing the abandoned producer:", repr(exc))

    threading.Thread(target=target, daemon=True).start()


def cmd_txns_recovering(args):
    """cmd_txns as an application that survives a wedged producer: kafka-python 3.0.12 drops
    a transactional request (AddPartitionsToTxn, EndTxn) when its coordinator's connection is
    refused (the sender's await_ready raises instead of returning False, and the request is
    neither sent nor retried), after which the transaction never completes. When the sends or
    the end of a transaction do not complete within --recover-after-s, the transaction is
    abandoned (event "abandoned": it never asked for a commit, so it must never be visible) or,
    if a commit may have been sent, reported "ambiguous" (all or nothing); a new producer
    instance with the same transactional_id then runs init_transactions, which fences the old
    instance and completes or aborts its transaction, and the pattern goes on."""
    partitions = parse_partitions(args.partitions)
    deadline = Deadline(args.deadline)
    bound = args.recover_after_s
    instance = 0
    p = producer(args, args.txn_id)
    p.init_transactions()
    emit("init", txn_id=args.txn_id, instance=instance)
    for txn, action in enumerate(parse_pattern(args.pattern)):
        values = txn_values(args.prefix, txn, partitions, args.per_partition)
        p.begin_transaction()
        emit("produced", txn=txn, values=[[part, v] for part, v in values])
        stage = "send"
        failure = {"error": "timeout", "message": "not complete within %s s" % bound}
        try:
            done, record = run_bounded(
                lambda: send_all(p, args.topic, values, timeout=bound), bound + 5)
            if done:
                stage = "end"
                end = p.commit_transaction if action == "commit" else p.abort_transaction
                done, _ = run_bounded(end, bound)
        except Exception as exc:  # noqa: BLE001 - any failure abandons the instance
            done = False
            failure = describe(exc)
        if done:
            emit(action, txn=txn, values=record, undelivered=[])
        else:
            log("txn", txn, "wedged at", stage, failure, "- abandoning producer instance", instance)
            unsent = [[part, v] for part, v in values]
            if stage == "end" and action == "commit":
                emit("ambiguous", txn=txn, values=unsent, stage=stage, **failure)
            else:
                emit("abandoned", txn=txn, values=unsent, stage=stage, **failure)
            close_in_background(p)
            instance += 1
            p = producer(args, args.txn_id)
            p.init_transactions()
            emit("init", txn_id=args.txn_id, instance=instance)
        if args.sleep_ms:
            time.sleep(args.sleep_ms / 1000.0)
        if deadline.expired():
            emit("deadline", txn=txn)
            return 4
    emit("done", instances=instance + 1)
    p.close(timeout=5)
    return 0


def cmd_consume(args):
    partitions = parse_partitions(args.partitions)
    deadline = Deadline(args.deadline)
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap.split(","),
        group_id=None,
        enable_auto_commit=False,
        isolation_level=args.isolation,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
        request_timeout_ms=10000,
    )
    tps = [TopicPartition(args.topic, part) for part in partitions]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    count = 0
    timed_out = False
    at_end = False
    while True:
        batches = consumer.poll(timeout_ms=200)
        for tp, records in sorted(batches.items(), key=lambda kv: kv[0].partition):
            for r in records:
                count += 1
                emit("record", partition=tp.partition, offset=r.offset, value=r.value.decode())
        if not batches:
            # End offsets follow the consumer's isolation level: the LSO for read_committed.
            ends = consumer.end_offsets(tps)
            at_end = all(consumer.position(tp) >= ends[tp] for tp in tps)
            if at_end and count >= args.min_records:
                break
        if deadline.expired():
            timed_out = True
            break
    emit("done", count=count, eof=at_end, timed_out=timed_out)
    consumer.close()
    return 0


def cmd_fence(args):
    partitions = parse_partitions(args.partitions)
    a = producer(args, args.txn_id)
    a.init_transactions()
    ok_rec = committed(a, args.topic, tagged(args.prefix, "a-ok", partitions))
    emit("commit", who="a", values=ok_rec)
    pre_values = tagged(args.prefix, "a-pre", partitions[:-1])
    a.begin_transaction()
    rec = send_all(a, args.topic, pre_values)
    emit("a_pre_written", values=rec)
    b = producer(args, args.txn_id)
    b.init_transactions()
    emit("b_init")
    post_values = tagged(args.prefix, "a-post", partitions)
    delivered = []
    produce_errors = []
    for part, v in post_values:
        try:
            f = a.send(args.topic, value=v.encode(), partition=part)
            a.flush(10)
            f.get(10)
            delivered.append(v)
        except Exception as exc:  # noqa: BLE001 - any failure is what a zombie should see
            produce_errors.append(describe(exc))
    a_commit = outcome_of(a.commit_transaction)
    emit("a_post", values=[[part, v] for part, v in post_values], delivered=sorted(delivered),
         produce_errors=produce_errors, commit=a_commit)
    b_rec = committed(b, args.topic, tagged(args.prefix, "b", partitions))
    emit("commit", who="b", values=b_rec)
    emit("done")
    close_quietly(a)
    b.close(timeout=5)
    return 0


def cmd_stall(args):
    partitions = parse_partitions(args.partitions)
    p = producer(args, args.txn_id)
    p.init_transactions()
    values = tagged(args.prefix, "stalled", partitions)
    p.begin_transaction()
    emit("written", values=send_all(p, args.topic, values))
    time.sleep(args.stall_s)
    emit("late_commit", **outcome_of(p.commit_transaction))
    emit("done")
    close_quietly(p)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic")
    ap.add_argument("--partitions", default="0")
    ap.add_argument("--txn-id", default="e2e-txn")
    ap.add_argument("--pattern", default="C")
    ap.add_argument("--per-partition", type=int, default=1)
    ap.add_argument("--prefix", default="v")
    ap.add_argument("--txn-timeout-ms", type=int, default=30000)
    ap.add_argument("--sleep-ms", type=int, default=0)
    ap.add_argument("--recover-after-s", type=float, default=0.0)
    ap.add_argument("--isolation", default="read_committed")
    ap.add_argument("--min-records", type=int, default=0)
    ap.add_argument("--stall-s", type=float, default=10.0)
    ap.add_argument("--deadline", type=float, default=60.0)
    ap.add_argument("--debug", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING,
                        stream=sys.stderr)
    cmds = {"txns": cmd_txns, "consume": cmd_consume, "fence": cmd_fence, "stall": cmd_stall}
    if args.cmd not in cmds:
        raise SystemExit("unknown subcommand %s" % args.cmd)
    try:
        rc = cmds[args.cmd](args)
    except Exception as exc:  # noqa: BLE001
        log("failed:", repr(exc))
        emit("fatal", **describe(exc))
        rc = 3
    sys.exit(rc)


if __name__ == "__main__":
    main()
