//! `ferry cost-report`: scrapes brokers' `/metrics`, twice a window apart, and prints what the
//! cluster moved in that window and what it would cost: bytes produced, cross-AZ inter-broker
//! bytes, object-store requests and bytes, cost per hour and per GB produced, split into
//! transfer and requests. Prices default to S3 Express One Zone and AWS cross-AZ transfer (the
//! same defaults as the brokers' `remote.wal.cost.*` keys).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::Context;

/// USD prices.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prices {
    pub put_per_1000: f64,
    pub get_per_1000: f64,
    pub upload_per_gb: f64,
    pub retrieval_per_gb: f64,
    pub cross_az_per_gb_each_way: f64,
}

impl Default for Prices {
    fn default() -> Self {
        Self {
            put_per_1000: 0.00113,
            get_per_1000: 0.00003,
            upload_per_gb: 0.0032,
            retrieval_per_gb: 0.0006,
            cross_az_per_gb_each_way: 0.01,
        }
    }
}

/// The counters a report needs, summed over the brokers.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sample {
    pub produced_bytes: f64,
    /// Inter-broker bytes received from a broker of another rack (each byte once).
    pub cross_az_bytes: f64,
    pub cross_az_replication_bytes: f64,
    pub puts: f64,
    pub gets: f64,
    pub uploaded_bytes: f64,
    pub downloaded_bytes: f64,
}

/// One sample line: name, labels, value.
fn parse_line(line: &str) -> Option<(&str, BTreeMap<&str, &str>, f64)> {
    if line.starts_with('#') || line.trim().is_empty() {
        return None;
    }
    let (head, value) = line.rsplit_once(' ')?;
    let value: f64 = value.trim().parse().ok()?;
    let (name, labels) = match head.split_once('{') {
        Some((name, rest)) => (name, rest.strip_suffix('}')?),
        None => (head, ""),
    };
    let mut map = BTreeMap::new();
    for pair in labels.split("\",").filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once("=\"")?;
        map.insert(k.trim_matches(','), v.trim_end_matches('"'));
    }
    Some((name, map, value))
}

/// Adds one broker's metrics text to `s`.
pub fn accumulate(s: &mut Sample, text: &str) {
    let lines: Vec<_> = text.lines().filter_map(parse_line).collect();
    let own_rack = lines
        .iter()
        .find(|(n, _, _)| *n == "ferry_remote_wal_rack_info")
        .and_then(|(_, l, _)| l.get("rack").copied())
        .unwrap_or("");
    for (name, labels, v) in &lines {
        let l = |k: &str| labels.get(k).copied().unwrap_or("");
        match *name {
            "ferry_topic_bytes_in_total" if !l("topic").starts_with("__") => s.produced_bytes += v,
            "ferry_inter_broker_bytes_total"
                if l("direction") == "received" && l("peer_rack") != own_rack =>
            {
                s.cross_az_bytes += v;
                if l("kind") == "replication" {
                    s.cross_az_replication_bytes += v;
                }
            }
            "ferry_objstore_requests_total" => match l("op") {
                "put" | "put_if_absent" | "list" | "delete" => s.puts += v,
                "get" | "get_range" | "head" => s.gets += v,
                _ => {}
            },
            "ferry_objstore_bytes_total" => match l("direction") {
                "upload" => s.uploaded_bytes += v,
                "download" => s.downloaded_bytes += v,
                _ => {}
            },
            _ => {}
        }
    }
}

/// GETs `url` (`http://host:port[/path]`, plain HTTP) and returns the body.
pub fn scrape(url: &str) -> anyhow::Result<String> {
    let rest = url
        .strip_prefix("http://")
        .with_context(|| format!("{url}: only http:// URLs are supported"))?;
    let (hostport, path) = match rest.split_once('/') {
        Some((h, p)) => (h, format!("/{p}")),
        None => (rest, "/metrics".to_string()),
    };
    let mut stream =
        TcpStream::connect(hostport).with_context(|| format!("connecting to {hostport}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {hostport}\r\nConnection: close\r\n\r\n"
    )?;
    let mut body = String::new();
    stream.read_to_string(&mut body)?;
    let (head, body) = body
        .split_once("\r\n\r\n")
        .with_context(|| format!("{url}: malformed HTTP response"))?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        anyhow::bail!("{url}: {}", head.lines().next().unwrap_or("no status line"));
    }
    Ok(body.to_string())
}

/// Sums every broker's counters.
pub fn sample(urls: &[String]) -> anyhow::Result<Sample> {
    let mut s = Sample::default();
    for url in urls {
        accumulate(&mut s, &scrape(url)?);
    }
    Ok(s)
}

