//! The `remote.wal.*` broker keys as one typed struct, checked at start-up.

use std::collections::BTreeMap;
use std::path::PathBuf;

use ferry_wal::cost::CostTable;

use crate::broker_config::BrokerConfig;

/// Which backend holds the buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreKind {
    /// One directory per rack (tests, single hosts).
    Local,
    /// S3 / S3 Express One Zone / an S3-compatible server.
    S3 {
        /// Endpoint of every rack without an entry in `endpoints` (`None`: AWS).
        endpoint: Option<String>,
        /// `remote.wal.s3.endpoints`: rack → endpoint of that rack's bucket.
        endpoints: BTreeMap<String, String>,
        region: String,
        path_style: bool,
        access_key: Option<String>,
        secret_key: Option<Secret>,
    },
}

/// A secret config value: `Debug` shows `[hidden]`, so a config struct can be logged whole.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl Secret {
    /// The secret itself, for the one place that must hand it on (a credentials provider).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[hidden]")
    }
}

/// `remote.wal.failover.republish`: what a new leader re-uploads to its own bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Republish {
    /// Every local segment newer than `local.retention.ms`.
    Comprehensive,
    /// Only what the long-term tier does not hold yet (for topics with
    /// `remote.storage.enable=true`) and what lies above the high watermark the new leader
    /// knew (every replica in the ISR holds what is below).
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
    /// For `local`: the parent of the racks' bucket directories (`remote.wal.local.dir`, or
    /// `remote-wal` beside the first log dir). A rack not in `buckets` has its bucket there,
    /// which is where a follower finds the objects of such a rack's leaders.
    pub local_dir: Option<PathBuf>,
    pub upload_interval_ms: i64,
    pub upload_max_bytes: usize,
    pub buffer_max_bytes: usize,
    pub fallback_ms: i64,
    /// `remote.wal.fetcher.queue.max.slices`: slices of one partition the fetcher queues.
    pub fetcher_queue_max_slices: usize,
    pub metadata_partitions: i32,
    /// `retention.ms` of the metadata topic; also how long a broker must be gone before
    /// another of its rack collects its objects.
    pub metadata_retention_ms: i64,
    /// `remote.wal.metadata.acks = all`: a publish waits for the metadata partitions' ISR.
    pub metadata_acks_all: bool,
    pub gc_interval_ms: u64,
    pub orphan_grace_ms: i64,
    pub retention_ms: i64,
    /// `remote.wal.retention.max.ms` combined with the metadata topic's retention: the longest
    /// a WAL object is kept for a replica that lacks its data.
    pub retention_max_ms: i64,
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

/// Checks that `url` looks like `http[s]://host[:port][/path]`, so that a typo stops start-up
/// with the key's name instead of surfacing as connection errors of every upload.
fn check_endpoint(key: &str, url: &str) -> anyhow::Result<()> {
    let bad = |why: &str| anyhow::anyhow!("{key}: `{url}` is not an endpoint URL ({why})");
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| bad("it must start with http:// or https://"))?;
    if url.chars().any(char::is_whitespace) {
        return Err(bad("it contains whitespace"));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err(bad("credentials belong in remote.wal.s3.access.key.id"));
    }
    // The port follows the last `:` outside an IPv6 literal's brackets.
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => (h, Some(p)),
        _ => (authority, None),
    };
    if host.is_empty() || host == "[]" {
        return Err(bad("no host"));
    }
    if let Some(port) = port {
        if port.parse::<u16>().map_or(true, |p| p == 0) {
            return Err(bad("bad port"));
        }
    }
    Ok(())
}

/// Parses `remote.wal.s3.endpoints` (`rack=url,rack=url`); every rack must have a bucket.
pub fn parse_endpoints(
    text: &str,
    buckets: &BTreeMap<String, String>,
) -> anyhow::Result<BTreeMap<String, String>> {
    const KEY: &str = "remote.wal.s3.endpoints";
    let mut out = BTreeMap::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((rack, url)) = entry.split_once('=') else {
            anyhow::bail!("{KEY}: `{entry}` is not `rack=url`");
        };
        let (rack, url) = (rack.trim(), url.trim());
        if rack.is_empty() || url.is_empty() {
            anyhow::bail!("{KEY}: `{entry}` has an empty rack or endpoint");
        }
        if !buckets.contains_key(rack) {
            anyhow::bail!(
                "{KEY}: rack `{rack}` has no bucket in remote.wal.buckets (racks there: {})",
                buckets.keys().cloned().collect::<Vec<_>>().join(", ")
            );
        }
        check_endpoint(KEY, url)?;
        if out.insert(rack.to_string(), url.to_string()).is_some() {
            anyhow::bail!("{KEY}: rack `{rack}` is listed twice");
        }
    }
    Ok(out)
}

impl StoreKind {
    /// The endpoint of `rack`'s bucket: its own entry, else the shared one (`None`: AWS, or a
    /// local store).
    pub fn endpoint_of(&self, rack: &str) -> Option<&str> {
        match self {
            StoreKind::Local => None,
            StoreKind::S3 {
                endpoint,
                endpoints,
                ..
            } => endpoints
                .get(rack)
                .or(endpoint.as_ref())
                .map(String::as_str),
        }
    }
}

