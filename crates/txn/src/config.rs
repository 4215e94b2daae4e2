//! Transaction coordinator settings, with Kafka's names and defaults.

#[derive(Debug, Clone)]
pub struct TxnConfig {
    /// `transaction.max.timeout.ms`: the longest transaction timeout a producer may ask for.
    pub max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`: how long an id may stay idle (no transaction open)
    /// before it is forgotten.
    pub transactional_id_expiration_ms: i64,
    /// `transaction.state.log.num.partitions`
    pub state_log_partitions: i32,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`
    pub abort_timed_out_interval_ms: i64,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`
    pub remove_expired_interval_ms: i64,
    /// `offsets.topic.num.partitions`: AddOffsetsToTxn names the group's partition.
    pub offsets_topic_partitions: i32,
    /// How long to wait before writing markers again to partitions that could not take them,
    /// or the completion record again when the log was not available (ferry's own; Kafka's
    /// marker channel retries on its next send-loop pass).
    pub marker_retry_backoff_ms: u64,
}

impl Default for TxnConfig {
    fn default() -> Self {
        Self {
            max_timeout_ms: 900_000,
            transactional_id_expiration_ms: 604_800_000,
            state_log_partitions: 50,
            abort_timed_out_interval_ms: 10_000,
            remove_expired_interval_ms: 3_600_000,
            offsets_topic_partitions: 50,
            marker_retry_backoff_ms: 100,
        }
    }
}
