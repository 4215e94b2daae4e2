//! Test fixtures shared by ferry's crates, as a dev-dependency only.
//!
//! [`Batches`] builds Kafka v2 record batches with kafka-protocol's encoder, so that every test
//! describes the records it needs (how many, which values, which producer) instead of carrying
//! its own copy of the encoder call. [`Topic`] builds the metadata image of a one-partition
//! topic as the replica manager receives it.

use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// What record `i` is keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    None,
    /// `k{i}`.
    Indexed,
}

/// The records of one or more v2 batches. Record `i` has offset `base_offset + i` (the offset
/// in the log only once a leader assigns it) and timestamp `timestamp + i`.
#[derive(Debug, Clone)]
pub struct Batches {
    base_offset: i64,
    values: Vec<Option<Bytes>>,
    keys: Keys,
    timestamp: i64,
    producer: Option<(i64, i16, i32)>,
    one_batch: bool,
    compression: Compression,
    headers: Vec<(&'static str, Bytes)>,
    transactional: bool,
    /// Each record's own timestamp, instead of `timestamp + i`.
    timestamps: Option<Vec<i64>>,
}

impl Batches {
    /// Records with these values (no key, timestamps from 1,000, no producer, uncompressed).
    pub fn values<V: Into<Bytes>>(values: impl IntoIterator<Item = V>) -> Self {
        Self {
            base_offset: 0,
            values: values.into_iter().map(|v| Some(v.into())).collect(),
            keys: Keys::None,
            timestamp: 1_000,
            producer: None,
            one_batch: true,
            compression: Compression::None,
            headers: Vec::new(),
            transactional: false,
            timestamps: None,
        }
    }

    /// `n` records whose values `value(i)` gives.
    pub fn of<V: Into<Bytes>>(n: usize, value: impl Fn(usize) -> V) -> Self {
        Self::values((0..n).map(value))
    }

    /// Offsets from `base` (what a follower appends at its log end).
    pub fn at(mut self, base: i64) -> Self {
        self.base_offset = base;
        self
    }

    pub fn keys(mut self, keys: Keys) -> Self {
        self.keys = keys;
        self
    }

    pub fn timestamp(mut self, first: i64) -> Self {
        self.timestamp = first;
        self
    }

    /// Record `i` has timestamp `timestamps[i]` (the encoder's base timestamp is the smallest).
    pub fn timestamps(mut self, timestamps: &[i64]) -> Self {
        self.timestamps = Some(timestamps.to_vec());
        self
    }

    /// An idempotent producer's records: producer id, epoch and the first record's sequence.
    pub fn producer(mut self, id: i64, epoch: i16, base_sequence: i32) -> Self {
        self.producer = Some((id, epoch, base_sequence));
        self
    }

    /// Part of the producer's transaction (with [`Batches::producer`]).
    pub fn transactional(mut self) -> Self {
        self.transactional = true;
        self
    }

    /// Without a producer, one batch per record instead of one batch for all (kafka-protocol's
    /// encoder starts a batch wherever `offset - sequence` changes; every sequence is then -1).
    pub fn batch_per_record(mut self) -> Self {
        self.one_batch = false;
        self
    }

    pub fn compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }

    /// A header on every record.
    pub fn header(mut self, key: &'static str, value: impl Into<Bytes>) -> Self {
        self.headers.push((key, value.into()));
        self
    }

    /// The encoded batches.
    pub fn encode(&self) -> Bytes {
        let records: Vec<Record> = self
            .values
            .iter()
            .enumerate()
            .map(|(i, value)| {
                let i32i = i32::try_from(i).expect("record index fits an i32");
                let sequence = match self.producer {
                    Some((_, _, base)) => base + i32i,
                    // The encoder keeps records in one batch while offset - sequence is
                    // constant; -1 + i keeps the batch's base sequence at -1 (none).
                    None if self.one_batch => i32i - 1,
                    None => -1,
                };
                Record {
                    transactional: self.transactional,
                    control: false,
                    delete_horizon: false,
                    partition_leader_epoch: 0,
                    producer_id: self.producer.map_or(-1, |p| p.0),
                    producer_epoch: self.producer.map_or(-1, |p| p.1),
                    timestamp_type: TimestampType::Creation,
                    offset: self.base_offset + i as i64,
                    sequence,
                    timestamp: match &self.timestamps {
                        Some(t) => t[i],
                        None => self.timestamp + i as i64,
                    },
                    key: match self.keys {
                        Keys::None => None,
                        Keys::Indexed => Some(Bytes::from(format!("k{i}"))),
                    },
                    value: value.clone(),
                    headers: self
                        .headers
                        .iter()
                        .map(|(k, v)| (StrBytes::from_static_str(k), Some(v.clone())))
                        .collect(),
                }
            })
            .collect();
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            &records,
            &RecordEncodeOptions {
                version: 2,
                compression: self.compression,
            },
        )
        .expect("kafka-protocol encodes test records");
        buf.freeze()
    }
}

/// A one-partition topic's image: topic `t`, replicas 1, 2 and 3 all in sync, led by broker 1
/// at leader epoch 0, partition epoch 0, unless changed.
#[derive(Debug, Clone)]
pub struct Topic {
    image: ferry_cluster::image::TopicImage,
}

impl Default for Topic {
    fn default() -> Self {
        Self {
            image: ferry_cluster::image::TopicImage {
                name: "t".into(),
                id: uuid::Uuid::from_u128(7),
                configs: std::collections::BTreeMap::new(),
                partitions: vec![ferry_cluster::image::PartitionState {
                    replicas: vec![1, 2, 3],
                    isr: vec![1, 2, 3],
                    leader: 1,
                    leader_epoch: 0,
                    partition_epoch: 0,
                    adding_replicas: Vec::new(),
                    removing_replicas: Vec::new(),
                }],
            },
        }
    }
}

impl Topic {
    fn partition(&mut self) -> &mut ferry_cluster::image::PartitionState {
        &mut self.image.partitions[0]
    }

    pub fn id(mut self, id: u128) -> Self {
        self.image.id = uuid::Uuid::from_u128(id);
        self
    }

    /// The replica set, all of it in sync.
    pub fn replicas(mut self, replicas: &[i32]) -> Self {
        self.partition().replicas = replicas.to_vec();
        self.partition().isr = replicas.to_vec();
        self
    }

    pub fn isr(mut self, isr: &[i32]) -> Self {
        self.partition().isr = isr.to_vec();
        self
    }

    pub fn leader(mut self, leader: i32, leader_epoch: i32) -> Self {
        self.partition().leader = leader;
        self.partition().leader_epoch = leader_epoch;
        self
    }

    pub fn partition_epoch(mut self, epoch: i32) -> Self {
        self.partition().partition_epoch = epoch;
        self
    }

    pub fn image(self) -> ferry_cluster::image::TopicImage {
        self.image
    }
}
