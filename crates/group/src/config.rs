//! Group coordinator settings, with Kafka's names and defaults.

#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// `offsets.topic.num.partitions`
    pub offsets_topic_partitions: i32,
    /// `offsets.retention.minutes`, in ms
    pub offsets_retention_ms: i64,
    /// `offset.metadata.max.bytes`
    pub offset_metadata_max_bytes: usize,
    /// `group.initial.rebalance.delay.ms`
    pub initial_rebalance_delay_ms: i64,
    /// `group.min.session.timeout.ms`
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`
    pub max_session_timeout_ms: i32,
    /// `group.max.size`
    pub max_group_size: usize,
    /// Settings of the KIP-848 consumer protocol (`group.consumer.*`).
    pub consumer: crate::consumer::ConsumerProtocolConfig,
}

impl Default for GroupConfig {
    fn default() -> Self {
        Self {
            offsets_topic_partitions: 50,
            offsets_retention_ms: 7 * 24 * 3_600_000,
            offset_metadata_max_bytes: 4096,
            initial_rebalance_delay_ms: 3000,
            min_session_timeout_ms: 6000,
            max_session_timeout_ms: 1_800_000,
            max_group_size: i32::MAX as usize,
            consumer: crate::consumer::ConsumerProtocolConfig::default(),
        }
    }
}
