"""Transactions with real clients (KIP-98, KIP-447): what a committed or aborted transaction
looks like to read_committed and read_uncommitted consumers, consume-transform-produce with
send_offsets_to_transaction, fencing of a zombie producer, and the coordinator aborting a
transaction that outlives transaction.timeout.ms; with confluent-kafka (librdkafka), and
commit/abort with aiokafka and kafkajs."""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from conftest import (
    assert_delivered,
    ck_producer,
    consume_partition,
    create_topic,
    produce_sync,
    unique_topic,
)

T = 30


def txn_producer(broker, txn_id: str, **conf):
    p = ck_producer(broker, **{"transactional.id": txn_id, "linger.ms": 5, **conf})
    p.init_transactions(T)
    return p


def send(p, topic: str, values, partition: int = 0):
    for v in values:
        p.produce(topic, value=v, partition=partition)
    p.flush(T)


def values(msgs):
    return [m.value() for m in msgs]


def test_commit_is_visible_and_abort_is_not_under_read_committed(broker):
    topic = create_topic(broker, unique_topic("txn-vis"))
    p = txn_producer(broker, unique_topic("tid"))
    first = [f"c1-{i}".encode() for i in range(10)]
    aborted = [f"a-{i}".encode() for i in range(10)]
    last = [f"c2-{i}".encode() for i in range(5)]

    p.begin_transaction()
    send(p, topic, first)
    p.commit_transaction(T)
    p.begin_transaction()
    send(p, topic, aborted)
    p.abort_transaction(T)
    p.begin_transaction()
    send(p, topic, last)
    p.commit_transaction(T)

    committed = consume_partition(broker, topic, 0, expected=15,
                                  **{"isolation.level": "read_committed"})
    assert values(committed) == first + last
    everything = consume_partition(broker, topic, 0, expected=25,
                                   **{"isolation.level": "read_uncommitted"})
    assert values(everything) == first + aborted + last
    # each transaction ends with a marker, which takes an offset and is never delivered
    assert [m.offset() for m in committed][-1] == 10 + 1 + 10 + 1 + 4


def test_read_committed_stops_at_an_open_transaction(broker):
    topic = create_topic(broker, unique_topic("txn-lso"))
    before = [b"before"]
    assert_delivered(produce_sync(ck_producer(broker, acks="all"), topic,
                                  [{"value": v, "partition": 0} for v in before]))
    p = txn_producer(broker, unique_topic("tid"))
    p.begin_transaction()
    send(p, topic, [b"open-1", b"open-2"])
    # the last stable offset is held at the open transaction's first offset
    got = consume_partition(broker, topic, 0, expected=1, timeout=10,
                            **{"isolation.level": "read_committed"})
    assert values(got) == before
    p.commit_transaction(T)
    got = consume_partition(broker, topic, 0, expected=3,
                            **{"isolation.level": "read_committed"})
    assert values(got) == before + [b"open-1", b"open-2"]


def test_a_zombie_producer_is_fenced(broker):
    topic = create_topic(broker, unique_topic("txn-zombie"))
    tid = unique_topic("tid")
    zombie = txn_producer(broker, tid)
    zombie.begin_transaction()
    send(zombie, topic, [b"zombie"])
    # a new instance with the same transactional.id bumps the epoch and aborts the open one
    fresh = txn_producer(broker, tid)
    fresh.begin_transaction()
    send(fresh, topic, [b"fresh"])
    fresh.commit_transaction(T)
    with pytest.raises(KafkaException) as e:
        zombie.commit_transaction(T)
    err = e.value.args[0]
    assert err.fatal() or err.txn_requires_abort(), err
    assert err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                          KafkaError.INVALID_PRODUCER_EPOCH), err
    got = consume_partition(broker, topic, 0, expected=1, **{"isolation.level": "read_committed"})
    assert values(got) == [b"fresh"]


def test_a_zombie_that_produces_after_being_fenced_fails_fatally(broker):
    """librdkafka's test 0103 (produce after fence): the zombie's next records reach a
    partition whose transaction the new instance's init aborted, so the leader verifies them
    with the coordinator (KIP-890), which says PRODUCER_FENCED. A Produce answers that as
    INVALID_PRODUCER_EPOCH, as Kafka's leader does: librdkafka then raises the fatal _FENCED,
    where PRODUCER_FENCED on a Produce had only made the transaction abortable."""
    topic = create_topic(broker, unique_topic("txn-zombie2"))
    tid = unique_topic("tid")
    zombie = txn_producer(broker, tid)
    zombie.begin_transaction()
    send(zombie, topic, [b"zombie-1"])
    txn_producer(broker, tid)
    with pytest.raises(KafkaException) as e:  # at the flush or at the commit
        for v in (b"zombie-2", b"zombie-3"):
            zombie.produce(topic, value=v, partition=0)
        zombie.flush(T)
        zombie.commit_transaction(T)
    err = e.value.args[0]
    assert err.fatal(), err
    assert err.code() == KafkaError._FENCED, err
    got = consume_partition(broker, topic, 0, timeout=5, **{"isolation.level": "read_committed"})
    assert got == []


