"""Recovery after kill -9 with many partitions (issue 16): seeds a one-node data directory with
TOPICS x PARTITIONS partitions of 5 records each, kills the broker with SIGKILL, then restarts a
copy of it and reports when the port first accepts a TCP connection, when the broker logs
"ferry listening" and when Metadata is first answered.

    .venv/bin/python scripts/bench-recovery.py create target/release/ferry 40 100
    .venv/bin/python scripts/bench-recovery.py recover target/release/ferry new
    .venv/bin/python scripts/bench-recovery.py recover /path/to/older/ferry old

FERRY_RECOVERY_DIR (default /tmp/ferry-recovery) holds the seed and the copies.
"""
import os, socket, subprocess, sys, time, shutil, signal
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka import Producer

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

PORT = free_port()
ROOT = os.environ.get("FERRY_RECOVERY_DIR", "/tmp/ferry-recovery")
os.makedirs(ROOT, exist_ok=True)
def cfg(data):
    p = f"{ROOT}/ferry.toml"
    open(p, "w").write(
        f'"node.id" = 1\nlisteners = "PLAINTEXT://127.0.0.1:{PORT}"\n'
        f'"log.dirs" = "{data}"\n"metrics.address" = ""\n')
    return p

def start(binary, data, log):
    return subprocess.Popen([binary, "serve", "--config", cfg(data)], stdout=open(log, "w"),
                            stderr=subprocess.STDOUT, env={**os.environ, "RUST_LOG": "info"})

def can_connect():
    try:
        socket.create_connection(("127.0.0.1", PORT), timeout=0.2).close()
        return True
    except OSError:
        return False

def served():
    try:
        a = AdminClient({"bootstrap.servers": f"127.0.0.1:{PORT}", "socket.timeout.ms": 1000})
        a.list_topics(timeout=0.5)
        return True
    except Exception:
        return False

def create(binary, topics, parts):
    data = f"{ROOT}/seed"
    shutil.rmtree(data, ignore_errors=True)
    p = start(binary, data, f"{ROOT}/seed.log")
    while not served(): time.sleep(0.2)
    a = AdminClient({"bootstrap.servers": f"127.0.0.1:{PORT}"})
    fs = a.create_topics([NewTopic(f"t{i}", parts, 1) for i in range(topics)], request_timeout=600)
    for f in fs.values(): f.result()
    pr = Producer({"bootstrap.servers": f"127.0.0.1:{PORT}", "linger.ms": 50})
    for i in range(topics):
        for part in range(parts):
            for k in range(5):
                pr.produce(f"t{i}", value=b"x" * 100, partition=part)
        pr.poll(0)
    pr.flush(120)
    time.sleep(1)
    p.send_signal(signal.SIGKILL); p.wait()

def recover(binary, tag):
    data = f"{ROOT}/run"
    shutil.rmtree(data, ignore_errors=True)
    subprocess.run(["cp", "-a", f"{ROOT}/seed", data], check=True)
    os.sync()  # the copy's dirty pages are not the broker's work
    log = f"{ROOT}/{tag}.log"
    t0 = time.monotonic()
    p = start(binary, data, log)
    first_connect = None
    while True:
        if first_connect is None and can_connect():
            first_connect = time.monotonic() - t0
        if "ferry listening" in open(log).read():
            listening = time.monotonic() - t0
            break
        time.sleep(0.01)
    while not served(): time.sleep(0.05)
    served_t = time.monotonic() - t0
    p.send_signal(signal.SIGKILL); p.wait()
    print(f"{tag}: first TCP connect accepted {first_connect:.2f}s, 'ferry listening' log {listening:.2f}s, first Metadata answered {served_t:.2f}s", flush=True)

if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "create":
        create(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        recover(sys.argv[2], sys.argv[3])
