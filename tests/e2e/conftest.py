"""Shared fixtures for ferry's end-to-end suites.

Every test that takes the ``broker`` fixture gets a fresh ``ferry serve`` process with its own
data dir, listener port and metrics port. ``broker.restart()`` stops it (SIGTERM by default, or
SIGKILL) and starts it again on the same data dir and ports.

The binary comes from ``FERRY_BIN`` (default ``target/debug/ferry`` under the repo root).

Cluster mode: with ``FERRY_E2E_CLUSTER=3`` the ``broker`` and ``broker_factory`` fixtures start a
``Cluster`` of three brokers instead (same interface where it makes sense: ``bootstrap`` lists all
three, ``metrics_url``/``port`` are the first broker's, extra config goes to every broker, topics
default to replication factor 3 with ``min.insync.replicas`` 2). Tests marked
``@pytest.mark.single_node("reason")`` are skipped there.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FERRY_BIN = Path(os.environ.get("FERRY_BIN", REPO / "target" / "debug" / "ferry"))
JS_DIR = Path(__file__).resolve().parent / "js"

# Generous: debug builds on a loaded 2-core CI box.
START_TIMEOUT_S = float(os.environ.get("FERRY_START_TIMEOUT", "60"))
STOP_TIMEOUT_S = 15.0
LOG_TAIL_LINES = 80

# Brokers per `broker` fixture: 1 (default) or a cluster (FERRY_E2E_CLUSTER=3).
CLUSTER_SIZE = int(os.environ.get("FERRY_E2E_CLUSTER") or "1")
# What cluster mode adds to every broker's config (a test's extra config wins).
CLUSTER_MODE_CONFIG = {
    "default.replication.factor": 3,
    "offsets.topic.replication.factor": 3,
    "min.insync.replicas": 2,
}


def _ephemeral_range_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A free loopback port, picked at random just below the kernel's ephemeral range: every
    outgoing connection takes an ephemeral port, and on a busy machine one took a port chosen
    from that range between the check and the broker's bind (or while a broker was down for a
    restart). Falls back to a kernel-chosen port."""
    top = _ephemeral_range_start()
    for _ in range(100):
        port = random.randint(max(1024, top - 12000), top - 1)
        # Never the same port twice in a session: a cluster's six ports are picked before any
        # broker binds, so a repeat would have two brokers (or a broker and a controller)
        # racing for one port.
        if port in _ports_given:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _ports_given.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _ports_given.add(port)
    return port


_ports_given: set[int] = set()