def test_an_expired_transaction_is_aborted_by_the_coordinator(broker):
    topic = create_topic(broker, unique_topic("txn-timeout"))
    p = txn_producer(broker, unique_topic("tid"),
                     **{"transaction.timeout.ms": 3000, "message.timeout.ms": 3000})
    p.begin_transaction()
    send(p, topic, [b"never-committed"])
    # the coordinator aborts it after transaction.timeout.ms; its abort marker moves the LSO
    deadline = time.monotonic() + 40
    while True:
        got = consume_partition(broker, topic, 0, timeout=5,
                                **{"isolation.level": "read_committed"})
        assert got == []
        lo, hi = stable_end(broker, topic)
        if hi >= 2:  # the data and the abort marker
            break
        assert time.monotonic() < deadline, f"not aborted: committed end {hi}"
        time.sleep(0.5)
    with pytest.raises(KafkaException):
        p.commit_transaction(T)


def stable_end(broker, topic: str):
    """(low, high) watermarks as a read_committed consumer sees them (high = LSO)."""
    from conftest import ck_consumer

    c = ck_consumer(broker, **{"isolation.level": "read_committed"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        c.close()


def test_consume_transform_produce_is_exactly_once(broker):
    from confluent_kafka import Consumer

    src = create_topic(broker, unique_topic("ctp-in"), partitions=2)
    dst = create_topic(broker, unique_topic("ctp-out"), partitions=2)
    n = 200
    inputs = [{"value": f"in-{i}".encode(), "partition": i % 2} for i in range(n)]
    assert_delivered(produce_sync(ck_producer(broker, acks="all"), src, inputs))
    group = unique_topic("ctp-group")

    def run(limit: int | None, abort_last: bool):
        """Process input in transactions of up to 25 records; stop after `limit` records
        (the last transaction aborted if `abort_last`)."""
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                      "enable.auto.commit": False, "auto.offset.reset": "earliest",
                      "isolation.level": "read_committed"})
        p = txn_producer(broker, f"{group}-tid")
        c.subscribe([src])
        done = 0
        idle_since = time.monotonic()
        try:
            while limit is None or done < limit:
                msgs = c.consume(25, 1.0)
                msgs = [m for m in msgs if m.error() is None]
                if not msgs:
                    if limit is None and time.monotonic() - idle_since > 8:
                        break
                    continue
                idle_since = time.monotonic()
                p.begin_transaction()
                for m in msgs:
                    p.produce(dst, value=m.value().replace(b"in-", b"out-"),
                              partition=m.partition())
                positions = c.position(c.assignment())
                p.send_offsets_to_transaction(positions, c.consumer_group_metadata(), T)
                done += len(msgs)
                if abort_last and limit is not None and done >= limit:
                    p.abort_transaction(T)
                    break
                p.commit_transaction(T)
        finally:
            c.close()
        return done

    run(limit=60, abort_last=True)  # a crash after an aborted transaction
    run(limit=None, abort_last=False)
    out = []
    for part in range(2):
        out += values(consume_partition(broker, dst, part, expected=n // 2,
                                        **{"isolation.level": "read_committed"}))
    assert sorted(out) == sorted(f"out-{i}".encode() for i in range(n))


def test_aiokafka_commit_and_abort(broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition as TP
    from aiokafka.structs import OffsetAndMetadata  # noqa: F401 - the API is there

    topic = create_topic(broker, unique_topic("txn-aio"))

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap,
                             transactional_id=unique_topic("aio-tid"))
        await p.start()
        try:
            async with p.transaction():
                await p.send_and_wait(topic, b"aio-committed", partition=0)
            await p.begin_transaction()
            await p.send_and_wait(topic, b"aio-aborted", partition=0)
            await p.abort_transaction()
        finally:
            await p.stop()

        async def read(isolation: str, want: int):
            c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level=isolation,
                                 enable_auto_commit=False, auto_offset_reset="earliest")
            await c.start()
            try:
                c.assign([TP(topic, 0)])
                got = []
                deadline = time.monotonic() + 20
                while len(got) < want and time.monotonic() < deadline:
                    batch = await c.getmany(timeout_ms=500)
                    for msgs in batch.values():
                        got += [m.value for m in msgs]
                await asyncio.sleep(0.5)
                for msgs in (await c.getmany(timeout_ms=500)).values():
                    got += [m.value for m in msgs]
                return got
            finally:
                await c.stop()

        return await read("read_committed", 1), await read("read_uncommitted", 2)

    committed, everything = asyncio.run(run())
    assert committed == [b"aio-committed"]
    assert everything == [b"aio-committed", b"aio-aborted"]


def test_kafkajs_commit_and_abort(broker):
    from test_produce_consume import kafkajs

    topic = create_topic(broker, unique_topic("txn-js"))
    out = kafkajs({
        "op": "transactions", "brokers": broker.bootstrap.split(","), "topic": topic,
        "transactionalId": unique_topic("js-tid"),
        "transactions": [
            {"messages": [{"value": "js-1", "partition": 0}, {"value": "js-2", "partition": 0}],
             "commit": True},
            {"messages": [{"value": "js-aborted", "partition": 0}], "commit": False},
            {"messages": [{"value": "js-3", "partition": 0}], "commit": True},
        ],
    })
    assert out["ok"], out
    got = consume_partition(broker, topic, 0, expected=3, **{"isolation.level": "read_committed"})
    assert values(got) == [b"js-1", b"js-2", b"js-3"]
