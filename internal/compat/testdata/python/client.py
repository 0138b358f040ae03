"""A Python Kafka client program of `make compat` (internal/compat).

    python client.py --lib confluent|kafka-python produce BOOTSTRAP TOPIC COUNT KEYS
    python client.py --lib confluent|kafka-python consume BOOTSTRAP TOPIC GROUP EXPECT

produce: an acks=all producer (idempotent with confluent-kafka); record i
has key "k<i % KEYS>" and value "<key>-<i, 6 digits>"; each acknowledged
record is printed as "ACK <partition> <offset> <key> <value>", a failed one
as "ERR ..." on stderr; exit 0 only if all were acknowledged.

consume: a group member that handles (prints "REC <partition> <offset>
<key> <value>") and then commits what it handled (synchronously), until it
has handled EXPECT records, 90 s have passed, or no record came for 20 s
after the first; then it closes (leaving the group).

confluent-kafka is librdkafka: the same script runs on Debian's
python3-confluent-kafka (librdkafka 2.0.2) and on PyPI's wheel (a current
librdkafka). COMPAT_DEBUG=protocol passes librdkafka's debug contexts.
"""

import argparse
import os
import sys
import time


def value_of(keys, i):
    key = "k%d" % (i % keys)
    return key, "%s-%06d" % (key, i)


def confluent_produce(a):
    import confluent_kafka

    print("librdkafka %s, confluent-kafka %s" % (confluent_kafka.libversion()[0], confluent_kafka.version()[0]), file=sys.stderr)
    conf = {
        "bootstrap.servers": a.bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "client.id": "compat-confluent",
        # A fatal error (an idempotent producer the broker cannot serve)
        # is said once, on one line, before the calls below raise it.
        "error_cb": lambda err: print("ERR client: %s" % err, file=sys.stderr, flush=True),
    }
    if os.environ.get("COMPAT_DEBUG"):
        conf["debug"] = os.environ["COMPAT_DEBUG"]
    p = confluent_kafka.Producer(conf)
    failed = []

    def done(err, msg, key, value):
        # key and value come from the closure: a message failed by a fatal
        # error may not give its own back.
        if err is not None:
            failed.append(value)
            print("ERR %s %s %s" % (key, value, err), file=sys.stderr)
        else:
            print("ACK %d %d %s %s" % (msg.partition(), msg.offset(), key, value), flush=True)

    try:
        for i in range(a.count):
            key, value = value_of(a.keys, i)
            while True:
                try:
                    p.produce(a.topic, key=key.encode(), value=value.encode(),
                              on_delivery=lambda err, msg, k=key, v=value: done(err, msg, k, v))
                    break
                except BufferError:
                    p.poll(0.1)
            p.poll(0)
        left = p.flush(120)
    except Exception as e:  # a fatal error raised through poll or flush
        print("ERR producer stopped: %s: %s" % (type(e).__name__, e.__cause__ or e), file=sys.stderr)
        return 1
    if left:
        print("ERR %d records never acknowledged" % left, file=sys.stderr)
    return 0 if not failed and not left else 1


def confluent_consume(a):
    import confluent_kafka

    conf = {
        "bootstrap.servers": a.bootstrap,
        "group.id": a.group,
        "client.id": "compat-confluent",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    if os.environ.get("COMPAT_DEBUG"):
        conf["debug"] = os.environ["COMPAT_DEBUG"]
    c = confluent_kafka.Consumer(conf)
    c.subscribe([a.topic])
    n, start, last = 0, time.time(), None
    try:
        while n < a.expect and time.time() - start < 90 and (last is None or time.time() - last < 20):
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                print("consume error: %s" % msg.error(), file=sys.stderr)
                continue
            last = time.time()
            print("REC %d %d %s %s" % (msg.partition(), msg.offset(), msg.key().decode(), msg.value().decode()), flush=True)
            n += 1
            c.commit(message=msg, asynchronous=False)
    finally:
        c.close()
    return 0


def kafka_python_produce(a):
    import kafka

    print("kafka-python %s" % kafka.__version__, file=sys.stderr)
    p = kafka.KafkaProducer(bootstrap_servers=a.bootstrap.split(","), acks="all", retries=10, client_id="compat-kafka-python")
    futures = []
    for i in range(a.count):
        key, value = value_of(a.keys, i)
        futures.append((key, value, p.send(a.topic, key=key.encode(), value=value.encode())))
    failed = 0
    for key, value, f in futures:
        try:
            md = f.get(timeout=120)
        except Exception as e:  # the client's own error types
            failed += 1
            print("ERR %s %s %s" % (key, value, e), file=sys.stderr)
            continue
        print("ACK %d %d %s %s" % (md.partition, md.offset, key, value), flush=True)
    p.close()
    return 0 if failed == 0 else 1


def kafka_python_consume(a):
    import kafka

    c = kafka.KafkaConsumer(
        a.topic,
        bootstrap_servers=a.bootstrap.split(","),
        group_id=a.group,
        client_id="compat-kafka-python",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    n, start, last = 0, time.time(), None
    try:
        while n < a.expect and time.time() - start < 90 and (last is None or time.time() - last < 20):
            batches = c.poll(timeout_ms=500)
            for tp, msgs in batches.items():
                for m in msgs:
                    last = time.time()
                    print("REC %d %d %s %s" % (m.partition, m.offset, m.key.decode(), m.value.decode()), flush=True)
                    n += 1
            if batches:
                c.commit()
    finally:
        c.close()
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", choices=["confluent", "kafka-python"], required=True)
    sub = ap.add_subparsers(dest="mode", required=True)
    pr = sub.add_parser("produce")
    pr.add_argument("bootstrap")
    pr.add_argument("topic")
    pr.add_argument("count", type=int)
    pr.add_argument("keys", type=int)
    co = sub.add_parser("consume")
    co.add_argument("bootstrap")
    co.add_argument("topic")
    co.add_argument("group")
    co.add_argument("expect", type=int)
    a = ap.parse_args()
    fn = {
        ("confluent", "produce"): confluent_produce,
        ("confluent", "consume"): confluent_consume,
        ("kafka-python", "produce"): kafka_python_produce,
        ("kafka-python", "consume"): kafka_python_consume,
    }[(a.lib, a.mode)]
    sys.exit(fn(a))


if __name__ == "__main__":
    main()
