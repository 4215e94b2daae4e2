//! Builds the broker's object stores: one per bucket of `remote.wal.buckets` (each
//! `ferry_objstore::metered_and_retried` over its backend, reached through its rack's endpoint of
//! `remote.wal.s3.endpoints` or the shared `remote.wal.s3.endpoint`), the one this broker uploads
//! to (its rack's), and the resolver the follower uses to read any bucket named in metadata.
//! Config checks guarantee that a bucket name leads to one endpoint, so resolving by name is
//! unambiguous.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use ferry_objstore::{LocalDirStore, ObjStoreMetrics, ObjectStore, RetryConfig, S3Config, S3Store};
use ferry_wal::fetcher::StoreResolver;

use ferry_config::remote_wal_config::{RemoteWalConfig, StoreKind};

/// Every bucket this broker can reach, by the name metadata records carry.
#[derive(Debug, Clone)]
pub struct Stores {
    by_bucket: BTreeMap<String, Arc<dyn ObjectStore>>,
    own: Option<Arc<dyn ObjectStore>>,
    /// `local`: the other racks' directories beside this broker's, opened when metadata first
    /// names one (a rack absent from `remote.wal.buckets` keeps its bucket there).
    siblings: Option<Arc<LocalSiblings>>,
}

/// The bucket directories under `remote.wal.local.dir`, opened for reading on first use.
#[derive(Debug)]
struct LocalSiblings {
    parent: PathBuf,
    metrics: ObjStoreMetrics,
    opened: Mutex<BTreeMap<String, Arc<dyn ObjectStore>>>,
}

impl LocalSiblings {
    /// The store of `bucket` when it is a directory directly under the parent; a name from
    /// metadata never opens a directory elsewhere.
    fn resolve(&self, bucket: &str) -> Option<Arc<dyn ObjectStore>> {
        let path = Path::new(bucket);
        let plain_name = matches!(path.components().next_back(), Some(Component::Normal(_)));
        if !plain_name || path.parent() != Some(self.parent.as_path()) {
            return None;
        }
        // A poisoned map only held stores; keep using it.
        let mut opened = self.opened.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(store) = opened.get(bucket) {
            return Some(store.clone());
        }
        let store = wrap(LocalDirStore::existing(path).ok()?, &self.metrics);
        opened.insert(bucket.to_string(), store.clone());
        Some(store)
    }
}

impl Stores {
    /// Opens (for `local`: creates) every configured bucket. Makes no network request.
    pub async fn open(config: &RemoteWalConfig, metrics: &ObjStoreMetrics) -> anyhow::Result<Self> {
        let mut by_bucket = BTreeMap::new();
        let mut own = None;
        for (rack, bucket) in &config.buckets {
            let store: Arc<dyn ObjectStore> = match &config.store {
                StoreKind::Local => {
                    let dir = LocalDirStore::new(bucket).with_context(|| {
                        format!("opening the remote WAL directory {bucket} of rack {rack}")
                    })?;
                    wrap(dir, metrics)
                }
                StoreKind::S3 {
                    region,
                    path_style,
                    access_key,
                    secret_key,
                    ..
                } => {
                    let s3 = S3Store::connect(&S3Config {
                        bucket: bucket.clone(),
                        region: region.clone(),
                        endpoint: config.store.endpoint_of(rack).map(str::to_string),
                        force_path_style: *path_style,
                        access_key: access_key.clone(),
                        secret_key: secret_key.as_ref().map(|s| s.expose().to_string()),
                        express_one_zone: false,
                    })
                    .await
                    .with_context(|| {
                        format!("configuring the S3 bucket {bucket} of rack {rack}")
                    })?;
                    wrap(s3, metrics)
                }
            };
            if *rack == config.rack {
                own = Some(store.clone());
            }
            by_bucket.insert(store.bucket().to_string(), store);
        }
        let siblings = config.local_dir.as_ref().map(|parent| {
            Arc::new(LocalSiblings {
                parent: parent.clone(),
                metrics: metrics.clone(),
                opened: Mutex::default(),
            })
        });
        Ok(Self {
            by_bucket,
            own,
            siblings,
        })
    }

    /// Stores given directly (tests).
    pub fn from_parts(
        by_bucket: BTreeMap<String, Arc<dyn ObjectStore>>,
        own: Option<Arc<dyn ObjectStore>>,
    ) -> Self {
        Self {
            by_bucket,
            own,
            siblings: None,
        }
    }

