"""Real Kafka clients against `seglog serve` (driven by tools/tests/serve_clients.rs).

    python3 clients.py produce HOST:PORT    # writes, checks every acknowledgement
    python3 clients.py consume HOST:PORT    # reads back (after a restart), checks every record

kafka-python (pure Python) and confluent-kafka (librdkafka) each produce plain, compressed with
every codec, and idempotent; both consume from the beginning, from a time, and read committed.
Exits non-zero with a message on the first mismatch.
"""
import os
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition as CTP
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
N = 500  # records per topic
# The time the timed records start at: far from the others, so a lookup by time is exact.
T0 = 1_700_000_000_000


def fail(msg):
    print("FAIL:", msg, file=sys.stderr)
    sys.exit(1)


def value(topic, i):
    return ("%s-%d-" % (topic, i)).encode() + b"x" * (i % 97)


def produce(addr):
    # kafka-python: a 3-partition topic made by CreateTopics, idempotent, gzip; acks=all.
    admin = KafkaAdminClient(bootstrap_servers=addr)
    r = admin.create_topics([NewTopic("kp-three", 3, 1)])
    admin.close()
    p = KafkaProducer(bootstrap_servers=addr, acks="all", enable_idempotence=True, compression_type="gzip")
    futs = [p.send("kp-three", key=b"%d" % i, value=value("kp-three", i), partition=i % 3) for i in range(N)]
    p.flush()
    offsets = [f.get(timeout=10).offset for f in futs]
    for i, off in enumerate(offsets):
        if off != i // 3:
            fail("kafka-python: record %d got offset %d, expected %d" % (i, off, i // 3))
    # kafka-python, plain, acks=1, explicit timestamps (for the lookup by time).
    p = KafkaProducer(bootstrap_servers=addr, acks=1)
    for i in range(N):
        p.send("kp-timed", value=value("kp-timed", i), timestamp_ms=T0 + i * 1000)
    p.flush()
    p.close()
    # confluent-kafka: one topic per codec, idempotent (librdkafka's InitProducerId and sequences).
    for codec in CODECS:
        topic = "ck-" + codec
        errors = []
        p = Producer({"bootstrap.servers": addr, "enable.idempotence": True, "compression.type": codec,
                      "linger.ms": 2, "batch.num.messages": 64})
        for i in range(N):
            p.produce(topic, key=b"%d" % i, value=value(topic, i),
                      on_delivery=lambda e, m: errors.append(e) if e else None)
        left = p.flush(30)
        if left or errors:
            fail("confluent-kafka %s: %d undelivered, errors %s" % (codec, left, errors[:3]))
    # Transactions, confluent-kafka: committed, aborted (sent, then aborted), committed, and one
    # left open when this process ends: the restart must keep it open until the next
    # init_transactions with the same id aborts it.
    # A timeout of 5 minutes: only the next init_transactions (after the restart) aborts the
    # transaction left open, not the coordinator's timeout.
    p = Producer({"bootstrap.servers": addr, "transactional.id": "tx-ck", "transaction.timeout.ms": 300000})
    p.init_transactions(30)
    for first, commit in [(0, True), (100, False), (200, True), (300, None)]:
        p.begin_transaction()
        for i in range(first, first + 100 if commit is not None else first + 50):
            p.produce("ck-txn", value=value("ck-txn", i))
        p.flush(30)
        if commit:
            p.commit_transaction(30)
        elif commit is False:
            p.abort_transaction(30)
    # Transactions, kafka-python: one committed, one aborted after its records were sent.
    t = KafkaProducer(bootstrap_servers=addr, transactional_id="tx-kp")
    t.init_transactions()
    for first, commit in [(0, True), (100, False)]:
        t.begin_transaction()
        for i in range(first, first + 100):
            t.send("kp-txn", value=value("kp-txn", i))
        t.flush()
        t.commit_transaction() if commit else t.abort_transaction()
    t.close()
    # acks=0: no answer is sent; the records still land.
    p = Producer({"bootstrap.servers": addr, "acks": 0})
    for i in range(N):
        p.produce("ck-acks0", value=value("ck-acks0", i))
    p.flush(30)
    print("produced", flush=True)
    # Leave tx-ck's last transaction open: no abort on the way out.
    os._exit(0)


def check_consumed(who, topic, got, first=0):
    want = [value(topic, i) for i in range(first, N)]
    if got != want:
        bad = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        fail("%s %s: %d records, expected %d; first difference at %d" % (who, topic, len(got), len(want), bad))


def ck_consume(addr, topic, start=0, isolation="read_committed", expect=None, high=N):
    c = Consumer({"bootstrap.servers": addr, "group.id": "unused", "enable.auto.commit": False,
                  "isolation.level": isolation})
    c.assign([CTP(topic, 0, start)])
    got, deadline = [], time.time() + 30
    expect = N - start if expect is None else expect
    while len(got) < expect and time.time() < deadline:
        for m in c.consume(500, timeout=1):
            if m.error():
                fail("confluent-kafka %s: %s" % (topic, m.error()))
            got.append(m.value())
    lo, hi = c.get_watermark_offsets(CTP(topic, 0), timeout=10)
    c.close()
    if (lo, hi) != (0, high):
        fail("confluent-kafka %s: watermarks %d..%d, expected 0..%d" % (topic, lo, hi, high))
    return got


def consume(addr):
    for codec in CODECS + ["acks0"]:
        topic = "ck-" + codec
        check_consumed("confluent-kafka", topic, ck_consume(addr, topic))
    check_consumed("confluent-kafka from offset 123", "ck-zstd", ck_consume(addr, "ck-zstd", start=123), first=123)
    check_consumed("confluent-kafka read_uncommitted", "ck-lz4", ck_consume(addr, "ck-lz4", isolation="read_uncommitted"))

    # Transactions. The open one is aborted by the next init_transactions of its id (after the
    # restart: the coordinator's state came back from __transaction_state).
    p = Producer({"bootstrap.servers": addr, "transactional.id": "tx-ck"})
    p.init_transactions(30)
    committed = [value("ck-txn", i) for i in list(range(0, 100)) + list(range(200, 300))]
    everything = [value("ck-txn", i) for i in range(350)]
    # 350 records and 4 markers (commit, abort, commit, the abort of the open one).
    got = ck_consume(addr, "ck-txn", expect=len(committed), high=354)
    if got != committed:
        fail("confluent-kafka read_committed ck-txn: %d records, expected %d" % (len(got), len(committed)))
    got = ck_consume(addr, "ck-txn", isolation="read_uncommitted", expect=len(everything), high=354)
    if got != everything:
        fail("confluent-kafka read_uncommitted ck-txn: %d records, expected %d" % (len(got), len(everything)))
    c = KafkaConsumer(bootstrap_servers=addr, group_id=None, auto_offset_reset="earliest",
                      isolation_level="read_committed", consumer_timeout_ms=5000)
    c.assign([TopicPartition("kp-txn", 0)])
    got = [m.value for m in c]
    c.close()
    if got != [value("kp-txn", i) for i in range(100)]:
        fail("kafka-python read_committed kp-txn: %d records, expected the 100 committed" % len(got))

    # kafka-python: read committed from the beginning of each partition of the 3-partition topic.
    c = KafkaConsumer(bootstrap_servers=addr, group_id=None, auto_offset_reset="earliest",
                      isolation_level="read_committed", consumer_timeout_ms=5000)
    parts = [TopicPartition("kp-three", i) for i in range(3)]
    c.assign(parts)
    got = {}
    for m in c:
        got.setdefault(m.partition, []).append((m.offset, m.value))
    for i in range(N):
        off, v = got.get(i % 3, [])[i // 3] if len(got.get(i % 3, [])) > i // 3 else (None, None)
        if (off, v) != (i // 3, value("kp-three", i)):
            fail("kafka-python kp-three: record %d read as %r at %r" % (i, v, off))
    ends = c.end_offsets(parts)
    if [ends[tp] for tp in parts] != [(N + 2 - i) // 3 for i in range(3)]:
        fail("kafka-python end offsets %s" % ends)
    # From a time: the first record at or after T0 + 250.5 s is number 251.
    tp = TopicPartition("kp-timed", 0)
    found = c.offsets_for_times({tp: T0 + 250_500})[tp]
    if found is None or found.offset != 251 or found.timestamp != T0 + 251_000:
        fail("kafka-python offsets_for_times: %s, expected offset 251" % (found,))
    late = c.offsets_for_times({tp: T0 + N * 1000})[tp]
    if late is not None:
        fail("kafka-python offsets_for_times past the last record: %s, expected None" % (late,))
    c.assign([tp])
    c.seek(tp, found.offset)
    vals = [m.value for m in c]
    check_consumed("kafka-python from a time", "kp-timed", vals, first=251)
    c.close()
    # DeleteTopics through kafka-python's admin client: the topic is gone from the listing.
    admin = KafkaAdminClient(bootstrap_servers=addr)
    admin.delete_topics(["kp-timed"])
    if "kp-timed" in admin.list_topics():
        fail("kafka-python: kp-timed still listed after delete_topics")
    admin.close()
    print("consumed")


if __name__ == "__main__":
    {"produce": produce, "consume": consume}[sys.argv[1]](sys.argv[2])