/// Metadata names a bucket, not a server: a bucket name must lead to one place.
fn check_buckets_are_unambiguous(
    store: &StoreKind,
    buckets: &BTreeMap<String, String>,
) -> anyhow::Result<()> {
    let mut seen: BTreeMap<&str, (&str, Option<&str>)> = BTreeMap::new();
    for (rack, bucket) in buckets {
        let endpoint = store.endpoint_of(rack);
        match seen.get(bucket.as_str()) {
            Some((first, other)) if *other != endpoint => anyhow::bail!(
                "remote.wal.buckets: racks `{first}` and `{rack}` both name bucket `{bucket}` \
                 but reach it through different endpoints ({} and {}) in remote.wal.s3.endpoints; \
                 WAL metadata names only the bucket, so give each rack's bucket its own name",
                other.unwrap_or("AWS"),
                endpoint.unwrap_or("AWS"),
            ),
            Some(_) => {}
            None => {
                seen.insert(bucket, (rack, endpoint));
            }
        }
    }
    Ok(())
}

/// The longest a WAL object is kept for a replica lacking its data: `remote.wal.retention.max.ms`
/// (negative: no cap of its own), never beyond the metadata topic's `retention.ms` (negative:
/// forever), since a follower finds an object only through its metadata.
pub fn max_lifetime(retention_max_ms: i64, metadata_retention_ms: i64) -> i64 {
    let own = if retention_max_ms < 0 {
        i64::MAX
    } else {
        retention_max_ms
    };
    let metadata = if metadata_retention_ms < 0 {
        i64::MAX
    } else {
        metadata_retention_ms
    };
    own.min(metadata)
}

