//! Per-topic log configuration, named as Kafka's topic configs.

/// How the broker treats record timestamps (`message.timestamp.type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimestampType {
    /// Keep the producer's timestamps.
    CreateTime,
    /// Stamp every batch with the broker's clock at append.
    LogAppendTime,
}

/// Topic-level log settings. Defaults are Kafka's.
#[derive(Clone, Debug, PartialEq)]
pub struct LogConfig {
    /// `segment.bytes`: roll when the active segment would grow past this.
    pub segment_bytes: u64,
    /// `segment.ms`: roll when the active segment is older than this.
    pub segment_ms: i64,
    /// `segment.index.bytes`: roll when the offset index would exceed this.
    pub segment_index_bytes: u64,
    /// `index.interval.bytes`: bytes of log between two offset index entries.
    pub index_interval_bytes: u64,
    /// `retention.ms`, -1 = unlimited.
    pub retention_ms: i64,
    /// `retention.bytes`, -1 = unlimited.
    pub retention_bytes: i64,
    /// `max.message.bytes`: the largest batch accepted.
    pub max_message_bytes: usize,
    /// `message.timestamp.type`.
    pub message_timestamp_type: TimestampType,
    /// `message.timestamp.before.max.ms` (KIP-937): a CreateTime batch whose first timestamp
    /// lies further before the broker's clock is refused with INVALID_TIMESTAMP.
    pub timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms` (KIP-937): a CreateTime batch whose largest timestamp
    /// lies further after the broker's clock is refused with INVALID_TIMESTAMP.
    pub timestamp_after_max_ms: i64,
    /// `flush.messages`: fsync after this many records (u64::MAX leaves it to the page cache).
    pub flush_interval_messages: u64,
    /// `file.delete.delay.ms`: how long a deleted segment's files linger as `*.deleted`.
    pub file_delete_delay_ms: i64,
    /// `cleanup.policy` contains `compact`: the log cleaner keeps the latest record per key (see
    /// [`crate::cleaner`]) and records without a key are refused at append. Retention still
    /// applies through `retention_ms` / `retention_bytes` (-1 for a compact-only topic).
    pub compact: bool,
    /// `delete.retention.ms`: how long tombstones survive in the cleaned part of the log.
    pub delete_retention_ms: i64,
    /// `min.compaction.lag.ms`: records younger than this (by timestamp) are not compacted.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: a log whose oldest uncleaned record is older than this is
    /// cleaned whatever its dirty ratio.
    pub max_compaction_lag_ms: i64,
    /// `min.cleanable.dirty.ratio`: the share of cleanable bytes not yet cleaned above which the
    /// background cleaner picks the log.
    pub min_cleanable_dirty_ratio: f64,
    /// `remote.storage.enable` (KIP-405): closed segments are copied to the long-term tier, and
    /// retention here is the local one (`local_retention_*`), of copied segments only
    /// ([`crate::PartitionLog::set_tier_copied_through`]); the tier applies `retention_*`.
    pub remote_storage: bool,
    /// `remote.log.copy.disable` (KIP-950): the tier is read-only; nothing more is copied, so
    /// retention here is `retention_*` again, over every segment (Kafka's `localRetentionMs`
    /// when copying is off).
    pub remote_copy_disabled: bool,
    /// `local.retention.ms`, with -2 resolved to `retention_ms`.
    pub local_retention_ms: i64,
    /// `local.retention.bytes`, with -2 resolved to `retention_bytes`.
    pub local_retention_bytes: i64,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 60 * 60 * 1000,
            segment_index_bytes: 10 * 1024 * 1024,
            index_interval_bytes: 4096,
            retention_ms: 7 * 24 * 60 * 60 * 1000,
            retention_bytes: -1,
            max_message_bytes: 1_048_588,
            message_timestamp_type: TimestampType::CreateTime,
            timestamp_before_max_ms: i64::MAX,
            // Kafka 4's default (KIP-1030): an hour into the future.
            timestamp_after_max_ms: 3_600_000,
            flush_interval_messages: u64::MAX,
            file_delete_delay_ms: 60_000,
            compact: false,
            delete_retention_ms: 24 * 60 * 60 * 1000,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            min_cleanable_dirty_ratio: 0.5,
            remote_storage: false,
            remote_copy_disabled: false,
            local_retention_ms: 7 * 24 * 60 * 60 * 1000,
            local_retention_bytes: -1,
        }
    }
}
