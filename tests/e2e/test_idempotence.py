"""Idempotent producers: InitProducerId and per-partition sequence checks."""

from __future__ import annotations

from collections import defaultdict

from conftest import (
    assert_delivered,
    ck_producer,
    consume_partition,
    create_topic,
    produce_sync,
    unique_topic,
)
import kwire


def test_confluent_idempotent_many_messages_exactly_once_in_order(broker):
    parts = 4
    n = 4000
    topic = create_topic(broker, unique_topic("idem"), partitions=parts)
    p = ck_producer(broker, **{
        "enable.idempotence": True,
        "acks": "all",
        "max.in.flight.requests.per.connection": 5,
        "linger.ms": 2,
        "batch.num.messages": 50,  # many small batches in flight at once
        "compression.type": "lz4",
    })
    msgs = [{"key": f"k{i % 97}".encode(), "value": f"{i}".encode(), "partition": i % parts}
            for i in range(n)]
    reports = produce_sync(p, topic, msgs, timeout=120)
    assert_delivered(reports)
    for part in range(parts):
        want = [m["value"] for m in msgs if m["partition"] == part]
        got = consume_partition(broker, topic, part, expected=len(want), timeout=60)
        values = [m.value() for m in got]
        assert len(values) == len(want), f"p{part}: {len(values)} != {len(want)}"
        assert values == want, f"p{part}: duplicates or reordering"
        assert [m.offset() for m in got] == list(range(len(want)))


def test_idempotent_producer_partitions_chosen_by_key(broker):
    topic = create_topic(broker, unique_topic("idemk"), partitions=3)
    p = ck_producer(broker, **{"enable.idempotence": True})
    msgs = [{"key": f"user-{i % 10}".encode(), "value": f"{i}".encode()} for i in range(600)]
    reports = produce_sync(p, topic, msgs)
    assert_delivered(reports)
    sent_by_part = defaultdict(list)
    for (err, m), sent in zip(reports, msgs):
        sent_by_part[m.partition()].append(sent["value"])
    for part, want in sent_by_part.items():
        got = consume_partition(broker, topic, part, expected=len(want))
        assert [m.value() for m in got] == want


def test_raw_sequence_checks(broker):
    topic = create_topic(broker, unique_topic("seq"))
    with kwire.Conn.to_leader(broker, topic, 0) as c:
        err, pid, epoch = kwire.init_producer_id_v1(c)
        assert err == 0 and pid >= 0 and epoch >= 0, (err, pid, epoch)

        def batch(seq, n=2, tag=b""):
            return kwire.record_batch([(None, tag + b"%d" % i) for i in range(n)],
                                      producer_id=pid, producer_epoch=epoch, base_sequence=seq)

        assert kwire.produce_v3(c, topic, 0, batch(0, tag=b"a")) == (0, 0)
        # retry of the same batch: deduplicated, acknowledged with the original offset
        code, base = kwire.produce_v3(c, topic, 0, batch(0, tag=b"a"))
        assert code in (kwire.ERR_NONE, kwire.ERR_DUPLICATE_SEQUENCE), code
        if code == kwire.ERR_NONE:
            assert base == 0
        assert kwire.produce_v3(c, topic, 0, batch(2, tag=b"b")) == (0, 2)
        # a gap in the sequence is refused
        code, _ = kwire.produce_v3(c, topic, 0, batch(10, tag=b"c"))
        assert code == kwire.ERR_OUT_OF_ORDER_SEQUENCE, code
        # the next expected one is still accepted
        assert kwire.produce_v3(c, topic, 0, batch(4, tag=b"d")) == (0, 4)
        # a stale epoch is refused
        if epoch > 0:
            stale = kwire.record_batch([(None, b"x")], producer_id=pid, producer_epoch=epoch - 1,
                                       base_sequence=6)
            code, _ = kwire.produce_v3(c, topic, 0, stale)
            assert code == kwire.ERR_INVALID_PRODUCER_EPOCH, code

        # a second producer id gets its own sequence space
        err2, pid2, epoch2 = kwire.init_producer_id_v1(c)
        assert err2 == 0 and pid2 != pid
        b2 = kwire.record_batch([(None, b"other")], producer_id=pid2, producer_epoch=epoch2, base_sequence=0)
        assert kwire.produce_v3(c, topic, 0, b2) == (0, 6)

    got = consume_partition(broker, topic, 0, expected=7)
    assert [m.value() for m in got] == [b"a0", b"a1", b"b0", b"b1", b"d0", b"d1", b"other"]
