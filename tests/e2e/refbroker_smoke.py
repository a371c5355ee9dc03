"""Smoke test of refbroker with real clients (librdkafka via confluent-kafka, and kafka-python).

Usage: refbroker_smoke.py BOOTSTRAP TOPIC [confluent|kafka-python]

A transactional producer commits, aborts and commits transactions over both partitions of
TOPIC (two partitions), committing consumer offsets inside the last one; then a subscribing
read_committed consumer (a group) must see exactly the committed messages, once, in order per
partition, and a read_uncommitted consumer must see all of them. Exits 0 on success.
"""

import sys
import time
import uuid

BOOT, TOPIC = sys.argv[1], sys.argv[2]
CLIENT = sys.argv[3] if len(sys.argv) > 3 else "confluent"
PLAN = ["commit", "abort", "commit"]
PER_PARTITION = 3
RUN = uuid.uuid4().hex[:8]


def val(t, p, k):
    return "%s-t%d-p%d-m%d" % (RUN, t, p, k)


def expected():
    committed, everything = set(), set()
    for t, outcome in enumerate(PLAN):
        for p in (0, 1):
            for k in range(PER_PARTITION):
                v = val(t, p, k)
                everything.add(v)
                if outcome == "commit":
                    committed.add(v)
    return committed, everything


def produce_confluent(txn_id, group):
    from confluent_kafka import Producer, TopicPartition, Consumer

    p = Producer({"bootstrap.servers": BOOT, "transactional.id": txn_id,
                  "transaction.timeout.ms": 10000, "message.timeout.ms": 10000})
    p.init_transactions(30)
    for t, outcome in enumerate(PLAN):
        p.begin_transaction()
        for part in (0, 1):
            for k in range(PER_PARTITION):
                p.produce(TOPIC, value=val(t, part, k).encode(), partition=part)
        if t == len(PLAN) - 1:
            c = Consumer({"bootstrap.servers": BOOT, "group.id": group})
            p.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 42)],
                                          c.consumer_group_metadata(), 30)
            c.close()
        if outcome == "commit":
            p.commit_transaction(30)
        else:
            p.flush(30)  # abort_transaction purges unsent messages; make them reach the log
            p.abort_transaction(30)
    p.flush(10)


def produce_kafka_python(txn_id, group):
    from kafka import KafkaProducer
    from kafka.structs import TopicPartition, OffsetAndMetadata

    p = KafkaProducer(bootstrap_servers=BOOT, transactional_id=txn_id,
                      transaction_timeout_ms=10000)
    p.init_transactions()
    for t, outcome in enumerate(PLAN):
        p.begin_transaction()
        for part in (0, 1):
            for k in range(PER_PARTITION):
                p.send(TOPIC, value=val(t, part, k).encode(), partition=part)
        if t == len(PLAN) - 1:
            p.send_offsets_to_transaction({TopicPartition(TOPIC, 0): OffsetAndMetadata(42, "", -1)},
                                          group)
        if outcome == "commit":
            p.commit_transaction()
        else:
            p.flush()  # make the aborted messages reach the log
            p.abort_transaction()
    p.close()


def consume_confluent(isolation, group, want):
    from confluent_kafka import Consumer, TopicPartition
    conf = {"bootstrap.servers": BOOT, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "isolation.level": isolation}
    c = Consumer(conf)
    c.subscribe([TOPIC])
    got, deadline = [], time.time() + 40
    while time.time() < deadline and len(got) < want:
        m = c.poll(0.5)
        if m is None or m.error():
            if m is not None:
                print("consumer error:", m.error(), file=sys.stderr)
            continue
        if m.value().decode().startswith(RUN):
            got.append((m.partition(), m.value().decode()))
    c.close()
    return got


def committed_offset_confluent(group):
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": BOOT, "group.id": group})
    off = c.committed([TopicPartition(TOPIC, 0)], timeout=20)[0].offset
    c.close()
    return off


def consume_kafka_python(isolation, group, want):
    from kafka import KafkaConsumer
    c = KafkaConsumer(TOPIC, bootstrap_servers=BOOT, group_id=group,
                      auto_offset_reset="earliest", enable_auto_commit=False,
                      isolation_level=isolation)
    got, deadline = [], time.time() + 40
    while time.time() < deadline and len(got) < want:
        for tp, msgs in c.poll(timeout_ms=500).items():
            for m in msgs:
                if m.value.decode().startswith(RUN):
                    got.append((tp.partition, m.value.decode()))
    c.close()
    return got


def committed_offset_kafka_python(group):
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition
    c = KafkaConsumer(bootstrap_servers=BOOT, group_id=group, enable_auto_commit=False)
    off = c.committed(TopicPartition(TOPIC, 0))
    c.close()
    return off


def main():
    run = RUN
    txn_id, group = "smoke-txn-" + run, "smoke-group-" + run
    committed, everything = expected()
    if CLIENT == "confluent":
        produce, consume, offset = produce_confluent, consume_confluent, committed_offset_confluent
    else:
        produce, consume, offset = (produce_kafka_python, consume_kafka_python,
                                    committed_offset_kafka_python)
    produce(txn_id, group)
    print("produced", file=sys.stderr)
    rc = consume("read_committed", "rc-" + run, len(committed))
    ru = consume("read_uncommitted", "ru-" + run, len(everything))
    ok = True
    rc_values = [v for _, v in rc]
    if sorted(rc_values) != sorted(committed) or len(rc_values) != len(set(rc_values)):
        print("read_committed saw", sorted(rc_values), "want", sorted(committed), file=sys.stderr)
        ok = False
    for part in (0, 1):
        seq = [v for p, v in rc if p == part]
        order = [val(t, part, k) for t, o in enumerate(PLAN) if o == "commit"
                 for k in range(PER_PARTITION)]
        if seq != order:
            print("partition", part, "out of order:", seq, file=sys.stderr)
            ok = False
    if set(v for _, v in ru) != everything:
        print("read_uncommitted saw", len(ru), "want", len(everything), file=sys.stderr)
        ok = False
    off = offset(group)
    if off != 42:
        print("committed offset", off, "want 42", file=sys.stderr)
        ok = False
    print("OK" if ok else "FAILED", CLIENT, "committed:", len(rc_values), "all:", len(ru))
    sys.exit(0 if ok else 1)


main()
