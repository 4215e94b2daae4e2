//! Appends ferry's own keyed records to an internal topic that records of one data partition
//! share a partition of (`__remote_wal_log_metadata`, `__remote_log_metadata`): creates the topic
//! on first use, groups records by the partition the caller chose, appends locally where this
//! broker leads that partition and sends a Produce to its leader elsewhere.
//!
//! Acknowledgement, per send: `acks=1`, `Ok` once each partition's leader appended the records;
//! `acks=all`, once every written partition's high watermark passed them: a local append waits
//! on the partition's watch (no polling) as the delayed-produce purgatory does, with Kafka's
//! `min.insync.replicas` checks; a remote leader is sent `acks=-1` and answers from its
//! purgatory. Both are bounded by [`PUBLISH_TIMEOUT`]; a timeout, a lost leadership or a refusal
//! is an error. Nothing is retried here: callers decide.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use ferry_cluster::BrokerId;
use ferry_config::broker_config::BrokerConfig;
use ferry_metrics::{inter_broker_client_id, TrafficKind};
use futures::FutureExt;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;

use crate::host::HostHandles;
use crate::inter_broker::Connection;
use crate::replica_manager::{CommitStatus, Partition};

/// How long an acks=all send waits for the partitions' high watermarks (the Produce
/// `timeout_ms` of a remote leader).
pub const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one produce may take before its connection is dropped: longer than the remote
/// leader's own wait, so its REQUEST_TIMED_OUT answer arrives first.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(7);

/// One record: key, and value (`None`: a tombstone).
pub type KeyedRecord = (Bytes, Option<Bytes>);

/// The topic a producer writes and how it is created and labelled.
#[derive(Debug, Clone)]
pub struct TopicSpec {
    pub topic: &'static str,
    /// Partitions it is created with.
    pub partitions: i32,
    /// Configs it is created with, from the broker's.
    pub configs: fn(&BrokerConfig) -> BTreeMap<String, String>,
    /// The purpose in the producer's inter-broker client id.
    pub purpose: &'static str,
    /// The kind its produce connections are counted as.
    pub kind: TrafficKind,
}

/// Encodes records as one v2 batch (offsets relative; the leader assigns them). Keys and values
/// of metadata repeat ids and names and replicate across racks, so they are compressed.
pub fn encode_batch(records: &[KeyedRecord], now_ms: i64) -> anyhow::Result<Bytes> {
    ferry_log::keyed_records::encode(records.iter().cloned(), now_ms, Compression::Lz4)
        .map_err(|e| anyhow::anyhow!("keyed records: {e}"))
}

/// Writes one internal topic.
#[derive(Debug)]
pub struct KeyedTopicProducer {
    spec: TopicSpec,
    /// One connection per partition leader, each used by one request at a time (requests to
    /// different leaders run concurrently).
    conns: std::sync::Mutex<HashMap<BrokerId, Arc<tokio::sync::Mutex<Option<Connection>>>>>,
    create: tokio::sync::Mutex<()>,
}

impl KeyedTopicProducer {
    pub fn new(spec: TopicSpec) -> Self {
        Self {
            spec,
            conns: std::sync::Mutex::new(HashMap::new()),
            create: tokio::sync::Mutex::new(()),
        }
    }