fn human(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut v = bytes;
    let mut u = 0;
    while v >= 1000.0 && u + 1 < UNITS.len() {
        v /= 1000.0;
        u += 1;
    }
    format!("{v:.2} {}", UNITS[u])
}

/// The report for the change from `a` to `b` over `secs` seconds.
pub fn render(a: &Sample, b: &Sample, secs: f64, p: &Prices) -> String {
    let d = |f: fn(&Sample) -> f64| (f(b) - f(a)).max(0.0);
    let produced = d(|s| s.produced_bytes);
    let cross = d(|s| s.cross_az_bytes);
    let cross_repl = d(|s| s.cross_az_replication_bytes);
    let puts = d(|s| s.puts);
    let gets = d(|s| s.gets);
    let up = d(|s| s.uploaded_bytes);
    let down = d(|s| s.downloaded_bytes);
    let gb = 1e9;
    let requests = puts / 1000.0 * p.put_per_1000 + gets / 1000.0 * p.get_per_1000;
    let store_transfer = up / gb * p.upload_per_gb + down / gb * p.retrieval_per_gb;
    // Cross-AZ transfer is billed on both sides.
    let cross_transfer = cross / gb * 2.0 * p.cross_az_per_gb_each_way;
    let transfer = store_transfer + cross_transfer;
    let total = requests + transfer;
    let per_hour = if secs > 0.0 { 3600.0 / secs } else { 0.0 };
    let per_gb = |usd: f64| {
        if produced > 0.0 {
            format!("${:.6}", usd / (produced / gb))
        } else {
            "-".to_string()
        }
    };
    let pct = |x: f64| {
        if produced > 0.0 {
            format!("{:.1}%", 100.0 * x / produced)
        } else {
            "-".to_string()
        }
    };
    let mut out = String::new();
    out.push_str(&format!("ferry cost report over {secs:.1} s\n\n"));
    out.push_str(&format!(
        "  produced                {:>14}\n",
        human(produced)
    ));
    out.push_str(&format!(
        "  cross-AZ inter-broker   {:>14}  ({} of produced; replication {}, {})\n",
        human(cross),
        pct(cross),
        human(cross_repl),
        pct(cross_repl)
    ));
    out.push_str(&format!(
        "  object store            {:>14} up, {} down; {:.0} PUT-class, {:.0} GET-class requests\n\n",
        human(up),
        human(down),
        puts,
        gets
    ));
    out.push_str("                          USD/hour    USD/GB produced\n");
    for (what, usd) in [
        ("requests", requests),
        ("transfer (object store)", store_transfer),
        ("transfer (cross-AZ)", cross_transfer),
        ("total", total),
    ] {
        out.push_str(&format!(
            "  {what:<24}{:>9.4}    {}\n",
            usd * per_hour,
            per_gb(usd)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = r#"# HELP x
ferry_remote_wal_rack_info{rack="az1"} 1
ferry_topic_bytes_in_total{topic="orders"} 1000000000
ferry_topic_bytes_in_total{topic="__remote_wal_log_metadata"} 5000
ferry_inter_broker_bytes_total{direction="received",peer_rack="az2",kind="replication"} 10000000
ferry_inter_broker_bytes_total{direction="received",peer_rack="az1",kind="replication"} 99
ferry_inter_broker_bytes_total{direction="sent",peer_rack="az2",kind="replication"} 77
ferry_objstore_requests_total{op="put_if_absent",bucket="b",outcome="ok"} 1000
ferry_objstore_requests_total{op="get_range",bucket="b",outcome="ok"} 2000
ferry_objstore_bytes_total{op="put_if_absent",bucket="b",direction="upload"} 1000000000
"#;

    #[test]
    fn sums_what_crosses_racks_and_prices_it() {
        let mut s = Sample::default();
        accumulate(&mut s, A);
        assert_eq!(s.produced_bytes, 1e9);
        assert_eq!(s.cross_az_bytes, 1e7);
        assert_eq!(s.puts, 1000.0);
        assert_eq!(s.gets, 2000.0);
        assert_eq!(s.uploaded_bytes, 1e9);
        let text = render(&Sample::default(), &s, 3600.0, &Prices::default());
        assert!(text.contains("1.00 GB"), "{text}");
        assert!(text.contains("(1.0% of produced"), "{text}");
        // 1000 PUTs + 2000 GETs = 0.00113 + 0.00006 USD.
        assert!(text.contains("requests                   0.0012"), "{text}");
        // Plus 1 GB up at 0.0032 and 0.01 GB cross-AZ at 2 x 0.01.
        assert!(text.contains("total                      0.0046"), "{text}");
    }
}