def unique_topic(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


class BrokerDied(RuntimeError):
    pass


class Broker:
    """One ferry process (and the data dir that outlives its restarts)."""

    def __init__(self, workdir: Path, extra_config: dict | None = None):
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.metrics_port = free_port()
        self.extra_config = dict(extra_config or {})
        self.config_path = workdir / "ferry.toml"
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.log_path = workdir / "ferry-0.log"
        self.exit_codes: list[int] = []

    # --- addresses -------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def node_ids(self) -> list[int]:
        return [int(self.config()["node.id"])]

    @property
    def data_dirs(self) -> list[Path]:
        return [self.data_dir]

    @property
    def replication_factor(self) -> int:
        return 1

    # --- config ----------------------------------------------------------------------------
    def config(self) -> dict:
        cfg = {
            "node.id": 1,
            "listeners": f"PLAINTEXT://{self.bootstrap}",
            "advertised.listeners": f"PLAINTEXT://{self.bootstrap}",
            "log.dirs": str(self.data_dir),
            "num.partitions": 1,
            "auto.create.topics.enable": True,
            "metrics.address": f"127.0.0.1:{self.metrics_port}",
            "socket.request.max.bytes": 104857600,
            # Hundreds of brokers per run: 1 MiB each instead of the 16 MiB default
            # (test_full_disk.py uses the default).
            "metadata.log.reserve.bytes": 1 << 20,
        }
        cfg.update(self.extra_config)
        return cfg

    def write_config(self):
        lines = [f"{toml_value(k)} = {toml_value(v)}" for k, v in self.config().items()]
        self.config_path.write_text("\n".join(lines) + "\n")

    # --- lifecycle -------------------------------------------------------------------------
    def start(self, wait: bool = True):
        assert self.proc is None or self.proc.poll() is not None, "already running"
        if not FERRY_BIN.exists():
            pytest.fail(f"ferry binary not found at {FERRY_BIN} (build it or set FERRY_BIN)")
        self.write_config()
        self.log_path = self.workdir / f"ferry-{self.starts}.log"
        self.starts += 1
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "info")
        env.setdefault("RUST_BACKTRACE", "1")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [str(FERRY_BIN), "serve", "--config", str(self.config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.workdir,
                env=env,
            )
        if wait:
            self.wait_ready()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def pause(self, timeout: float = 10.0):
        """SIGSTOP, returning once every thread has stopped.

        kill() only queues a stop signal: one thread of the process is woken to take it and
        stops the others from there. On a busy host that thread can wait for a CPU for tens of
        milliseconds while the broker's other threads go on fetching and answering, so a test
        that acts right after the signal may still be talking to a running broker."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        tasks = Path(f"/proc/{self.proc.pid}/task")
        deadline = time.monotonic() + timeout
        while True:
            states = []
            for t in tasks.iterdir():
                try:
                    # The state follows the parenthesised command name.
                    states.append((t / "stat").read_text().rsplit(")", 1)[1].split()[0])
                except (OSError, IndexError):
                    continue  # a thread that just exited
            if states and all(s in ("T", "t") for s in states):
                return
            assert time.monotonic() < deadline, f"broker not stopped: thread states {states}"
            time.sleep(0.005)

    def resume(self):
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def log_tail(self, n: int = LOG_TAIL_LINES) -> str:
        out = []
        for p in sorted(self.workdir.glob("ferry-*.log")):
            try:
                lines = p.read_text(errors="replace").splitlines()
            except OSError:
                continue
            # a panic's backtrace can push its cause out of the tail: list the causes first
            causes = [l for l in lines if any(w in l for w in (
                "panicked", "memory allocation", " ERROR ", " WARN "))][-20:]
            if causes:
                out.append(f"----- {p.name}: panics/errors/warnings -----")
                out.extend(causes)
            out.append(f"----- {p.name} (last {min(n, len(lines))} of {len(lines)} lines) -----")
            out.extend(lines[-n:])
        return "\n".join(out)

    def _check_alive(self, what: str):
        if self.proc is not None and self.proc.poll() is not None:
            raise BrokerDied(
                f"ferry exited with code {self.proc.returncode} {what}\n{self.log_tail()}"
            )

    def wait_ready(self, timeout: float = START_TIMEOUT_S):
        """TCP connect, then a real Metadata round trip through librdkafka."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        last_err: Exception | None = None
        while time.monotonic() < deadline:
            self._check_alive("while starting")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    pass
            except OSError as e:
                last_err = e
                time.sleep(0.1)
                continue
            try:
                admin = AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 5000})
                md = admin.list_topics(timeout=5)
                if 1 in md.brokers:
                    return
                last_err = RuntimeError(f"metadata without broker 1: {md.brokers}")
            except Exception as e:  # noqa: BLE001 - keep polling until the deadline
                last_err = e
            time.sleep(0.2)
        self._check_alive("while starting")
        raise TimeoutError(f"ferry not ready after {timeout}s: {last_err!r}\n{self.log_tail()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """Stop the process; returns its exit code (None if it had to be SIGKILLed after sig)."""
        if self.proc is None:
            return None
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.send_signal(sig)
        return self.wait_exit(timeout)

    def wait_exit(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """Wait for the signalled process; SIGKILL it after `timeout` (then None)."""
        assert self.proc is not None
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=timeout)
            self.exit_codes.append(self.proc.returncode)
            return None
        self.exit_codes.append(rc)
        return rc

    def kill9(self):
        assert self.proc is not None
        self.proc.kill()  # SIGKILL
        self.proc.wait(timeout=STOP_TIMEOUT_S)

    def restart(self, sig: int = signal.SIGTERM) -> int | None:
        """Stop (SIGTERM: graceful, SIGKILL: crash) and start again on the same data dir/ports."""
        rc = self.stop(sig)
        self.start()
        return rc


class Cluster:
    """`size` ferry brokers on loopback (racks az1, az2, ... unless `racks` names them), each `process.roles =
    broker,controller` with the same `controller.quorum.voters` (controller ports distinct from
    the Kafka listeners). Offers the `Broker` interface where it makes sense for a whole cluster
    (tests of cluster mode use it through the `broker` fixture)."""

    LAG_MS = 3000

    def __init__(self, root: Path, extra_config: dict | None = None, size: int = 3,
                 racks: list[str] | None = None):
        self.workdir = root
        racks = racks or [f"az{i + 1}" for i in range(size)]
        assert len(racks) == size, (racks, size)
        self.extra_config = dict(extra_config or {})
        controller_ports = [free_port() for _ in range(size)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(controller_ports))
        self.brokers = [
            Broker(
                root / f"broker-{i + 1}",
                {
                    "replica.lag.time.max.ms": self.LAG_MS,
                    **self.extra_config,
                    "node.id": i + 1,
                    "process.roles": "broker,controller",
                    "controller.quorum.voters": voters,
                    "broker.rack": racks[i],
                },
            )
            for i in range(size)
        ]

    # --- addresses -------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    @property
    def port(self) -> int:
        return self.brokers[0].port

    @property
    def metrics_port(self) -> int:
        return self.brokers[0].metrics_port

    @property
    def metrics_url(self) -> str:
        return self.brokers[0].metrics_url

    @property
    def node_ids(self) -> list[int]:
        return [i + 1 for i in range(len(self.brokers))]

    @property
    def data_dirs(self) -> list[Path]:
        return [b.data_dir for b in self.brokers]

    @property
    def replication_factor(self) -> int:
        rf = int(self.extra_config.get("default.replication.factor", 1))
        return min(rf, len(self.brokers))

    def by_id(self, node_id: int) -> Broker:
        return self.brokers[node_id - 1]

    # --- lifecycle -------------------------------------------------------------------------
    def start(self, timeout: float = 90.0, wait: bool = True):
        for b in self.brokers:
            b.start(wait=False)
        if wait:
            self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 90.0):
        """Every broker's Metadata lists every broker."""
        want = self.node_ids
        deadline = time.monotonic() + timeout
        pending = list(self.brokers)
        last = None
        while pending and time.monotonic() < deadline:
            b = pending[0]
            b._check_alive("while the cluster starts")
            try:
                md = _admin_client(b.bootstrap).list_topics(timeout=5)
                if sorted(md.brokers) == want:
                    pending.pop(0)
                    continue
                last = f"brokers {sorted(md.brokers)}"
            except Exception as e:  # noqa: BLE001 - poll until the deadline
                last = repr(e)
            time.sleep(0.3)
        if pending:
            tails = "\n".join(p.log_tail(40) for p in pending)
            raise TimeoutError(f"cluster not formed: {last}\n{tails}")

    def alive(self) -> bool:
        return all(b.alive() for b in self.brokers)

    def log_tail(self, n: int = LOG_TAIL_LINES) -> str:
        return "\n".join(f"===== {b.workdir.name} =====\n{b.log_tail(n)}" for b in self.brokers)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """Signal every broker at once (they shut down in parallel), then wait for each. Returns
        0 if all exited 0, else the first other code (None: one had to be SIGKILLed)."""
        running = [b for b in self.brokers if b.alive()]
        for b in running:
            b.proc.send_signal(sig)
        codes = [b.wait_exit(timeout) if b in running else b.stop(sig, timeout)
                 for b in self.brokers]
        return next((c for c in codes if c != 0), 0)

    def kill9(self):
        for b in self.brokers:
            if b.alive():
                b.kill9()

    def restart(self, sig: int = signal.SIGTERM) -> int | None:
        """Stop every broker (SIGTERM: graceful, SIGKILL: crash) and start them all again on the
        same data dirs and ports."""
        rc = self.stop(sig)
        self.start()
        return rc


def _admin_client(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 5000})