    pub fn topic(&self) -> &'static str {
        self.spec.topic
    }

    /// The topic's partition count, `None` before it exists.
    pub fn partitions(&self, host: &HostHandles) -> Option<i32> {
        host.metadata.topic(self.spec.topic).map(|t| t.partitions)
    }

    /// Creates the topic if it does not exist yet (another broker may win the race).
    pub async fn ensure_topic(&self, host: &HostHandles) -> anyhow::Result<()> {
        let topic = self.spec.topic;
        if host.metadata.topic(topic).is_some() {
            return Ok(());
        }
        let _one = self.create.lock().await;
        if host.metadata.topic(topic).is_some() {
            return Ok(());
        }
        let h = host.clone();
        let partitions = self.spec.partitions;
        let configs = (self.spec.configs)(&host.config);
        let created = tokio::task::spawn_blocking(move || {
            let rf = h.live_broker_count().clamp(1, 3) as i16;
            h.metadata
                .create_topic(topic, partitions, rf, configs)
                .map(|meta| {
                    let _ = h.open_topic(&meta.name);
                })
        })
        .await
        .context("internal topic creation task")?;
        match created {
            Ok(()) => {
                tracing::info!(partitions, "created {topic}");
                Ok(())
            }
            Err(_) if host.metadata.topic(topic).is_some() => Ok(()),
            Err(e) => Err(anyhow::anyhow!("creating {topic}: {e}")),
        }
    }

    /// Appends `records`, each to the partition given with it, and waits as `acks_all` says
    /// (see the module doc). `on_batch` is told the size of each batch sent.
    pub async fn send(
        &self,
        host: &HostHandles,
        records: Vec<(i32, KeyedRecord)>,
        acks_all: bool,
        on_batch: &(dyn Fn(usize) + Sync),
    ) -> anyhow::Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let topic = self.spec.topic;
        self.ensure_topic(host).await?;
        let replicas = host.replicas().context("broker is shutting down")?;
        let mut by_partition: BTreeMap<i32, Vec<KeyedRecord>> = BTreeMap::new();
        for (p, r) in records {
            by_partition.entry(p).or_default().push(r);
        }
        let now = host.clock.now_ms();
        let deadline = tokio::time::Instant::now() + PUBLISH_TIMEOUT;
        let mut remote: BTreeMap<BrokerId, Vec<(i32, Bytes)>> = BTreeMap::new();
        let mut local = Vec::new();
        for (p, recs) in by_partition {
            let batch = encode_batch(&recs, now)?;
            on_batch(batch.len());
            match replicas.partition_of(topic, p) {
                Some(part) if part.is_leader() => {
                    let committed = if acks_all {
                        let min_isr = min_insync_replicas(host, topic);
                        append_committed(part, batch, min_isr, deadline).left_future()
                    } else {
                        let appended = part.append(&batch).map(|_| ()).map_err(Into::into);
                        futures::future::ready(appended).right_future()
                    };
                    local.push(async move {
                        committed
                            .await
                            .with_context(|| format!("publishing to {topic}-{p}"))
                    });
                }
                _ => {
                    let (leader, _) = host.metadata.leader_of(topic, p);
                    if leader < 0 {
                        anyhow::bail!("{topic}-{p} has no leader");
                    }
                    remote.entry(leader).or_default().push((p, batch));
                }
            }
        }
        // Local waits and remote produces all run at once; each is bounded by the deadline.
        let remote = remote
            .into_iter()
            .map(|(leader, batches)| self.produce_remote(host, leader, batches, acks_all));
        let (local, remote) = futures::join!(
            futures::future::join_all(local),
            futures::future::join_all(remote)
        );
        local.into_iter().chain(remote).collect()
    }

    async fn produce_remote(
        &self,
        host: &HostHandles,
        leader: BrokerId,
        batches: Vec<(i32, Bytes)>,
        acks_all: bool,
    ) -> anyhow::Result<()> {
        let topic = self.spec.topic;
        let request = produce_request(topic, batches, acks_all);
        let slot = self
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(leader)
            .or_default()
            .clone();
        let mut conn = slot.lock().await;
        if conn.is_none() {
            *conn = Some(host.peers.connect(leader, self.spec.kind).await?);
        }
        let Some(c) = conn.as_mut() else {
            anyhow::bail!("no connection to broker {leader}");
        };
        let client_id = inter_broker_client_id(host.node_id, self.spec.purpose);
        let result = tokio::time::timeout(REQUEST_TIMEOUT, c.produce(&request, &client_id)).await;
        let response = match result {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                *conn = None;
                return Err(e);
            }
            Err(_) => {
                *conn = None;
                anyhow::bail!("produce to broker {leader} timed out");
            }
        };
        for t in &response.responses {
            for p in &t.partition_responses {
                if p.error_code != 0 {
                    anyhow::bail!(
                        "{topic}-{} refused by broker {leader}: error {}",
                        p.index,
                        p.error_code
                    );
                }
            }
        }
        Ok(())
    }
}

/// The Produce of batches to a remote leader: acks=all (answered by its purgatory within
/// [`PUBLISH_TIMEOUT`]) or acks=1.
pub(crate) fn produce_request(
    topic: &'static str,
    batches: Vec<(i32, Bytes)>,
    acks_all: bool,
) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(if acks_all { -1 } else { 1 })
        .with_timeout_ms(i32::try_from(PUBLISH_TIMEOUT.as_millis()).unwrap_or(i32::MAX))
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str(topic)))
            .with_partition_data(
                batches
                    .into_iter()
                    .map(|(p, b)| {
                        PartitionProduceData::default()
                            .with_index(p)
                            .with_records(Some(b))
                    })
                    .collect(),
            )])
}

/// The topic's `min.insync.replicas` (the broker default unless overridden).
fn min_insync_replicas(host: &HostHandles, topic: &str) -> usize {
    let image = host.metadata.image();
    image
        .topic(topic)
        .and_then(|t| {
            ferry_config::topic_config::effective(&host.config, &t.configs, "min.insync.replicas")
        })
        .and_then(|(v, _)| v.trim().parse::<usize>().ok())
        .unwrap_or(1)
}

