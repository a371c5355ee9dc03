"""End-to-end client programs on librdkafka (the confluent-kafka package).

Usage: python lr.py SUBCOMMAND [options]; every subcommand prints JSON event lines (see
common.py). Subcommands:

  txns       a transactional producer running a pattern of commits and aborts
  consume    an assign()-based reader of given partitions (read_committed or read_uncommitted)
  seed       a plain idempotent producer writing input records
  transform  consume-transform-produce with send_offsets_to_transaction (group subscribe)
  committed  the committed offsets of a consumer group
  fence      zombie fencing: a second producer with the same transactional.id fences the first
  stall      a transaction that is begun, written to, then left idle past its timeout
  metadata   the leader of every partition of a topic

Exit status 0 means the program ran to its end; the Rust side decides whether the history
it printed is correct.
"""

import argparse
import sys
import time

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
    OFFSET_BEGINNING,
)

from common import Deadline, emit, log, parse_partitions, parse_pattern, tagged, txn_values

DEBUG = None


def base_conf(args):
    conf = {
        "bootstrap.servers": args.bootstrap,
        "socket.timeout.ms": 10000,
        "reconnect.backoff.ms": 100,
        "reconnect.backoff.max.ms": 1000,
        "topic.metadata.refresh.interval.ms": 2000,
        "broker.address.family": "v4",
    }
    # Security settings (security.protocol, sasl.*, ssl.*), --client-config KEY=VALUE each.
    for kv in args.client_config or []:
        key, _, value = kv.partition("=")
        conf[key] = value
    if DEBUG:
        conf["debug"] = DEBUG
    return conf


def txn_producer_conf(args, txn_id):
    conf = base_conf(args)
    conf.update(
        {
            "transactional.id": txn_id,
            "enable.idempotence": True,
            "acks": "all",
            "transaction.timeout.ms": args.txn_timeout_ms,
            # librdkafka refuses message.timeout.ms > transaction.timeout.ms.
            "message.timeout.ms": min(args.txn_timeout_ms, args.message_timeout_ms),
            # ... and socket.timeout.ms > transaction.timeout.ms + 100.
            "socket.timeout.ms": min(10000, args.txn_timeout_ms),
            "linger.ms": 5,
            "retry.backoff.ms": 100,
        }
    )
    return conf


def err_of(exc):
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def describe(exc):
    err = err_of(exc)
    if err is None:
        return {"error": repr(exc), "retriable": False, "abortable": False, "fatal": True}
    return {
        "error": err.name(),
        "message": err.str(),
        "retriable": bool(err.retriable()),
        "abortable": bool(err.txn_requires_abort()),
        "fatal": bool(err.fatal()),
    }


class Deliveries:
    """Delivery reports keyed by value."""

    def __init__(self):
        self.ok = {}
        self.failed = {}

    def rows(self, values):
        """[partition, value, offset] of each (partition, value); offset -1 if not delivered."""
        return [[p, v, self.ok.get(v, (None, -1))[1]] for p, v in values]

    def callback(self, err, msg):
        try:
            value = msg.value().decode()
        except Exception as exc:  # noqa: BLE001 - a callback must not raise into librdkafka
            log("delivery report without a value:", repr(exc), err)
            return
        if err is None:
            self.ok[value] = (msg.partition(), msg.offset())
        else:
            self.failed[value] = err.name()


def produce_one(producer, topic, partition, value, deliveries, deadline):
    while True:
        try:
            producer.produce(topic, value=value.encode(), partition=partition,
                             on_delivery=deliveries.callback)
            return
        except BufferError:
            if deadline.expired():
                raise
            producer.poll(0.1)


def write_txn(producer, topic, values, deliveries, deadline, op_timeout):
    """Begins a transaction, produces each (partition, value) of `values` and flushes: their
    rows as delivered by then (Deliveries.rows)."""
    producer.begin_transaction()
    for p, v in values:
        produce_one(producer, topic, p, v, deliveries, deadline)
    producer.flush(op_timeout)
    return deliveries.rows(values)


def committed(producer, topic, values, deadline, op_timeout):
    """One transaction writing `values` (write_txn), committed: their rows (Deliveries.rows)."""
    deliveries = Deliveries()
    write_txn(producer, topic, values, deliveries, deadline, op_timeout)
    producer.commit_transaction(op_timeout)
    return deliveries.rows(values)


