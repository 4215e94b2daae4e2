//! The long-term tier's broker keys (`remote.log.storage.*`, `remote.log.manager.*`, KIP-405
//! names where Kafka has them) as one typed struct, checked at start-up.

use std::path::PathBuf;

use crate::broker_config::BrokerConfig;
use crate::remote_wal_config::Secret;

/// Where the tier's objects go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TierStore {
    /// A directory (tests, single hosts).
    Local { dir: PathBuf },
    /// S3 or an S3-compatible server: one regional bucket.
    S3 {
        bucket: String,
        endpoint: Option<String>,
        region: String,
        path_style: bool,
        access_key: Option<String>,
        secret_key: Option<Secret>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct TierConfig {
    /// `remote.log.storage.system.enable`.
    pub enabled: bool,
    pub store: TierStore,
    /// `remote.log.manager.task.interval.ms`.
    pub task_interval_ms: u64,
    /// `remote.log.metadata.topic.num.partitions`.
    pub metadata_partitions: i32,
    /// `remote.log.index.file.cache.total.size.bytes`.
    pub index_cache_bytes: usize,
}

fn opt(c: &BrokerConfig, key: &str) -> Option<String> {
    let v = c.raw(key).trim();
    (!v.is_empty()).then(|| v.to_string())
}

fn num<T: std::str::FromStr>(c: &BrokerConfig, key: &str) -> anyhow::Result<T> {
    c.raw(key)
        .trim()
        .parse::<T>()
        .map_err(|_| anyhow::anyhow!("config key `{key}`: `{}` is not a number", c.raw(key)))
}

impl TierConfig {
    pub fn from_broker(c: &BrokerConfig) -> anyhow::Result<Self> {
        let store = match c.raw("remote.log.storage.type").trim() {
            "local" => TierStore::Local {
                dir: c.dir_or_beside_log_dirs("remote.log.storage.local.dir", "remote-log-storage"),
            },
            "s3" => {
                let bucket = opt(c, "remote.log.storage.s3.bucket").ok_or_else(|| {
                    anyhow::anyhow!(
                        "remote.log.storage.type = s3 needs remote.log.storage.s3.bucket"
                    )
                })?;
                let access_key = opt(c, "remote.log.storage.s3.access.key.id");
                let secret_key = opt(c, "remote.log.storage.s3.secret.access.key").map(Secret);
                if access_key.is_some() != secret_key.is_some() {
                    anyhow::bail!(
                        "remote.log.storage.s3.access.key.id and remote.log.storage.s3.secret.access.key are set together or not at all"
                    );
                }
                let endpoint = opt(c, "remote.log.storage.s3.endpoint");
                if let Some(url) = &endpoint {
                    if !(url.starts_with("http://") || url.starts_with("https://")) {
                        anyhow::bail!(
                            "remote.log.storage.s3.endpoint: `{url}` is not an endpoint URL (it must start with http:// or https://)"
                        );
                    }
                }
                TierStore::S3 {
                    bucket,
                    endpoint,
                    region: c.raw("remote.log.storage.s3.region").trim().to_string(),
                    path_style: c.raw("remote.log.storage.s3.path.style").trim() == "true",
                    access_key,
                    secret_key,
                }
            }
            other => anyhow::bail!("remote.log.storage.type: `{other}` is neither local nor s3"),
        };
        Ok(Self {
            enabled: c.raw("remote.log.storage.system.enable").trim() == "true",
            store,
            task_interval_ms: num(c, "remote.log.manager.task.interval.ms")?,
            metadata_partitions: num(c, "remote.log.metadata.topic.num.partitions")?,
            index_cache_bytes: num(c, "remote.log.index.file.cache.total.size.bytes")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_off_with_a_directory_next_to_the_logs() {
        let mut c = BrokerConfig::default();
        c.set("log.dirs", "/data/a/logs").unwrap();
        let t = TierConfig::from_broker(&c).unwrap();
        assert!(!t.enabled);
        assert_eq!(
            t.store,
            TierStore::Local {
                dir: PathBuf::from("/data/a/logs/../remote-log-storage")
            }
        );
        assert_eq!(t.task_interval_ms, 30_000);
        assert_eq!(t.metadata_partitions, 16);
    }

    #[test]
    fn s3_needs_a_bucket_and_both_halves_of_a_key() {
        let mut c = BrokerConfig::default();
        c.set("remote.log.storage.type", "s3").unwrap();
        assert!(TierConfig::from_broker(&c).is_err(), "no bucket");
        c.set("remote.log.storage.s3.bucket", "tier").unwrap();
        c.set("remote.log.storage.s3.access.key.id", "k").unwrap();
        assert!(TierConfig::from_broker(&c).is_err(), "half a key");
        c.set("remote.log.storage.s3.secret.access.key", "s")
            .unwrap();
        c.set("remote.log.storage.s3.endpoint", "localhost:9000")
            .unwrap();
        assert!(TierConfig::from_broker(&c).is_err(), "not a URL");
        c.set("remote.log.storage.s3.endpoint", "http://127.0.0.1:9000")
            .unwrap();
        let t = TierConfig::from_broker(&c).unwrap();
        match t.store {
            TierStore::S3 {
                bucket, endpoint, ..
            } => {
                assert_eq!(bucket, "tier");
                assert_eq!(endpoint.as_deref(), Some("http://127.0.0.1:9000"));
            }
            other => panic!("{other:?}"),
        }
    }
}
