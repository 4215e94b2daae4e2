//! Shared pieces of the remote-WAL glue tests: leaders, followers and buckets in one process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use ferry_cluster::image::TopicImage;
use ferry_log::{LogConfig, LogManager};
use ferry_objstore::{MemoryStore, ObjectStore};
use ferry_wal::metadata::WalSliceMetadata;
use ferry_wal::uploader::{MetadataPublisher, Uploader, UploaderConfig};

use super::Shared;
use crate::replica_manager::ReplicaManager;
use ferry_config::broker_config::BrokerConfig;
use ferry_config::remote_wal_config::RemoteWalConfig;
use ferry_wal::metrics::RemoteWalMetrics;

/// A metadata publisher that keeps what it was given.
#[derive(Debug, Default)]
pub struct Capture(pub Mutex<Vec<WalSliceMetadata>>);

#[async_trait]
impl MetadataPublisher for Capture {
    async fn publish(&self, records: Vec<WalSliceMetadata>) -> ferry_wal::Result<()> {
        self.0.lock().unwrap().extend(records);
        Ok(())
    }
}

impl Capture {
    pub fn take(&self) -> Vec<WalSliceMetadata> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// A v2 batch of `n` small records.
pub fn batch(n: usize) -> Bytes {
    batch_at(0, n)
}

/// A v2 batch of `n` small records from offset `base` (what a follower appends at its log end),
/// one batch per record.
pub fn batch_at(base: i64, n: usize) -> Bytes {
    ferry_test_support::Batches::of(n, |i| format!("value-{i}"))
        .at(base)
        .batch_per_record()
        .encode()
}

/// Topic `t` (one partition, replicas 1..=3) led by `leader` at `leader_epoch`.
pub fn topic(leader: i32, leader_epoch: i32) -> TopicImage {
    ferry_test_support::Topic::default()
        .leader(leader, leader_epoch)
        .image()
}

/// Broker `node`'s replica manager under `dir`, following `image`.
pub fn replicas(dir: &std::path::Path, node: i32, image: &TopicImage) -> ReplicaManager {
    let logs = LogManager::open(
        vec![dir.join(node.to_string())],
        ferry_common::system_clock(),
    )
    .unwrap();
    let rm = ReplicaManager::new(logs, node);
    rm.ensure_topic(image, LogConfig::default()).unwrap();
    rm
}

/// Glue state with default `remote.wal.*` configs and no broker.
pub fn shared() -> Arc<Shared> {
    Arc::new(Shared {
        config: RemoteWalConfig::from_broker(&BrokerConfig::default()).unwrap(),
        metrics: RemoteWalMetrics::new(),
        host: None,
        tier: None,
        topics: std::sync::RwLock::new(HashMap::new()),
    })
}

/// A memory bucket named `name` with an uploader publishing into a [`Capture`].
pub fn bucket(name: &str) -> (Arc<dyn ObjectStore>, Uploader, Arc<Capture>) {
    let store: Arc<dyn ObjectStore> =
        Arc::new(MemoryStore::with_clock(name, ferry_common::system_clock()));
    let capture = Arc::new(Capture::default());
    let uploader = Uploader::new(
        UploaderConfig::default(),
        store.clone(),
        capture.clone(),
        ferry_common::system_clock(),
    );
    (store, uploader, capture)
}
