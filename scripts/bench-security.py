#!/usr/bin/env python3
"""Security benchmarks (issue 13) on one broker: produce throughput through PLAINTEXT, SSL and
SASL_SSL (SCRAM-SHA-512) listeners, taken in turn round after round so that the machine's drift
hits all three alike, and the time of a SCRAM-SHA-512 login (SASL_PLAINTEXT, so no TLS handshake
in it), end to end and as the broker's own request latency.

    FERRY_BIN=target/release/ferry .venv/bin/python scripts/bench-security.py [--mb 400] [--rounds 3]

The client is confluent-kafka (librdkafka with OpenSSL; ferry-bench's bundled librdkafka has no
TLS). Certificates are made with the openssl CLI in a temporary directory.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import os
import re
import secrets
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

import kwire  # noqa: E402
from conftest import Broker, free_port  # noqa: E402
from pki import Pki  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import (AdminClient, NewTopic, ScramCredentialInfo,  # noqa: E402
                                   ScramMechanism, UserScramCredentialUpsertion)

USER, PASSWORD, ITERATIONS = "bench", "bench-secret", 4096


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce(conf: dict, topic: str, records: int, size: int) -> float:
    p = Producer({**conf, "acks": 1, "linger.ms": 5, "batch.size": 32768,
                  "compression.type": "none", "queue.buffering.max.kbytes": 262144})
    value = b"x" * size
    started = time.monotonic()
    for _ in range(records):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.005)
    assert p.flush(300) == 0
    return time.monotonic() - started


def scram_login(port: int) -> float:
    """One SCRAM-SHA-512 login on a new connection; its wall time in seconds."""
    started = time.perf_counter()
    with kwire.Conn("127.0.0.1", port) as conn:
        r = conn.request(17, 1, kwire.string("SCRAM-SHA-512"))
        assert r.i16() == 0
        nonce = base64.b64encode(secrets.token_bytes(18)).decode()
        bare = f"n={USER},r={nonce}"

        def step(message: bytes) -> bytes:
            r = conn.request(36, 1, kwire.bytes_(message))
            code, err = r.i16(), r.string()
            assert code == 0, err
            return r.take(r.i32())

        server_first = step(f"n,,{bare}".encode()).decode()
        attrs = dict(kv.split("=", 1) for kv in server_first.split(","))
        salted = hashlib.pbkdf2_hmac("sha512", PASSWORD.encode(), base64.b64decode(attrs["s"]),
                                     int(attrs["i"]))
        client_key = hmac.new(salted, b"Client Key", "sha512").digest()
        stored_key = hashlib.sha512(client_key).digest()
        without_proof = f"c=biws,r={attrs['r']}"
        auth = f"{bare},{server_first},{without_proof}".encode()
        signature = hmac.new(stored_key, auth, "sha512").digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        final = step(f"{without_proof},p={base64.b64encode(proof).decode()}".encode())
        assert final.startswith(b"v=")
    return time.perf_counter() - started


def sasl_latency(metrics_url: str) -> tuple[float, float]:
    """(sum seconds, count) of the broker's SaslAuthenticate request latency."""
    text = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    total = count = 0.0
    for line in text.splitlines():
        m = re.match(r'^ferry_request_latency_seconds_(sum|count)\{api="SaslAuthenticate"\} (\S+)', line)
        if m:
            if m.group(1) == "sum":
                total = float(m.group(2))
            else:
                count = float(m.group(2))
    return total, count


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=400, help="MB produced per listener and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--record-size", type=int, default=1000)
    ap.add_argument("--logins", type=int, default=300)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="ferry-bench-security.") as tmp:
        root = Path(tmp)
        pki = Pki(root)
        _, _, keystore = pki.leaf("broker", "broker")
        b = Broker(root / "broker", {})
        ports = {"SSL": free_port(), "SASL_SSL": free_port(), "SASL_PLAINTEXT": free_port()}
        b.extra_config.update({
            "listeners": f"PLAINTEXT://127.0.0.1:{b.port},"
                         + ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
            "advertised.listeners": "",
            "ssl.keystore.location": str(keystore),
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        })
        b.start()
        try:
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                    USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, ITERATIONS),
                    PASSWORD.encode())]).values():
                f.result(30)
            time.sleep(1)
            confs = {
                "PLAINTEXT": {"bootstrap.servers": b.bootstrap},
                "SSL": {"bootstrap.servers": f"127.0.0.1:{ports['SSL']}",
                        "security.protocol": "SSL", "ssl.ca.location": str(pki.ca)},
                "SASL_SSL": {"bootstrap.servers": f"127.0.0.1:{ports['SASL_SSL']}",
                             "security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca),
                             "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": USER,
                             "sasl.password": PASSWORD},
            }
            records = args.mb * 1_000_000 // args.record_size
            results: dict[str, list[tuple[float, float]]] = {k: [] for k in confs}
            names = list(confs)
            # Round 0 is a warm-up, not counted: until the page cache holds a few GB of dirty
            # log data the kernel's writeback does not yet charge the broker, so whichever
            # listener runs first would look fast. Each round starts with the next listener.
            for rnd in range(args.rounds + 1):
                order = names[rnd % len(names):] + names[:rnd % len(names)]
                for name in order:
                    conf = confs[name]
                    topic = f"bench-{name.lower()}-{rnd}"
                    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
                    cpu0 = cpu_seconds(b.proc.pid)
                    secs = produce(conf, topic, records, args.record_size)
                    cpu = cpu_seconds(b.proc.pid) - cpu0
                    mb_s = records * args.record_size / secs / 1e6
                    if rnd > 0:
                        results[name].append((mb_s, cpu))
                    label = f"round {rnd}" if rnd > 0 else "warm-up"
                    print(f"{label:8} {name:9} {mb_s:7.1f} MB/s  broker CPU {cpu:5.2f} s",
                          flush=True)
            print()
            plain = [r[0] for r in results["PLAINTEXT"]]
            for name, runs in results.items():
                rates = [r[0] for r in runs]
                ratios = [r / p for r, p in zip(rates, plain)]
                cpu_per_gb = statistics.median(r[1] for r in runs) / (args.mb / 1000)
                print(f"{name:9} median {statistics.median(rates):7.1f} MB/s  "
                      f"÷ PLAINTEXT per round {', '.join(f'{x:.2f}' for x in ratios)}  "
                      f"broker CPU {cpu_per_gb:.2f} s/GB")

            before = sasl_latency(b.metrics_url)
            logins = sorted(scram_login(ports["SASL_PLAINTEXT"]) for _ in range(args.logins))
            after = sasl_latency(b.metrics_url)
            pbkdf2 = min(
                (lambda t0: (hashlib.pbkdf2_hmac("sha512", b"x", b"salt" * 4, ITERATIONS),
                             time.perf_counter() - t0)[1])(time.perf_counter())
                for _ in range(20))
            broker_ms = (after[0] - before[0]) / max(after[1] - before[1], 1) * 2 * 1000
            print(f"\nSCRAM-SHA-512 login ({args.logins}, {ITERATIONS} iterations, new connection "
                  f"each, no TLS): p50 {logins[len(logins) // 2] * 1000:.2f} ms, "
                  f"p99 {logins[int(len(logins) * 0.99)] * 1000:.2f} ms; of which the client's "
                  f"PBKDF2 {pbkdf2 * 1000:.2f} ms; the broker's two SaslAuthenticate steps "
                  f"{broker_ms:.3f} ms")
        finally:
            b.stop()


if __name__ == "__main__":
    main()
