#!/usr/bin/env python3
"""Sums the traffic metrics of a ferry cluster: one line of KEY=VALUE totals.

    cluster_metrics.py RACK=METRICS_URL [RACK=METRICS_URL ...]

cross_rack_<kind>: bytes every broker *received* from brokers of another rack (each byte on the
wire counted once, at its receiver), by purpose (replication, controller, other, wal_metadata).
objstore_<op>_requests and objstore_<direction>_bytes: object-store requests and payload bytes.
follower_<path>_bytes, fallback_ranges, reports_served_classic_<reason>, classic_switches: how remote-WAL
followers got their data (WAL or classic) and why the classic path was used.
consumer_fetch_<role>_bytes: bytes served to consumers by partition leaders and by followers
(KIP-392 follower reads).
"""
import re
import sys
import urllib.request

LINE = re.compile(r"^(ferry_[a-z_]+)(?:\{([^}]*)\})? ([0-9.eE+-]+)$")


def labels(text):
    return dict(re.findall(r'(\w+)="([^"]*)"', text or ""))


def main():
    totals = {}
    for arg in sys.argv[1:]:
        rack, url = arg.split("=", 1)
        body = urllib.request.urlopen(url, timeout=10).read().decode()
        for line in body.splitlines():
            m = LINE.match(line)
            if not m:
                continue
            name, lab, value = m.group(1), labels(m.group(2)), float(m.group(3))
            key = None
            if name == "ferry_inter_broker_bytes_total":
                if lab.get("direction") == "received" and lab.get("peer_rack") != rack:
                    key = f"cross_rack_{lab.get('kind')}"
            elif name == "ferry_objstore_requests_total":
                key = f"objstore_{lab.get('op')}_requests"
            elif name == "ferry_objstore_bytes_total":
                key = f"objstore_{lab.get('direction')}_bytes"
            elif name in ("ferry_remote_wal_fallback_ranges_total",
                          "ferry_remote_wal_classic_switches_total",
                          "ferry_remote_wal_republished_bytes_total"):
                key = name.removeprefix("ferry_remote_wal_").removesuffix("_total")
            elif name == "ferry_remote_wal_reports_served_classic_total":
                key = f"reports_served_classic_{lab.get('reason')}"
            elif name == "ferry_remote_wal_follower_bytes_total":
                key = f"follower_{lab.get('path')}_bytes"
            elif name == "ferry_consumer_fetch_bytes_total":
                key = f"consumer_fetch_{lab.get('role')}_bytes"
            if key:
                totals[key] = totals.get(key, 0) + value
    print(" ".join(f"{k}={int(v)}" for k, v in sorted(totals.items())))


if __name__ == "__main__":
    main()