# --- pytest plumbing ------------------------------------------------------------------------


def pytest_report_header(config):
    mode = f"cluster of {CLUSTER_SIZE} brokers" if CLUSTER_SIZE > 1 else "single broker"
    return f"ferry e2e: {mode} per `broker` fixture (FERRY_E2E_CLUSTER), FERRY_BIN={FERRY_BIN}"


def pytest_collection_modifyitems(config, items):
    if CLUSTER_SIZE <= 1:
        return
    for item in items:
        m = item.get_closest_marker("single_node")
        if m is not None:
            why = m.args[0] if m.args else "single-node only"
            item.add_marker(pytest.mark.skip(reason=f"single node only: {why}"))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def _failed(request) -> bool:
    for when in ("setup", "call"):
        rep = getattr(request.node, "rep_" + when, None)
        if rep is not None and rep.failed:
            return True
    return False


@pytest.fixture
def broker_factory(tmp_path, request):
    """Start brokers with extra config: ``broker_factory({"num.partitions": 3})``. In cluster
    mode (FERRY_E2E_CLUSTER) each is a `Cluster` with that config on every broker."""
    brokers: list = []

    def make(extra_config: dict | None = None, start: bool = True) -> Broker | Cluster:
        root = tmp_path / f"broker{len(brokers)}"
        if CLUSTER_SIZE > 1:
            b = Cluster(root, {**CLUSTER_MODE_CONFIG, **(extra_config or {})}, CLUSTER_SIZE)
        else:
            b = Broker(root, extra_config)
        brokers.append(b)
        if start:
            b.start()
        return b

    yield make
    for b in brokers:
        b.stop()
    if _failed(request):
        for b in brokers:
            print(f"\n===== ferry log tail ({b.workdir}) =====\n{b.log_tail()}")


