//! The replica manager: the partitions this broker hosts, and the one path by which records
//! are appended to and read from their logs.
//!
//! On a single node every partition is led here with leader epoch 0 and the in-sync replica set
//! is this broker alone, so the high watermark is the log end offset. Each append publishes the
//! new log end offset on the partition's watch channel; long-polling fetches wait on it.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use ferry_common::TopicPartition;
use ferry_log::{AppendInfo, FetchData, LogConfig, LogError, LogManager, PartitionLog};
use tokio::sync::watch;
use uuid::Uuid;

use crate::metadata::TopicMeta;

/// One partition hosted by this broker.
pub struct Partition {
    pub tp: TopicPartition,
    pub topic_id: Uuid,
    pub log: Arc<PartitionLog>,
    pub leader_epoch: i32,
    end_offset: watch::Sender<i64>,
}

impl Partition {
    /// Offsets below this are committed and visible to consumers.
    pub fn high_watermark(&self) -> i64 {
        self.log.log_end_offset()
    }

    /// Last stable offset: no transactions yet, so it equals the high watermark.
    pub fn last_stable_offset(&self) -> i64 {
        self.high_watermark()
    }

    pub fn subscribe(&self) -> watch::Receiver<i64> {
        self.end_offset.subscribe()
    }

    pub fn append(&self, records: &[u8]) -> Result<AppendInfo, LogError> {
        let info = self.log.append_as_leader(records, self.leader_epoch)?;
        if !info.duplicate {
            self.end_offset.send_replace(info.last_offset + 1);
        }
        Ok(info)
    }

    /// Committed data only (up to the high watermark), up to `max_bytes` of whole batches.
    ///
    /// A log read stops at the end of a segment; this keeps reading the next segments until
    /// `max_bytes` is used up, so that a consumer never receives a response made only of the
    /// (possibly empty) tail of one segment while more data follows, which clients such as
    /// librdkafka report as a message too large to fetch.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
    ) -> Result<FetchData, LogError> {
        let high_watermark = self.high_watermark();
        let first = self
            .log
            .read(offset, max_bytes, high_watermark, min_one_batch)?;
        let mut next = match last_offset_of(&first.records) {
            Some(last) => last + 1,
            None => return Ok(first),
        };
        if first.records.len() >= max_bytes || next >= high_watermark {
            return Ok(first);
        }
        let mut combined = bytes::BytesMut::from(&first.records[..]);
        while combined.len() < max_bytes && next < high_watermark {
            let more = self
                .log
                .read(next, max_bytes - combined.len(), high_watermark, false)?;
            let Some(last) = last_offset_of(&more.records) else {
                break;
            };
            combined.extend_from_slice(&more.records);
            if last < next {
                break;
            }
            next = last + 1;
        }
        Ok(FetchData {
            records: combined.freeze(),
            ..first
        })
    }
}

/// The last offset of the last whole batch in `records` (v2 batch headers: base offset at 0,
/// batch length at 8, last offset delta at 23).
fn last_offset_of(records: &[u8]) -> Option<i64> {
    let mut pos = 0usize;
    let mut last = None;
    while records.len() >= pos + 27 {
        let base = i64::from_be_bytes(records[pos..pos + 8].try_into().ok()?);
        let len = i32::from_be_bytes(records[pos + 8..pos + 12].try_into().ok()?);
        let delta = i32::from_be_bytes(records[pos + 23..pos + 27].try_into().ok()?);
        let end = pos + 12 + usize::try_from(len).ok()?;
        if len < 0 || end > records.len() {
            break;
        }
        last = Some(base + i64::from(delta));
        pos = end;
    }
    last
}

pub struct ReplicaManager {
    logs: LogManager,
    partitions: RwLock<HashMap<TopicPartition, Arc<Partition>>>,
}

impl ReplicaManager {
    pub fn new(logs: LogManager) -> Self {
        Self {
            logs,
            partitions: RwLock::new(HashMap::new()),
        }
    }

    pub fn logs(&self) -> &LogManager {
        &self.logs
    }

    pub fn partition(&self, tp: &TopicPartition) -> Option<Arc<Partition>> {
        self.read().get(tp).cloned()
    }

    pub fn partition_of(&self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        self.partition(&TopicPartition::new(topic, partition))
    }

    pub fn all(&self) -> Vec<Arc<Partition>> {
        self.read().values().cloned().collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<TopicPartition, Arc<Partition>>> {
        self.partitions.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<TopicPartition, Arc<Partition>>> {
        self.partitions.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens (or creates) the logs of every partition of `topic` not hosted yet.
    pub fn ensure_topic(&self, topic: &TopicMeta, config: LogConfig) -> Result<(), LogError> {
        for p in 0..topic.partitions {
            let tp = TopicPartition::new(topic.name.clone(), p);
            if self.read().contains_key(&tp) {
                continue;
            }
            let log = self.logs.get_or_create(&tp, config.clone())?;
            let (end_offset, _) = watch::channel(log.log_end_offset());
            let partition = Arc::new(Partition {
                tp: tp.clone(),
                topic_id: topic.id,
                log,
                leader_epoch: 0,
                end_offset,
            });
            self.write().insert(tp, partition);
        }
        Ok(())
    }

    pub fn update_topic_config(&self, topic: &str, config: &LogConfig) {
        for p in self.read().values().filter(|p| p.tp.topic == topic) {
            p.log.update_config(config.clone());
        }
    }

    /// Stops hosting a topic's partitions and deletes their logs.
    pub fn delete_topic(&self, topic: &str) -> Result<(), LogError> {
        let removed: Vec<Arc<Partition>> = {
            let mut map = self.write();
            let keys: Vec<TopicPartition> =
                map.keys().filter(|tp| tp.topic == topic).cloned().collect();
            keys.iter().filter_map(|k| map.remove(k)).collect()
        };
        for p in removed {
            // Wake fetchers so they notice the partition is gone.
            p.end_offset.send_replace(-1);
            self.logs.delete(&p.tp)?;
        }
        Ok(())
    }

    pub fn shutdown(&self) -> Result<(), LogError> {
        self.logs.shutdown()
    }
}