def outcome_of(fn):
    """{"ok": True} if `fn()` returns, else {"ok": False} with the KafkaException described."""
    try:
        fn()
        return {"ok": True}
    except KafkaException as exc:
        return dict(ok=False, **describe(exc))


def initialized_producer(args, what, deadline, op_timeout):
    """A transactional producer of args.txn_id after init_transactions (retried as `what`)."""
    producer = Producer(txn_producer_conf(args, args.txn_id))
    with_retries(what, lambda: producer.init_transactions(op_timeout), deadline)
    return producer


def with_retries(what, fn, deadline):
    """Calls a transactional API, retrying retriable errors until the deadline."""
    while True:
        try:
            return fn()
        except KafkaException as exc:
            d = describe(exc)
            if d["retriable"] and not deadline.expired():
                log(what, "retriable error, retrying:", d)
                time.sleep(0.2)
                continue
            raise


def cmd_txns(args):
    partitions = parse_partitions(args.partitions)
    deadline = Deadline(args.deadline)
    op_timeout = 10
    producer = initialized_producer(args, "init", deadline, op_timeout)
    emit("init", txn_id=args.txn_id)
    for txn, action in enumerate(parse_pattern(args.pattern)):
        deliveries = Deliveries()
        values = txn_values(args.prefix, txn, partitions, args.per_partition)
        with_retries("begin", producer.begin_transaction, deadline)
        outcome = None
        try:
            for p, v in values:
                produce_one(producer, args.topic, p, v, deliveries, deadline)
            emit("produced", txn=txn, values=[[p, v] for p, v in values])
            remaining = producer.flush(op_timeout)
            if remaining:
                log("flush left", remaining, "messages")
            if action == "commit":
                with_retries("commit", lambda: producer.commit_transaction(op_timeout), deadline)
                outcome = "commit"
            else:
                with_retries("abort", lambda: producer.abort_transaction(op_timeout), deadline)
                outcome = "abort"
        except KafkaException as exc:
            d = describe(exc)
            log("txn", txn, "failed:", d)
            if d["abortable"]:
                with_retries("abort", lambda: producer.abort_transaction(op_timeout), deadline)
                outcome = "abort"
            else:
                emit("ambiguous", txn=txn, values=[[p, v] for p, v in values], **d)
                emit("fatal", txn=txn, **d)
                return 3
        producer.poll(0)
        record = deliveries.rows(values)
        emit(outcome, txn=txn, values=record, undelivered=sorted(deliveries.failed))
        if args.sleep_ms:
            time.sleep(args.sleep_ms / 1000.0)
        if deadline.expired():
            emit("deadline", txn=txn)
            return 4
    emit("done")
    return 0


def reader(args, isolation, group):
    conf = base_conf(args)
    conf.update(
        {
            "group.id": group,
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
        }
    )
    return Consumer(conf)


def cmd_consume(args):
    partitions = parse_partitions(args.partitions)
    deadline = Deadline(args.deadline)
    consumer = reader(args, args.isolation, args.group or "e2e-reader-%d" % time.monotonic_ns())
    consumer.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in partitions])
    eof = {p: False for p in partitions}
    count = 0
    timed_out = False
    while True:
        if all(eof.values()) and count >= args.min_records:
            break
        if deadline.expired():
            timed_out = True
            break
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                eof[msg.partition()] = True
            else:
                emit("consumer_error", error=msg.error().name(), message=msg.error().str())
            continue
        eof[msg.partition()] = False
        count += 1
        emit("record", partition=msg.partition(), offset=msg.offset(), value=msg.value().decode())
    emit("done", count=count, eof=all(eof.values()), timed_out=timed_out)
    consumer.close()
    return 0


def cmd_seed(args):
    partitions = parse_partitions(args.partitions)
    conf = base_conf(args)
    conf.update({"enable.idempotence": True, "acks": "all", "linger.ms": 5})
    producer = Producer(conf)
    deliveries = Deliveries()
    deadline = Deadline(args.deadline)
    values = []
    for p in partitions:
        for k in range(args.per_partition):
            v = "%s-in-p%d-m%d" % (args.prefix, p, k)
            values.append((p, v))
            produce_one(producer, args.topic, p, v, deliveries, deadline)
    remaining = producer.flush(args.deadline)
    record = deliveries.rows(values)
    emit("seeded", values=record, undelivered=sorted(set(deliveries.failed) | (
        {v for _, v in values if v not in deliveries.ok})), remaining=remaining)
    return 0 if remaining == 0 and not deliveries.failed else 3


