//! The partitions of an internal topic that a coordinator writes (`__consumer_offsets` for the
//! group coordinator, `__transaction_state` for the transaction coordinator): records are
//! appended to the partitions led here through the replica manager like an acks=all produce,
//! and read back up to the log end when this broker is elected leader of a partition. Each
//! coordinator's store maps the errors to the codes its APIs answer.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use ferry_common::SharedClock;
use kafka_protocol::error::ResponseError;

use crate::replica_manager::{CommitStatus, Partition};

/// Why an append or read failed: the Kafka error of the produce it resembles, and a message.
pub type LogFailure = (ResponseError, String);

/// An append in the leader's log: the offset after it, and a future that resolves when the
/// in-sync replicas hold it.
pub struct InternalAppend {
    pub end_offset: i64,
    pub durable: std::pin::Pin<Box<dyn Future<Output = Result<(), LogFailure>> + Send>>,
}

/// The hosted partitions of one internal topic, known once the topic exists.
pub struct InternalTopicLog {
    topic: &'static str,
    partitions: RwLock<HashMap<i32, Arc<Partition>>>,
    ready: AtomicBool,
    /// `min.insync.replicas` of the topic: fewer in-sync replicas refuse an append.
    min_isr: AtomicI32,
    /// How long an append may wait for the in-sync replicas.
    commit_timeout: Duration,
    clock: SharedClock,
}

impl InternalTopicLog {
    pub fn new(topic: &'static str, clock: SharedClock, commit_timeout: Duration) -> Self {
        Self {
            topic,
            partitions: RwLock::new(HashMap::new()),
            ready: AtomicBool::new(false),
            min_isr: AtomicI32::new(1),
            commit_timeout,
            clock,
        }
    }

    pub fn topic(&self) -> &'static str {
        self.topic
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Takes the partitions hosted here (the replica manager's) and the topic's
    /// `min.insync.replicas`.
    pub fn set_partitions(&self, partitions: Vec<Arc<Partition>>, min_isr: i32) {
        let map = partitions
            .into_iter()
            .map(|p| (p.tp.partition, p))
            .collect();
        *self.partitions.write().unwrap_or_else(|p| p.into_inner()) = map;
        self.min_isr.store(min_isr.max(1), Ordering::Release);
        self.ready.store(true, Ordering::Release);
    }

    /// A hosted partition (NOT_LEADER_OR_FOLLOWER when it is not hosted here).
    pub fn partition(&self, p: i32) -> Result<Arc<Partition>, LogFailure> {
        self.partitions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&p)
            .cloned()
            .ok_or_else(|| {
                (
                    ResponseError::NotLeaderOrFollower,
                    format!("partition {p} of {} is not hosted here", self.topic),
                )
            })
    }

    /// Appends the record batches `records` to partition `p`, which this broker must lead with
    /// enough in-sync replicas (NOT_ENOUGH_REPLICAS otherwise, as for an acks=all produce).
    pub fn append(&self, p: i32, records: &[u8]) -> Result<InternalAppend, LogFailure> {
        let p = self.led_partition(p)?;
        let min_isr = self.min_isr.load(Ordering::Acquire);
        let isr = i32::try_from(p.isr().len()).unwrap_or(i32::MAX);
        if isr < min_isr {
            return Err((
                ResponseError::NotEnoughReplicas,
                format!(
                    "{}: min.insync.replicas is {min_isr} but the in-sync replica set has {isr} member(s)",
                    p.tp
                ),
            ));
        }
        let epoch = p.leader_epoch();
        let info = p
            .append(records)
            .map_err(|e| (crate::errors::log_error(&e), e.to_string()))?;
        let end_offset = info.last_offset + 1;
        Ok(InternalAppend {
            end_offset,
            durable: Box::pin(committed(p, epoch, end_offset, self.commit_timeout)),
        })
    }

    /// The log end of partition `p` (its next offset), for an append with nothing to write.
    pub fn log_end(&self, p: i32) -> Result<i64, LogFailure> {
        Ok(self.led_partition(p)?.log.log_end_offset())
    }

    /// A hosted partition this broker leads (NOT_LEADER_OR_FOLLOWER otherwise).
    fn led_partition(&self, p: i32) -> Result<Arc<Partition>, LogFailure> {
        let p = self.partition(p)?;
        if !p.is_leader() {
            return Err((
                ResponseError::NotLeaderOrFollower,
                format!("{} is not led by this broker", p.tp),
            ));
        }
        Ok(p)
    }

    /// Reads partition `p` from its start to its log end, as Kafka's coordinators load on
    /// election (a new leader's log is the partition's truth, and its high watermark catches up
    /// to it): `each` gets every chunk of batches with the offset it was read from and returns
    /// the offset after the last record it saw.
    pub fn read_to_end(
        &self,
        p: i32,
        mut each: impl FnMut(Bytes, i64) -> Result<i64, String>,
    ) -> Result<(), LogFailure> {
        let p = self.partition(p)?;
        let unavailable = |e: String| (ResponseError::CoordinatorNotAvailable, e);
        let mut offset = p.log.log_start_offset();
        let end = p.log.log_end_offset();
        while offset < end {
            let data = p
                .log
                .read(offset, 1 << 20, end, true)
                .map_err(|e| unavailable(e.to_string()))?;
            if data.records.is_empty() {
                break;
            }
            let next =
                each(data.records, offset).map_err(|e| unavailable(format!("{}: {e}", p.tp)))?;
            if next <= offset {
                break;
            }
            offset = next;
        }
        Ok(())
    }
}

/// Resolves when the high watermark of `p` reaches `end_offset` while this broker still leads
/// it at `epoch`: NOT_LEADER_OR_FOLLOWER once leadership moved, REQUEST_TIMED_OUT after
/// `timeout`.
pub(crate) async fn committed(
    p: Arc<Partition>,
    epoch: i32,
    end_offset: i64,
    timeout: Duration,
) -> Result<(), LogFailure> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut changes = p.subscribe();
    loop {
        match p.commit_status(epoch, end_offset) {
            CommitStatus::Committed => return Ok(()),
            CommitStatus::LeadershipLost => {
                return Err((
                    ResponseError::NotLeaderOrFollower,
                    format!(
                        "leadership of {} moved before the ISR held the records",
                        p.tp
                    ),
                ))
            }
            CommitStatus::Pending => {}
        }
        match tokio::time::timeout_at(deadline, changes.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => {
                return Err((
                    ResponseError::NotLeaderOrFollower,
                    format!("{} is no longer hosted here", p.tp),
                ))
            }
            Err(_) => {
                return Err((
                    ResponseError::RequestTimedOut,
                    format!(
                        "the in-sync replicas of {} did not acknowledge in time",
                        p.tp
                    ),
                ))
            }
        }
    }
}
