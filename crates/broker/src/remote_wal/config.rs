//! The `remote.wal.*` broker keys as one typed struct, checked at start-up.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::config::BrokerConfig;

/// Which backend holds the buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreKind {
    /// One directory per rack (tests, single hosts).
    Local,
    /// S3 / S3 Express One Zone / an S3-compatible server.
    S3 {
        endpoint: Option<String>,
        region: String,
        path_style: bool,
        access_key: Option<String>,
        secret_key: Option<String>,
    },
}

/// Prices for the estimated cost gauge (USD).
#[derive(Debug, Clone, PartialEq)]
pub struct CostTable {
    pub put_per_1000: f64,
    pub get_per_1000: f64,
    pub upload_per_gb: f64,
    pub retrieval_per_gb: f64,
    pub cross_az_per_gb: f64,
}

/// `remote.wal.failover.republish`: what a new leader re-uploads to its own bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Republish {
    /// Every local segment newer than `local.retention.ms`.
    Comprehensive,
    /// Only what the long-term tier does not hold yet; with no such tier (ferry today), the
    /// same as [`Republish::Comprehensive`].
    Optimized,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RemoteWalConfig {
    pub node_id: i32,
    /// This broker's rack; its bucket is where the uploader writes.
    pub rack: String,
    pub store: StoreKind,
    /// Bucket (directory for `local`) of each rack.
    pub buckets: BTreeMap<String, String>,
    pub upload_interval_ms: i64,
    pub upload_max_bytes: usize,
    pub buffer_max_bytes: usize,
    pub fallback_ms: i64,
    pub metadata_partitions: i32,
    /// `retention.ms` of the metadata topic; also how long a broker must be gone before
    /// another of its rack collects its objects.
    pub metadata_retention_ms: i64,
    /// `remote.wal.metadata.acks = all`: a publish waits for the metadata partitions' ISR.
    pub metadata_acks_all: bool,
    pub gc_interval_ms: u64,
    pub orphan_grace_ms: i64,
    pub retention_ms: i64,
    pub failover_republish: Republish,
    pub cost: CostTable,
}

fn num<T: std::str::FromStr>(c: &BrokerConfig, key: &str) -> anyhow::Result<T> {
    c.raw(key)
        .trim()
        .parse::<T>()
        .map_err(|_| anyhow::anyhow!("config key `{key}`: `{}` is not a number", c.raw(key)))
}

fn opt(c: &BrokerConfig, key: &str) -> Option<String> {
    let v = c.raw(key).trim();
    (!v.is_empty()).then(|| v.to_string())
}

/// Parses `rack=bucket,rack=bucket`.
pub fn parse_buckets(text: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((rack, bucket)) = entry.split_once('=') else {
            anyhow::bail!("remote.wal.buckets: `{entry}` is not `rack=bucket`");
        };
        let (rack, bucket) = (rack.trim(), bucket.trim());
        if rack.is_empty() || bucket.is_empty() {
            anyhow::bail!("remote.wal.buckets: `{entry}` has an empty rack or bucket");
        }
        if out.insert(rack.to_string(), bucket.to_string()).is_some() {
            anyhow::bail!("remote.wal.buckets: rack `{rack}` is listed twice");
        }
    }
    Ok(out)
}