    /// The bucket of this broker's rack: where its uploader writes and its GC deletes.
    pub fn own(&self) -> Option<Arc<dyn ObjectStore>> {
        self.own.clone()
    }

    /// Every bucket's name.
    pub fn buckets(&self) -> Vec<String> {
        self.by_bucket.keys().cloned().collect()
    }

    pub fn get(&self, bucket: &str) -> Option<Arc<dyn ObjectStore>> {
        self.by_bucket.get(bucket).cloned()
    }

    /// For the WAL fetcher: a bucket named in metadata to its store (`None`: unknown bucket,
    /// whose slices the fetcher reports for the classic fetch).
    pub fn resolver(&self) -> StoreResolver {
        let stores = self.by_bucket.clone();
        let siblings = self.siblings.clone();
        Arc::new(move |bucket: &str| {
            stores
                .get(bucket)
                .cloned()
                .or_else(|| siblings.as_ref()?.resolve(bucket))
        })
    }
}

pub(crate) fn wrap<S: ObjectStore + 'static>(
    backend: S,
    metrics: &ObjStoreMetrics,
) -> Arc<dyn ObjectStore> {
    let retry = RetryConfig {
        max_attempts: 3,
        operation_timeout: std::time::Duration::from_secs(10),
        ..RetryConfig::default()
    };
    ferry_objstore::metered_and_retried(backend, metrics, retry)
}

#[cfg(test)]
#[path = "store_s3_test.rs"]
mod s3_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_config::broker_config::BrokerConfig;

    #[tokio::test]
    async fn local_buckets_resolve_by_the_name_metadata_carries() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        let mut c = BrokerConfig::default();
        c.set("broker.rack", "az1").unwrap();
        c.set(
            "remote.wal.buckets",
            &format!("az1={},az2={}", a.display(), b.display()),
        )
        .unwrap();
        let config = RemoteWalConfig::from_broker(&c).unwrap();
        let stores = Stores::open(&config, &ObjStoreMetrics::new())
            .await
            .unwrap();
        let own = stores.own().unwrap();
        assert_eq!(own.bucket(), a.display().to_string());
        own.put("wal/1/x", bytes::Bytes::from_static(b"hi"))
            .await
            .unwrap();
        let resolve = stores.resolver();
        let other = resolve(&b.display().to_string()).unwrap();
        assert!(other.head("wal/1/x").await.unwrap().is_none());
        let same = resolve(own.bucket()).unwrap();
        assert_eq!(same.get("wal/1/x").await.unwrap().as_ref(), b"hi");
        assert!(resolve("nope").is_none());
    }

    /// With only `remote.wal.local.dir`, each broker knows its own rack's directory; a follower
    /// still reads another rack's objects from the directory beside it (before, it found no
    /// store and every slice went by the classic fetch), and never a directory elsewhere.
    #[tokio::test]
    async fn other_racks_directories_under_the_local_dir_resolve_on_first_use() {
        let dir = tempfile::tempdir().unwrap();
        let parent = dir.path().join("wal");
        let config_of = |rack: &str| {
            let mut c = BrokerConfig::default();
            c.set("broker.rack", rack).unwrap();
            c.set("remote.wal.local.dir", &parent.display().to_string())
                .unwrap();
            RemoteWalConfig::from_broker(&c).unwrap()
        };
        let metrics = ObjStoreMetrics::new();
        let in_az1 = Stores::open(&config_of("az1"), &metrics).await.unwrap();
        let in_az2 = Stores::open(&config_of("az2"), &metrics).await.unwrap();
        let az1 = in_az1.own().unwrap();
        az1.put("wal/1/x", bytes::Bytes::from_static(b"hi"))
            .await
            .unwrap();
        let resolve = in_az2.resolver();
        let read = resolve(az1.bucket()).expect("az1's directory beside az2's");
        assert_eq!(read.get("wal/1/x").await.unwrap().as_ref(), b"hi");
        // Nothing outside the parent, nothing that is not there.
        let outside = dir.path().join("elsewhere");
        std::fs::create_dir_all(&outside).unwrap();
        assert!(resolve(&outside.display().to_string()).is_none());
        assert!(resolve(&parent.join("..").join("elsewhere").display().to_string()).is_none());
        assert!(resolve(&parent.join("az9").display().to_string()).is_none());
    }
}
