//! `PublishSequencer`: the pure part of the uploader that turns upload completions, arriving in
//! any order, into metadata to publish in offset order per partition (see `uploader.rs` for the
//! invariants it keeps: a partition's slice is released only when every earlier object holding
//! that partition has resolved; a failed object's slices become classic fallbacks).

use std::collections::{HashMap, VecDeque};

use ferry_common::TopicPartition;

use crate::batcher::{
    push_fallback, ClassicFallback, FallbackReason, PendingObject, PendingSlice, WalPartition,
};
use crate::metadata::WalSliceMetadata;

/// How one object's upload ended, as the sequencer needs it.
#[derive(Debug, Clone)]
pub(crate) enum UploadResult {
    Uploaded { bucket: String, upload_time_ms: i64 },
    Failed(FallbackReason),
}

#[derive(Debug)]
struct Tracked {
    key: String,
    object_size: u64,
    slices: Vec<PendingSlice>,
    result: Option<UploadResult>,
    unreleased: usize,
}

/// What became publishable after a completion, in per-partition offset order.
#[derive(Debug, Default)]
pub(crate) struct Released {
    pub publish: Vec<(TopicPartition, WalSliceMetadata)>,
    pub fallbacks: Vec<ClassicFallback>,
}

impl Released {
    /// Adds what a later completion released, after what is here.
    pub fn append(&mut self, later: Released) {
        self.publish.extend(later.publish);
        self.fallbacks.extend(later.fallbacks);
    }
}

/// Orders upload completions into per-partition offset order (pure; see the module docs).
#[derive(Debug)]
pub(crate) struct PublishSequencer {
    broker_id: i32,
    /// Per partition: (object seq, slice index) in cut order.
    queues: HashMap<WalPartition, VecDeque<(u64, usize)>>,
    objects: HashMap<u64, Tracked>,
}

impl PublishSequencer {
    pub(crate) fn new(broker_id: i32) -> Self {
        Self {
            broker_id,
            queues: HashMap::new(),
            objects: HashMap::new(),
        }
    }

    /// Registers a cut object; must be called in cut order, before its completion.
    pub(crate) fn register(&mut self, obj: &PendingObject) {
        for (i, s) in obj.slices.iter().enumerate() {
            let wp = WalPartition {
                topic_id: s.entry.info.topic_id,
                partition: s.entry.info.partition,
            };
            self.queues.entry(wp).or_default().push_back((obj.seq, i));
        }
        self.objects.insert(
            obj.seq,
            Tracked {
                key: obj.key.to_string(),
                object_size: obj.data.len(),
                slices: obj.slices.clone(),
                result: None,
                unreleased: obj.slices.len(),
            },
        );
    }

    /// Records how object `seq` ended and returns everything that may now be published.
    pub(crate) fn complete(&mut self, seq: u64, result: UploadResult) -> Released {
        let mut out = Released::default();
        let Some(tracked) = self.objects.get_mut(&seq) else {
            return out;
        };
        tracked.result = Some(result);
        let mut touched: Vec<WalPartition> = tracked
            .slices
            .iter()
            .map(|s| WalPartition {
                topic_id: s.entry.info.topic_id,
                partition: s.entry.info.partition,
            })
            .collect();
        touched.dedup();
        for wp in touched {
            self.drain(wp, &mut out);
        }
        out
    }

    fn drain(&mut self, wp: WalPartition, out: &mut Released) {
        let Some(queue) = self.queues.get_mut(&wp) else {
            return;
        };
        while let Some(&(seq, i)) = queue.front() {
            let Some(tracked) = self.objects.get_mut(&seq) else {
                queue.pop_front();
                continue;
            };
            let Some(result) = &tracked.result else {
                break;
            };
            queue.pop_front();
            let Some(slice) = tracked.slices.get(i) else {
                continue;
            };
            let e = slice.entry;
            match result {
                UploadResult::Uploaded {
                    bucket,
                    upload_time_ms,
                } => out.publish.push((
                    slice.tp.clone(),
                    WalSliceMetadata {
                        bucket: bucket.clone(),
                        object_key: tracked.key.clone(),
                        byte_position: e.position,
                        byte_length: e.length,
                        topic_id: e.info.topic_id,
                        partition: e.info.partition,
                        base_offset: e.info.base_offset,
                        last_offset: e.info.last_offset,
                        leader_epoch: e.info.leader_epoch,
                        slice_crc: e.crc,
                        object_size: tracked.object_size,
                        uploader_broker_id: self.broker_id,
                        upload_time_ms: *upload_time_ms,
                    },
                )),
                UploadResult::Failed(reason) => push_fallback(
                    &mut out.fallbacks,
                    ClassicFallback {
                        tp: slice.tp.clone(),
                        topic_id: e.info.topic_id,
                        from_offset: e.info.base_offset,
                        end_offset: e.info.last_offset + 1,
                        reason: *reason,
                    },
                ),
            }
            tracked.unreleased -= 1;
            if tracked.unreleased == 0 {
                self.objects.remove(&seq);
            }
        }
        if queue.is_empty() {
            self.queues.remove(&wp);
        }
    }

    /// Objects registered and not yet fully released.
    #[cfg(test)]
    pub(crate) fn pending_objects(&self) -> usize {
        self.objects.len()
    }
}
