//! The long-term tier (KIP-405, RFC 0004) wired into the broker, with
//! `remote.log.storage.system.enable=true`:
//!
//! - **Metadata** (`metadata.rs`): every broker follows `__remote_log_metadata`
//!   (`crate::topic_follower`) into a [`TierMetadataCache`] of every partition's segments in
//!   the tier; the copier's records go out through [`TierPublisher`] with acks=all, since a
//!   reader acts on them.
//! - **Copy and expire** (`manager.rs`): every `remote.log.manager.task.interval.ms` the leader
//!   of each partition whose topic has `remote.storage.enable=true` copies its closed segments
//!   below the last stable offset that the tier lacks (`ferry_tier::SegmentCopier`), deletes
//!   copies that never finished, and deletes from the tier what `retention.ms` /
//!   `retention.bytes` / the log start offset expire (Kafka's `RLMExpirationTask`).
//!
//! Not yet (RFC 0004, "Broker wiring"): reads below the local log start, local retention of
//! copied segments, followers that start from the leader's local log start.

mod manager;
mod metadata;

use std::sync::Arc;

use anyhow::Context;
use ferry_config::tier_config::{TierConfig, TierStore};
use ferry_objstore::{LocalDirStore, ObjStoreMetrics, ObjectStore, S3Config, S3Store};
use ferry_tier::{RemoteSegmentStore, SegmentCopier};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::task::JoinSet;

use crate::host::HostHandles;
use crate::topic_follower::{self, Followed};
pub use metadata::{TierMetadataCache, TierPublisher};

/// The tier's figures, in the broker's registry (prefix `ferry_tier_`).
#[derive(Debug, Default, Clone)]
pub struct TierMetrics {
    pub segments_copied: Counter,
    pub bytes_copied: Counter,
    pub copy_errors: Counter,
    pub segments_deleted: Counter,
    pub delete_errors: Counter,
    /// Bytes in the tier of the partitions led here, as of the last pass.
    pub remote_bytes: Gauge,
}

impl TierMetrics {
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("tier");
        r.register(
            "segments_copied",
            "Closed segments this broker copied to the long-term tier",
            self.segments_copied.clone(),
        );
        r.register(
            "bytes_copied",
            "Bytes of segment logs this broker copied to the long-term tier",
            self.bytes_copied.clone(),
        );
        r.register(
            "copy_errors",
            "Segment copies to the long-term tier that failed (retried next pass)",
            self.copy_errors.clone(),
        );
        r.register(
            "segments_deleted",
            "Segments this broker deleted from the long-term tier (retention, unfinished copies)",
            self.segments_deleted.clone(),
        );
        r.register(
            "delete_errors",
            "Deletions from the long-term tier that failed (retried next pass)",
            self.delete_errors.clone(),
        );
        r.register(
            "remote_bytes",
            "Bytes in the long-term tier of the partitions this broker leads",
            self.remote_bytes.clone(),
        );
    }
}

/// The broker's long-term tier.
pub struct Tier {
    config: TierConfig,
    host: HostHandles,
    cache: Arc<TierMetadataCache>,
    publisher: Arc<TierPublisher>,
    copier: SegmentCopier,
    metrics: TierMetrics,
}

impl Tier {
    /// The tier, or `None` when `remote.log.storage.system.enable` is off. Opens (for a local
    /// directory: creates) the store; makes no network request.
    pub async fn open(
        config: TierConfig,
        host: HostHandles,
        store_metrics: &ObjStoreMetrics,
        metrics: TierMetrics,
    ) -> anyhow::Result<Option<Arc<Tier>>> {
        if !config.enabled {
            return Ok(None);
        }
        let store = open_store(&config.store, store_metrics)
            .await
            .context("setting up the long-term tier (remote.log.storage.*)")?;
        let publisher = Arc::new(TierPublisher::new(host.clone(), config.metadata_partitions));
        let copier = SegmentCopier::new(
            RemoteSegmentStore::new(store),
            publisher.clone(),
            host.node_id,
            host.clock.clone(),
        );
        Ok(Some(Arc::new(Tier {
            config,
            host,
            cache: Arc::new(TierMetadataCache::default()),
            publisher,
            copier,
            metrics,
        })))
    }

    /// Every partition's segments in the tier, as this broker has read them.
    pub fn cache(&self) -> &Arc<TierMetadataCache> {
        &self.cache
    }

    /// Starts following the metadata topic and the copy-and-expire passes.
    pub fn spawn(self: &Arc<Self>, tasks: &mut JoinSet<()>) {
        let followed = Followed {
            topic: ferry_tier::metadata::METADATA_TOPIC,
            purpose: ferry_metrics::PURPOSE_TIER_METADATA_READER,
            kind: ferry_metrics::TrafficKind::TierMetadataReader,
        };
        tasks.spawn(topic_follower::run(
            self.cache.clone(),
            followed,
            self.host.clone(),
        ));
        tasks.spawn(manager::run(self.clone()));
    }
}

async fn open_store(
    config: &TierStore,
    metrics: &ObjStoreMetrics,
) -> anyhow::Result<Arc<dyn ObjectStore>> {
    Ok(match config {
        TierStore::Local { dir } => {
            let store = LocalDirStore::new(dir)
                .with_context(|| format!("opening the tier directory {}", dir.display()))?;
            crate::remote_wal::store::wrap(store, metrics)
        }
        TierStore::S3 {
            bucket,
            endpoint,
            region,
            path_style,
            access_key,
            secret_key,
        } => {
            let store = S3Store::connect(&S3Config {
                bucket: bucket.clone(),
                region: region.clone(),
                endpoint: endpoint.clone(),
                force_path_style: *path_style,
                access_key: access_key.clone(),
                secret_key: secret_key.as_ref().map(|s| s.expose().to_string()),
                express_one_zone: false,
            })
            .await
            .with_context(|| format!("configuring the tier's S3 bucket {bucket}"))?;
            crate::remote_wal::store::wrap(store, metrics)
        }
    })
}