@pytest.fixture
def broker(broker_factory) -> Broker:
    return broker_factory()


# --- client helpers (confluent-kafka unless named otherwise) ---------------------------------


def ck_admin(broker: Broker, **conf):
    """An AdminClient for the broker. Without extra conf, one cached client per broker: a
    librdkafka handle that is garbage-collected fails its pending futures with _DESTROY, so
    `ck_admin(b).create_topics(...)[t].result()` must not drop the client mid-call."""
    from confluent_kafka.admin import AdminClient

    if conf:
        return AdminClient({"bootstrap.servers": broker.bootstrap, **conf})
    cached = getattr(broker, "_ck_admin", None)
    if cached is None:
        cached = AdminClient({"bootstrap.servers": broker.bootstrap})
        broker._ck_admin = cached
    return cached


def ck_producer(broker: Broker, **conf):
    from confluent_kafka import Producer

    base = {
        "bootstrap.servers": broker.bootstrap,
        "linger.ms": 5,
        "message.timeout.ms": 30000,
    }
    base.update(conf)
    return Producer(base)


def ck_consumer(broker: Broker, **conf):
    """A consumer for manual assignment only: confluent-kafka refuses to build a Consumer
    without group.id, so one is set, but it is only used with assign() and explicit start
    offsets and never commits."""
    from confluent_kafka import Consumer

    base = {
        "bootstrap.servers": broker.bootstrap,
        "group.id": "ferry-e2e-assign-only",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
    }
    base.update(conf)
    return Consumer(base)


def create_topic(broker: Broker, name: str, partitions: int = 1, config: dict | None = None,
                 timeout: float = 30):
    from confluent_kafka.admin import NewTopic

    admin = ck_admin(broker)
    fs = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=broker.replication_factor,
                  config=config or {})],
        operation_timeout=timeout, request_timeout=timeout,
    )
    fs[name].result(timeout=timeout)
    wait_topic(broker, name, partitions)
    return name