def cmd_transform(args):
    partitions = parse_partitions(args.partitions)
    deadline = Deadline(args.deadline)
    conf = base_conf(args)
    conf.update(
        {
            "group.id": args.group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
            "max.poll.interval.ms": 20000,
            "fetch.wait.max.ms": 100,
        }
    )
    consumer = Consumer(conf)
    op_timeout = 10
    producer = initialized_producer(args, "init", deadline, op_timeout)
    emit("init", txn_id=args.txn_id)
    tps = [TopicPartition(args.input, p) for p in partitions]
    ends = {}
    for tp in tps:
        _, high = consumer.get_watermark_offsets(tp, timeout=op_timeout, cached=False)
        ends[tp.partition] = high
    emit("input_ends", ends=[[p, ends[p]] for p in partitions])

    def on_assign(c, assigned):
        emit("assigned", partitions=[tp.partition for tp in assigned])

    def on_revoke(c, revoked):
        emit("revoked", partitions=[tp.partition for tp in revoked])

    consumer.subscribe([args.input], on_assign=on_assign, on_revoke=on_revoke)

    def finished():
        committed = consumer.committed(tps, timeout=op_timeout)
        return all(tp.offset >= ends[tp.partition] for tp in committed), committed

    def rewind():
        assignment = consumer.assignment()
        if not assignment:
            return
        for tp in consumer.committed(assignment, timeout=op_timeout):
            offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            consumer.seek(TopicPartition(tp.topic, tp.partition, offset))

    txn = 0
    last_check = 0.0
    while True:
        if deadline.expired():
            emit("deadline")
            return 4
        msgs = consumer.consume(num_messages=args.batch, timeout=0.5)
        msgs = [m for m in msgs if not m.error()]
        if not msgs:
            if time.monotonic() - last_check > 1.0:
                last_check = time.monotonic()
                done, committed = finished()
                if done:
                    emit("done", committed=[[tp.partition, tp.offset] for tp in committed])
                    consumer.close()
                    return 0
            continue
        inputs = [[m.partition(), m.offset(), m.value().decode()] for m in msgs]
        outputs = [[p, "out-" + v] for p, _, v in inputs]
        deliveries = Deliveries()
        try:
            producer.begin_transaction()
            emit("begin", txn=txn, inputs=inputs)
            for p, v in outputs:
                # The output partition is the input partition: the order per key is kept.
                produce_one(producer, args.output, p, v, deliveries, deadline)
            producer.flush(op_timeout)
            emit("txn_produced", txn=txn, inputs=inputs, outputs=outputs)
            if args.sleep_in_txn_ms:
                time.sleep(args.sleep_in_txn_ms / 1000.0)
            positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
            producer.send_offsets_to_transaction(
                positions, consumer.consumer_group_metadata(), op_timeout)
            with_retries("commit", lambda: producer.commit_transaction(op_timeout), deadline)
            emit("commit", txn=txn, inputs=inputs, outputs=outputs,
                 offsets=[[tp.partition, tp.offset] for tp in positions])
        except KafkaException as exc:
            d = describe(exc)
            log("transform txn", txn, "failed:", d)
            if not d["abortable"]:
                emit("fatal", txn=txn, **d)
                return 3
            with_retries("abort", lambda: producer.abort_transaction(op_timeout), deadline)
            emit("abort", txn=txn, inputs=inputs, **d)
            rewind()
        txn += 1


def cmd_committed(args):
    partitions = parse_partitions(args.partitions)
    consumer = reader(args, "read_committed", args.group)
    tps = [TopicPartition(args.topic, p) for p in partitions]
    committed = consumer.committed(tps, timeout=10)
    emit("committed", offsets=[[tp.partition, tp.offset] for tp in committed])
    consumer.close()
    return 0