impl RemoteWalConfig {
    pub fn from_broker(c: &BrokerConfig) -> anyhow::Result<Self> {
        let node_id = c.node_id();
        let rack = c.rack().unwrap_or_default();
        let mut buckets = parse_buckets(c.raw("remote.wal.buckets"))?;
        let store = match c.raw("remote.wal.store") {
            "s3" => {
                let access_key = opt(c, "remote.wal.s3.access.key.id");
                let secret_key = opt(c, "remote.wal.s3.secret.access.key").map(Secret);
                if access_key.is_some() != secret_key.is_some() {
                    anyhow::bail!("set both remote.wal.s3.access.key.id and remote.wal.s3.secret.access.key, or neither");
                }
                let endpoint = opt(c, "remote.wal.s3.endpoint");
                if let Some(url) = &endpoint {
                    check_endpoint("remote.wal.s3.endpoint", url)?;
                }
                StoreKind::S3 {
                    endpoint,
                    endpoints: parse_endpoints(c.raw("remote.wal.s3.endpoints"), &buckets)?,
                    region: c.raw("remote.wal.s3.region").to_string(),
                    path_style: c.raw("remote.wal.s3.path.style") == "true",
                    access_key,
                    secret_key,
                }
            }
            _ => StoreKind::Local,
        };
        let rack_key = if rack.is_empty() { "default" } else { &rack };
        let local_dir = match &store {
            StoreKind::Local => {
                Some(c.dir_or_beside_log_dirs("remote.wal.local.dir", "remote-wal"))
            }
            StoreKind::S3 { .. } => None,
        };
        if let Some(parent) = &local_dir {
            if !buckets.contains_key(rack_key) {
                buckets.insert(
                    rack_key.to_string(),
                    parent.join(rack_key).display().to_string(),
                );
            }
        }
        check_buckets_are_unambiguous(&store, &buckets)?;
        let retention_ms: i64 = num(c, "remote.wal.retention.ms")?;
        let metadata_retention_ms: i64 = num(c, "remote.wal.metadata.topic.retention.ms")?;
        let retention_max_ms = max_lifetime(
            num(c, "remote.wal.retention.max.ms")?,
            metadata_retention_ms,
        );
        Ok(Self {
            node_id,
            rack: rack_key.to_string(),
            store,
            buckets,
            local_dir,
            upload_interval_ms: num(c, "remote.wal.upload.interval.ms")?,
            upload_max_bytes: num(c, "remote.wal.upload.max.bytes")?,
            buffer_max_bytes: num(c, "remote.wal.buffer.max.bytes")?,
            fallback_ms: num(c, "remote.wal.fallback.ms")?,
            fetcher_queue_max_slices: num(c, "remote.wal.fetcher.queue.max.slices")?,
            metadata_partitions: num(c, "remote.wal.metadata.topic.num.partitions")?,
            metadata_retention_ms,
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
            retention_max_ms,
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
    fn the_object_lifetime_cap_never_outlives_the_metadata() {
        assert_eq!(max_lifetime(3_600_000, 7_200_000), 3_600_000);
        assert_eq!(max_lifetime(86_400_000, 7_200_000), 7_200_000);
        assert_eq!(max_lifetime(-1, 7_200_000), 7_200_000);
        assert_eq!(max_lifetime(-1, -1), i64::MAX);
        let w = RemoteWalConfig::from_broker(&BrokerConfig::default()).unwrap();
        assert_eq!(w.retention_max_ms, 3_600_000);
    }

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
        c.set("remote.wal.s3.secret.access.key", "SK-secret")
            .unwrap();
        let w = RemoteWalConfig::from_broker(&c).unwrap();
        assert_eq!(w.own_bucket(), Some("wal-b"));
        assert!(!format!("{w:?}").contains("SK-secret"), "{w:?}");
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

    fn s3_config(buckets: &str) -> BrokerConfig {
        let mut c = BrokerConfig::default();
        c.set("broker.rack", "az1").unwrap();
        c.set("remote.wal.store", "s3").unwrap();
        c.set("remote.wal.buckets", buckets).unwrap();
        c
    }

    fn startup_error(c: &BrokerConfig) -> String {
        RemoteWalConfig::from_broker(c).unwrap_err().to_string()
    }

    #[test]
    fn each_rack_reaches_its_bucket_through_its_own_endpoint_else_the_shared_one() {
        let mut c = s3_config("az1=wal-a,az2=wal-b,az3=wal-c");
        c.set("remote.wal.s3.endpoint", "http://shared:9000")
            .unwrap();
        c.set(
            "remote.wal.s3.endpoints",
            " az1=http://10.0.1.5:9000 , az2=https://s3.az2.example/",
        )
        .unwrap();
        let w = RemoteWalConfig::from_broker(&c).unwrap();
        assert_eq!(w.store.endpoint_of("az1"), Some("http://10.0.1.5:9000"));
        assert_eq!(w.store.endpoint_of("az2"), Some("https://s3.az2.example/"));
        assert_eq!(w.store.endpoint_of("az3"), Some("http://shared:9000"));

        // Without a shared endpoint an unlisted rack goes to AWS.
        let mut c = s3_config("az1=wal-a,az2=wal-b");
        c.set("remote.wal.s3.endpoints", "az2=http://[::1]:9002")
            .unwrap();
        let w = RemoteWalConfig::from_broker(&c).unwrap();
        assert_eq!(w.store.endpoint_of("az1"), None);
        assert_eq!(w.store.endpoint_of("az2"), Some("http://[::1]:9002"));
        assert_eq!(StoreKind::Local.endpoint_of("az1"), None);
    }

    #[test]
    fn bad_endpoints_stop_startup_naming_the_key() {
        let cases = [
            ("az9=http://h:1", "rack `az9` has no bucket"),
            ("az1=", "empty rack or endpoint"),
            ("=http://h:1", "empty rack or endpoint"),
            ("az1", "is not `rack=url`"),
            ("az1=h:9000", "http:// or https://"),
            ("az1=ftp://h", "http:// or https://"),
            ("az1=http://", "no host"),
            ("az1=http://h:99999", "bad port"),
            ("az1=http://h:x/", "bad port"),
            ("az1=http://a b:1", "whitespace"),
            ("az1=http://u:p@h:1", "credentials"),
            ("az1=http://h:1,az1=http://h:2", "listed twice"),
        ];
        for (value, why) in cases {
            let mut c = s3_config("az1=wal-a,az2=wal-b");
            c.set("remote.wal.s3.endpoints", value).unwrap();
            let err = startup_error(&c);
            assert!(err.contains("remote.wal.s3.endpoints"), "{value}: {err}");
            assert!(err.contains(why), "{value}: {err}");
        }
        let mut c = s3_config("az1=wal-a");
        c.set("remote.wal.s3.endpoint", "127.0.0.1:9000").unwrap();
        let err = startup_error(&c);
        assert!(err.starts_with("remote.wal.s3.endpoint:"), "{err}");
    }

    #[test]
    fn a_bucket_name_shared_by_racks_must_lead_to_one_endpoint() {
        // One server holding one bucket for every rack: fine.
        let mut c = s3_config("az1=wal,az2=wal");
        c.set("remote.wal.s3.endpoint", "http://h:9000").unwrap();
        assert!(RemoteWalConfig::from_broker(&c).is_ok());
        // Two servers each holding a bucket called `wal`: metadata could not say which.
        c.set("remote.wal.s3.endpoints", "az2=http://other:9000")
            .unwrap();
        let err = startup_error(&c);
        assert!(err.contains("both name bucket `wal`"), "{err}");
    }

    #[test]
    fn the_three_az_examples_give_each_rack_its_own_server() {
        let examples = [
            include_str!("../../../config/cluster-az1.toml"),
            include_str!("../../../config/cluster-az2.toml"),
            include_str!("../../../config/cluster-az3.toml"),
        ];
        for (i, text) in examples.into_iter().enumerate() {
            let c = BrokerConfig::parse(text).unwrap();
            let w = RemoteWalConfig::from_broker(&c).unwrap();
            assert_eq!(w.rack, format!("az{}", i + 1));
            assert_eq!(
                w.own_bucket(),
                Some(format!("ferry-wal-az{}", i + 1).as_str())
            );
            for n in 1..=3 {
                let url = format!("http://127.0.0.1:901{n}");
                assert_eq!(w.store.endpoint_of(&format!("az{n}")), Some(url.as_str()));
            }
        }
    }
}
