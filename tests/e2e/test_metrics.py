"""The Prometheus endpoint (metrics.address) serves text metrics."""

from __future__ import annotations

import urllib.error
import urllib.request

from conftest import assert_delivered, ck_producer, consume_partition, create_topic, produce_sync, unique_topic


def fetch(url: str):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.headers.get("Content-Type", ""), r.read().decode()


def test_metrics_endpoint_after_traffic(broker):
    topic = create_topic(broker, unique_topic("metrics"))
    p = ck_producer(broker)
    assert_delivered(produce_sync(p, topic, [{"value": b"m", "partition": 0}] * 10))
    consume_partition(broker, topic, 0, expected=10)

    status, ctype, body = fetch(broker.metrics_url)
    assert status == 200
    assert ctype.startswith("text/plain") or "openmetrics" in ctype, ctype
    assert "ferry_" in body, body[:2000]
    samples = [l for l in body.splitlines() if l.startswith("ferry_") and not l.startswith("#")]
    assert samples, "no ferry_ samples"
    # some request counter moved past zero after produce + fetch traffic
    counters = [l for l in samples if "request" in l and float(l.rsplit(" ", 1)[1]) > 0]
    assert counters, "no non-zero ferry_*request* sample after traffic:\n" + "\n".join(samples[:50])


def test_metrics_unknown_path_is_404(broker):
    try:
        status = fetch(f"http://127.0.0.1:{broker.metrics_port}/no-such-page")[0]
    except urllib.error.HTTPError as e:
        status = e.code
    assert status == 404