def cmd_fence(args):
    partitions = parse_partitions(args.partitions)
    deadline = Deadline(args.deadline)
    op_timeout = 10
    a = initialized_producer(args, "a.init", deadline, op_timeout)
    # A commits one transaction normally: visible.
    ok_values = tagged(args.prefix, "a-ok", partitions)
    emit("commit", who="a", values=committed(a, args.topic, ok_values, deadline, op_timeout))
    # A begins a second transaction and writes to all but the last partition.
    da = Deliveries()
    pre_values = tagged(args.prefix, "a-pre", partitions[:-1])
    emit("a_pre_written", values=write_txn(a, args.topic, pre_values, da, deadline, op_timeout))
    # B with the same transactional.id fences A.
    b = initialized_producer(args, "b.init", deadline, op_timeout)
    emit("b_init")
    # A, now a zombie, keeps writing, also to a partition not yet in its transaction.
    post_values = tagged(args.prefix, "a-post", partitions)
    produce_errors = []
    for p, v in post_values:
        try:
            produce_one(a, args.topic, p, v, da, deadline)
        except KafkaException as exc:
            produce_errors.append(describe(exc))
    try:
        a.flush(op_timeout)
    except Exception as exc:  # noqa: BLE001 - the zombie's flush may raise its fatal error
        produce_errors.append({"error": repr(exc)})
    a_commit = outcome_of(lambda: a.commit_transaction(op_timeout))
    a.poll(0)
    emit("a_post", values=[[p, v] for p, v in post_values],
         delivered=sorted(v for _, v in post_values if v in da.ok),
         produce_errors=produce_errors, commit=a_commit)
    # B commits: visible.
    b_values = tagged(args.prefix, "b", partitions)
    emit("commit", who="b", values=committed(b, args.topic, b_values, deadline, op_timeout))
    emit("done")
    return 0


def cmd_stall(args):
    partitions = parse_partitions(args.partitions)
    deadline = Deadline(args.deadline)
    op_timeout = 10
    producer = initialized_producer(args, "init", deadline, op_timeout)
    values = tagged(args.prefix, "stalled", partitions)
    rows = write_txn(producer, args.topic, values, Deliveries(), deadline, op_timeout)
    emit("written", values=rows)
    time.sleep(args.stall_s)
    emit("late_commit", **outcome_of(lambda: producer.commit_transaction(op_timeout)))
    emit("done")
    return 0


def cmd_metadata(args):
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(base_conf(args))
    md = admin.list_topics(topic=args.topic, timeout=10)
    t = md.topics[args.topic]
    if t.error is not None:
        emit("fatal", error=t.error.name(), message=t.error.str())
        return 3
    emit("metadata", brokers=sorted(md.brokers), leaders=sorted(
        [p.id, p.leader] for p in t.partitions.values()))
    return 0


def main():
    global DEBUG
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic")
    ap.add_argument("--input")
    ap.add_argument("--output")
    ap.add_argument("--partitions", default="0")
    ap.add_argument("--txn-id", default="e2e-txn")
    ap.add_argument("--group", default=None)
    ap.add_argument("--pattern", default="C")
    ap.add_argument("--per-partition", type=int, default=1)
    ap.add_argument("--prefix", default="v")
    ap.add_argument("--txn-timeout-ms", type=int, default=30000)
    ap.add_argument("--message-timeout-ms", type=int, default=30000)
    ap.add_argument("--sleep-ms", type=int, default=0)
    ap.add_argument("--sleep-in-txn-ms", type=int, default=0)
    ap.add_argument("--batch", type=int, default=5)
    ap.add_argument("--isolation", default="read_committed")
    ap.add_argument("--min-records", type=int, default=0)
    ap.add_argument("--stall-s", type=float, default=10.0)
    ap.add_argument("--deadline", type=float, default=60.0)
    ap.add_argument("--debug", default=None)
    ap.add_argument("--client-config", action="append", default=[])
    args = ap.parse_args()
    DEBUG = args.debug
    cmds = {
        "txns": cmd_txns,
        "consume": cmd_consume,
        "seed": cmd_seed,
        "transform": cmd_transform,
        "committed": cmd_committed,
        "fence": cmd_fence,
        "stall": cmd_stall,
        "metadata": cmd_metadata,
    }
    if args.cmd not in cmds:
        raise SystemExit("unknown subcommand %s" % args.cmd)
    try:
        rc = cmds[args.cmd](args)
    except KafkaException as exc:
        emit("fatal", **describe(exc))
        rc = 3
    sys.exit(rc)


if __name__ == "__main__":
    main()