def wait_topic(broker: Broker, name: str, partitions: int | None = None, timeout: float = 30):
    """Wait until metadata shows the topic with a leader and the full ISR on every partition."""
    admin = ck_admin(broker)
    ids = broker.node_ids
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=name, timeout=10)
        t = md.topics.get(name)
        last = t
        if t is not None and t.error is None and t.partitions:
            if partitions is None or len(t.partitions) == partitions:
                if all(p.leader in ids and sorted(p.isrs) == sorted(p.replicas)
                       for p in t.partitions.values()):
                    return t
        time.sleep(0.2)
    raise TimeoutError(f"topic {name} not ready: {last!r}")


def wait_replicas_open(broker: Broker, name: str, partitions: int, timeout: float = 30):
    """Wait until every broker holds a local replica of each partition (DescribeLogDirs).

    A broker answers Metadata from its metadata image a moment before it opens the image's new
    replicas (Kafka's brokers do the same); meanwhile a produce to it is refused with
    NOT_LEADER_OR_FOLLOWER. Clients retry that, except at acks=0, where the refused batch is
    lost by design: tests that produce at acks=0 right after creating a topic wait here."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        deadline = time.monotonic() + timeout
        held = {}
        while time.monotonic() < deadline:
            held = {}
            for entry in admin.describe_log_dirs(topic_partitions=[name]):
                held[entry["broker"]] = sorted(
                    part["partition_index"]
                    for d in entry["log_dirs"] for t in d["topics"] if t["name"] == name
                    for part in t["partitions"])
            if all(held.get(b) == list(range(partitions)) for b in broker.node_ids):
                return
            time.sleep(0.1)
        raise TimeoutError(f"replicas of {name} not open on every broker: {held}")
    finally:
        admin.close()


def produce_sync(producer, topic: str, messages, timeout: float = 60):
    """Produce dicts (key/value/partition/headers/timestamp) and return delivery reports in
    send order as (err, msg) pairs."""
    reports: list = [None] * len(messages)

    def cb_for(i):
        def cb(err, msg):
            reports[i] = (err, msg)
        return cb

    for i, m in enumerate(messages):
        kwargs = {k: m[k] for k in ("key", "value", "partition", "headers", "timestamp") if k in m}
        while True:
            try:
                producer.produce(topic, on_delivery=cb_for(i), **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(timeout)
    assert remaining == 0, f"{remaining} messages still in flight after {timeout}s"
    return reports


def assert_delivered(reports):
    errors = [(i, r[0]) for i, r in enumerate(reports) if r is None or r[0] is not None]
    assert not errors, f"delivery failures: {errors[:5]} (of {len(errors)})"


def consume_partition(broker: Broker, topic: str, partition: int, expected: int | None = None,
                      timeout: float = 30, start_offset=None, **conf):
    """Read a partition from the beginning (or start_offset) until EOF is reached and, if given,
    at least `expected` messages arrived. Returns the list of Message objects."""
    from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

    c = ck_consumer(broker, **conf)
    try:
        c.assign([TopicPartition(topic, partition,
                                 OFFSET_BEGINNING if start_offset is None else start_offset)])
        msgs = []
        eof = False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    eof = True
                    if expected is None or len(msgs) >= expected:
                        break
                    continue
                raise AssertionError(f"consume error on {topic}[{partition}]: {m.error()}")
            eof = False
            msgs.append(m)
        if expected is not None:
            assert len(msgs) >= expected, (
                f"{topic}[{partition}]: got {len(msgs)} of {expected} messages (eof={eof})")
        else:
            assert eof, f"{topic}[{partition}]: no EOF within {timeout}s ({len(msgs)} read)"
        return msgs
    finally:
        c.close()


def consume_topic(broker: Broker, topic: str, partitions: int, timeout: float = 30, **conf):
    return {p: consume_partition(broker, topic, p, timeout=timeout, **conf) for p in range(partitions)}


def leader_port(broker, topic: str, partition: int = 0) -> int:
    """Listener port of the partition's leader (the broker itself on a single node)."""
    md = ck_admin(broker).list_topics(topic=topic, timeout=10)
    leader = md.topics[topic].partitions[partition].leader
    return md.brokers[leader].port