/// Appends `batch` to the partition `part` led here, at once (so sends keep their order), and
/// returns what then waits, event-driven, until the high watermark passes it (acks=all, with
/// Kafka's `min.insync.replicas` checks before and after), the leadership at the epoch of the
/// append is lost, or `deadline` passes.
pub(crate) fn append_committed(
    part: Arc<Partition>,
    batch: Bytes,
    min_isr: usize,
    deadline: tokio::time::Instant,
) -> impl std::future::Future<Output = anyhow::Result<()>> {
    let appended = (|| {
        let isr = part.isr().len();
        if isr < min_isr {
            anyhow::bail!("the ISR has {isr} members, below min.insync.replicas {min_isr}");
        }
        let epoch = part.leader_epoch();
        let info = part.append(&batch)?;
        Ok((epoch, info.last_offset + 1))
    })();
    async move {
        let (epoch, end) = appended?;
        // Subscribed before the first look, so a move in between is not missed.
        let mut changes = part.subscribe();
        loop {
            match part.commit_status(epoch, end) {
                CommitStatus::Committed => break,
                CommitStatus::LeadershipLost => {
                    anyhow::bail!("the leadership moved before the records were committed")
                }
                CommitStatus::Pending => {}
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => anyhow::bail!("the partition was deleted"),
                Err(_) => anyhow::bail!(
                    "the in-sync replicas did not acknowledge the records within {PUBLISH_TIMEOUT:?}"
                ),
            }
        }
        let isr = part.isr().len();
        if isr < min_isr {
            anyhow::bail!(
                "committed while the ISR had shrunk to {isr}, below min.insync.replicas {min_isr}"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// acks=all holds also when the partition is led elsewhere.
    #[test]
    fn a_remote_leader_is_asked_for_the_acks_of_the_send() {
        let r = produce_request("t", vec![(3, Bytes::from_static(b"x"))], true);
        assert_eq!(r.acks, -1);
        let r = produce_request("t", vec![(3, Bytes::from_static(b"x"))], false);
        assert_eq!(r.acks, 1);
        assert_eq!(
            r.timeout_ms,
            i32::try_from(PUBLISH_TIMEOUT.as_millis()).unwrap()
        );
    }

    /// Led here: an acks=all send returns once every in-sync replica holds the records, not at
    /// the local append, so a leader failover cannot lose what was reported as published.
    #[tokio::test]
    async fn a_local_send_returns_once_the_isr_holds_the_records() {
        use crate::remote_wal::test_support::{batch, replicas, topic};
        let dir = tempfile::tempdir().unwrap();
        let rm = replicas(dir.path(), 1, &topic(1, 0));
        let p = rm.partition_of("t", 0).unwrap();
        let far = tokio::time::Instant::now() + Duration::from_secs(3_600);
        let publish = tokio::spawn(append_committed(p.clone(), batch(2), 2, far));
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(p.log.log_end_offset(), 2, "appended at once");
        assert!(!publish.is_finished(), "no follower holds the records yet");
        p.record_follower_fetch(2, 2);
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(
            !publish.is_finished(),
            "follower 3 is in the ISR and lacks them"
        );
        p.record_follower_fetch(3, 2);
        publish.await.unwrap().unwrap();
    }

    /// A send that cannot be acknowledged is an error: the ISR does not catch up by the
    /// deadline, the leadership moves, or the ISR is below `min.insync.replicas` before the
    /// append.
    #[tokio::test]
    async fn a_local_send_not_acknowledged_is_an_error() {
        use crate::remote_wal::test_support::{batch, replicas, topic};
        let dir = tempfile::tempdir().unwrap();
        let rm = replicas(dir.path(), 1, &topic(1, 0));
        let p = rm.partition_of("t", 0).unwrap();
        let now = tokio::time::Instant::now();
        let timed_out = append_committed(p.clone(), batch(1), 1, now).await;
        assert!(timed_out.is_err());

        let far = now + Duration::from_secs(3_600);
        let waiting = tokio::spawn(append_committed(p.clone(), batch(1), 1, far));
        tokio::task::yield_now().await;
        rm.ensure_topic(&topic(2, 1), ferry_log::LogConfig::default())
            .unwrap();
        let lost = waiting.await.unwrap().unwrap_err().to_string();
        assert!(lost.contains("leadership"), "{lost}");

        let rm = replicas(&dir.path().join("b"), 1, &topic(1, 0));
        let p = rm.partition_of("t", 0).unwrap();
        let refused = append_committed(p.clone(), batch(1), 4, far).await;
        assert!(refused.is_err());
        assert_eq!(p.log.log_end_offset(), 0, "nothing appended");
    }
}