impl RemoteWalConfig {
    pub fn from_broker(c: &BrokerConfig) -> anyhow::Result<Self> {
        let node_id = c.node_id();
        let rack = c.rack().unwrap_or_default();
        let mut buckets = parse_buckets(c.raw("remote.wal.buckets"))?;
        let store = match c.raw("remote.wal.store") {
            "s3" => {
                let access_key = opt(c, "remote.wal.s3.access.key.id");
                let secret_key = opt(c, "remote.wal.s3.secret.access.key");
                if access_key.is_some() != secret_key.is_some() {
                    anyhow::bail!("set both remote.wal.s3.access.key.id and remote.wal.s3.secret.access.key, or neither");
                }
                StoreKind::S3 {
                    endpoint: opt(c, "remote.wal.s3.endpoint"),
                    region: c.raw("remote.wal.s3.region").to_string(),
                    path_style: c.raw("remote.wal.s3.path.style") == "true",
                    access_key,
                    secret_key,
                }
            }
            _ => StoreKind::Local,
        };
        let rack_key = if rack.is_empty() { "default" } else { &rack };
        if !buckets.contains_key(rack_key) {
            match &store {
                StoreKind::Local => {
                    let parent = match opt(c, "remote.wal.local.dir") {
                        Some(d) => PathBuf::from(d),
                        None => c
                            .log_dirs()
                            .first()
                            .map(|d| d.join("..").join("remote-wal"))
                            .unwrap_or_else(|| PathBuf::from("remote-wal")),
                    };
                    buckets.insert(
                        rack_key.to_string(),
                        parent.join(rack_key).display().to_string(),
                    );
                }
                StoreKind::S3 { .. } => {}
            }
        }
        let retention_ms: i64 = num(c, "remote.wal.retention.ms")?;
        Ok(Self {
            node_id,
            rack: rack_key.to_string(),
            store,
            buckets,
            upload_interval_ms: num(c, "remote.wal.upload.interval.ms")?,
            upload_max_bytes: num(c, "remote.wal.upload.max.bytes")?,
            buffer_max_bytes: num(c, "remote.wal.buffer.max.bytes")?,
            fallback_ms: num(c, "remote.wal.fallback.ms")?,
            metadata_partitions: num(c, "remote.wal.metadata.topic.num.partitions")?,
            metadata_retention_ms: num(c, "remote.wal.metadata.topic.retention.ms")?,
            metadata_acks_all: match c.raw("remote.wal.metadata.acks").trim() {
                "1" => false,
                "all" => true,
                other => anyhow::bail!("remote.wal.metadata.acks: `{other}` is not 1 or all"),
            },
            gc_interval_ms: num::<u64>(c, "remote.wal.gc.interval.ms")?.max(10),
            orphan_grace_ms: num(c, "remote.wal.orphan.grace.ms")?,
            retention_ms: if retention_ms < 0 {
                i64::MAX / 4
            } else {
                retention_ms
            },
            failover_republish: match c.raw("remote.wal.failover.republish").trim() {
                "comprehensive" => Republish::Comprehensive,
                "optimized" => Republish::Optimized,
                other => anyhow::bail!(
                    "remote.wal.failover.republish: `{other}` is not comprehensive or optimized"
                ),
            },
            cost: CostTable {
                put_per_1000: num(c, "remote.wal.cost.put.per.1000")?,
                get_per_1000: num(c, "remote.wal.cost.get.per.1000")?,
                upload_per_gb: num(c, "remote.wal.cost.upload.per.gb")?,
                retrieval_per_gb: num(c, "remote.wal.cost.retrieval.per.gb")?,
                cross_az_per_gb: num(c, "remote.wal.cost.cross.az.per.gb")?,
            },
        })
    }

    /// The bucket this broker's uploader writes to (`None`: s3 without a bucket for our rack,
    /// so this broker cannot upload; its followers still read).
    pub fn own_bucket(&self) -> Option<&str> {
        self.buckets.get(&self.rack).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_parse_and_refuse_garbage() {
        let b = parse_buckets(" az1=/tmp/a , az2=bucket-b").unwrap();
        assert_eq!(b.get("az1").map(String::as_str), Some("/tmp/a"));
        assert_eq!(b.get("az2").map(String::as_str), Some("bucket-b"));
        assert!(parse_buckets("az1").is_err());
        assert!(parse_buckets("az1=a,az1=b").is_err());
        assert!(parse_buckets("=a").is_err());
        assert!(parse_buckets("").unwrap().is_empty());
    }

    #[test]
    fn local_defaults_to_a_directory_per_rack_and_s3_reads_its_keys() {
        let mut c = BrokerConfig::default();
        c.set("broker.rack", "az2").unwrap();
        c.set("log.dirs", "/data/b2/logs").unwrap();
        let w = RemoteWalConfig::from_broker(&c).unwrap();
        assert_eq!(w.store, StoreKind::Local);
        assert_eq!(w.own_bucket(), Some("/data/b2/logs/../remote-wal/az2"));
        assert_eq!(w.upload_interval_ms, 10);
        assert_eq!(w.metadata_partitions, 16);
        assert!((w.cost.put_per_1000 - 0.00113).abs() < 1e-12);

        c.set("remote.wal.store", "s3").unwrap();
        c.set("remote.wal.buckets", "az1=wal-a,az2=wal-b").unwrap();
        c.set("remote.wal.s3.endpoint", "http://127.0.0.1:9000")
            .unwrap();
        c.set("remote.wal.s3.path.style", "true").unwrap();
        c.set("remote.wal.s3.access.key.id", "AK").unwrap();
        let err = RemoteWalConfig::from_broker(&c).unwrap_err();
        assert!(err.to_string().contains("secret"), "{err}");
        c.set("remote.wal.s3.secret.access.key", "SK").unwrap();
        let w = RemoteWalConfig::from_broker(&c).unwrap();
        assert_eq!(w.own_bucket(), Some("wal-b"));
        assert!(matches!(
            w.store,
            StoreKind::S3 {
                path_style: true,
                ..
            }
        ));
        assert!(c.set("remote.wal.store", "gcs").is_err());
        assert_eq!(w.failover_republish, Republish::Optimized);
        c.set("remote.wal.failover.republish", "comprehensive")
            .unwrap();
        let w = RemoteWalConfig::from_broker(&c).unwrap();
        assert_eq!(w.failover_republish, Republish::Comprehensive);
        assert!(c.set("remote.wal.failover.republish", "lazy").is_err());
        assert!(c.set("remote.wal.upload.interval.ms", "0").is_err());
    }
}