def kafka_error_code(exc) -> int | None:
    """The Kafka error code carried by a confluent-kafka KafkaException (or KafkaError)."""
    err = exc.args[0] if getattr(exc, "args", None) else exc
    code = getattr(err, "code", None)
    return code() if callable(code) else None


@pytest.fixture
def topic_name():
    return unique_topic()


# --- consumer-group helpers (test_groups*.py) ------------------------------------------------

# Brokers for group suites: no initial rebalance delay (tests that check the delay set it).
GROUP_BROKER_CONFIG = {"group.initial.rebalance.delay.ms": 0}

# librdkafka error codes that mean the client could not make sense of a response.
PROTOCOL_ERROR_NAMES = ("_BAD_MSG", "_BAD_COMPRESSION", "_UNSUPPORTED_FEATURE", "_INVALID_ARG",
                        "_INCONSISTENT", "UNKNOWN_SERVER_ERROR", "INVALID_REQUEST",
                        "CORRUPT_MESSAGE", "UNSUPPORTED_VERSION")


# Broker settings for KIP-848 consumer groups in tests: no initial delay, quick heartbeats. The
# minimums come down with the defaults, or the broker refuses to start, as Kafka does.
KIP848_BROKER = {
    "group.initial.rebalance.delay.ms": 0,
    "group.consumer.min.heartbeat.interval.ms": 500,
    "group.consumer.heartbeat.interval.ms": 500,
    "group.consumer.min.session.timeout.ms": 6000,
    "group.consumer.session.timeout.ms": 6000,
}


def close_all(members):
    """Closes every group member, ignoring the errors of those already gone."""
    for m in members:
        try:
            m.close()
        except Exception:  # noqa: BLE001
            pass


class GroupMember:
    """A confluent-kafka consumer subscribed in a group, with its rebalance history
    (on_assign/on_revoke/on_lost calls), its client errors and the records it consumed."""

    def __init__(self, broker: Broker, group: str, topics, name: str = "", classic: bool = True,
                 **conf):
        from confluent_kafka import Consumer

        self.name = name or group
        self.assigns: list[set] = []
        self.revokes: list[set] = []
        self.losts: list[set] = []
        self.errors: list = []
        self.records: list[tuple] = []  # (topic, partition, offset, key, value)
        base = {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "error_cb": self.errors.append,
        }
        if classic:
            base.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000})
        base.update(conf)
        self.consumer = Consumer(base)
        self.consumer.subscribe(list(topics), on_assign=self._on_assign,
                                on_revoke=self._on_revoke, on_lost=self._on_lost)
        self.closed = False

    @staticmethod
    def _tps(partitions) -> set:
        return {(tp.topic, tp.partition) for tp in partitions}

    def _on_assign(self, _c, partitions):
        self.assigns.append(self._tps(partitions))

    def _on_revoke(self, _c, partitions):
        self.revokes.append(self._tps(partitions))

    def _on_lost(self, _c, partitions):
        self.losts.append(self._tps(partitions))

    def assignment(self) -> set:
        if self.closed:
            return set()
        return self._tps(self.consumer.assignment())

    def poll(self, timeout: float = 0.1):
        from confluent_kafka import KafkaError

        m = self.consumer.poll(timeout)
        if m is None:
            return None
        if m.error():
            if m.error().code() != KafkaError._PARTITION_EOF:
                self.errors.append(m.error())
            return None
        self.records.append((m.topic(), m.partition(), m.offset(), m.key(), m.value()))
        return m

    def positions(self) -> dict:
        """(topic, partition) -> highest consumed offset + 1."""
        out: dict = {}
        for t, p, o, _k, _v in self.records:
            out[(t, p)] = max(out.get((t, p), 0), o + 1)
        return out

    def commit_consumed(self, metadata: str | None = None):
        """Synchronously commit next-offsets of everything consumed so far on the partitions
        this member still owns."""
        from confluent_kafka import TopicPartition

        owned = self.assignment()
        tps = []
        for (t, p), off in sorted(self.positions().items()):
            if (t, p) in owned:
                kw = {} if metadata is None else {"metadata": metadata}
                tps.append(TopicPartition(t, p, off, **kw))
        if tps:
            res = self.consumer.commit(offsets=tps, asynchronous=False)
            bad = [tp for tp in res if tp.error is not None]
            assert not bad, f"{self.name}: commit failed: {bad}"
        return tps

    def protocol_errors(self) -> list:
        return [e for e in self.errors
                if any(n in (e.name() if hasattr(e, "name") else str(e))
                       for n in PROTOCOL_ERROR_NAMES)]

    def close(self):
        if not self.closed:
            self.closed = True
            self.consumer.close()


def poll_members(members, seconds: float, step: float = 0.05):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for m in members:
            if not m.closed:
                m.poll(step)


def all_partitions(topic: str, partitions: int) -> set:
    return {(topic, p) for p in range(partitions)}


def wait_group_stable(members, expected: set, timeout: float = 60, hold: float = 2.0,
                      extra_assignments=None) -> float:
    """Poll every member until each owns a non-empty share, the shares are disjoint and cover
    `expected`, and that has held for `hold` seconds. Returns the seconds it took to first reach
    that state. `extra_assignments` is a callable returning more shares (members in other
    processes)."""
    start = time.monotonic()
    deadline = start + timeout
    reached = None
    shares: list = []
    while time.monotonic() < deadline:
        for m in members:
            m.poll(0.05)
        shares = [m.assignment() for m in members]
        if extra_assignments is not None:
            shares += list(extra_assignments())
        union = set().union(*shares) if shares else set()
        ok = (all(shares) and union == expected
              and sum(len(s) for s in shares) == len(union))
        if ok:
            if reached is None:
                reached = time.monotonic()
            if time.monotonic() - reached >= hold:
                return reached - start
        else:
            reached = None
    raise AssertionError(
        f"group not stable within {timeout}s: shares={shares} expected={sorted(expected)}; "
        + "; ".join(f"{m.name}: assigns={m.assigns} revokes={m.revokes} lost={m.losts} "
                    f"errors={m.errors[-5:]}" for m in members))


def consume_until(members, count: int, timeout: float = 60, settle: float = 1.5) -> list:
    """Poll until the members together consumed at least `count` new records (then `settle`
    more seconds, to catch duplicates). Returns the new records, with the member name."""
    marks = [len(m.records) for m in members]

    def new():
        return [(m.name,) + r for m, k in zip(members, marks) for r in m.records[k:]]

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(new()) < count:
        for m in members:
            if not m.closed:
                m.poll(0.05)
    poll_members(members, settle)
    got = new()
    assert len(got) >= count, (
        f"consumed {len(got)} of {count} within {timeout}s; "
        + "; ".join(f"{m.name}: assignment={sorted(m.assignment())} errors={m.errors[-5:]}"
                    for m in members))
    return got


def produce_numbered(broker: Broker, topic: str, partitions: int, per_partition: int,
                     tag: str = "m") -> set:
    """Produce `per_partition` records to each partition; returns {(partition, offset)}."""
    p = ck_producer(broker)
    msgs = [{"key": f"{tag}-{pt}-{i}", "value": f"{tag}-{pt}-{i}", "partition": pt}
            for i in range(per_partition) for pt in range(partitions)]
    reports = produce_sync(p, topic, msgs)
    assert_delivered(reports)
    return {(m.partition(), m.offset()) for _e, m in reports}
