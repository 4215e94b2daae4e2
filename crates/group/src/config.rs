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
    /// `group.consumer.migration.policy`
    pub migration_policy: MigrationPolicy,
}

/// Which online conversions between the classic and the consumer protocol a group may make
/// (Kafka's `group.consumer.migration.policy`): upgrade when a consumer-protocol member joins a
/// classic group with members, downgrade when the last consumer-protocol member leaves a group
/// whose other members all use the classic protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MigrationPolicy {
    #[default]
    Bidirectional,
    Upgrade,
    Downgrade,
    Disabled,
}

impl MigrationPolicy {
    /// Kafka's names, in any case.
    pub fn parse(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "bidirectional" => Some(Self::Bidirectional),
            "upgrade" => Some(Self::Upgrade),
            "downgrade" => Some(Self::Downgrade),
            "disabled" => Some(Self::Disabled),
            _ => None,
        }
    }

    pub fn upgrades(self) -> bool {
        matches!(self, Self::Bidirectional | Self::Upgrade)
    }

    pub fn downgrades(self) -> bool {
        matches!(self, Self::Bidirectional | Self::Downgrade)
    }
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
            migration_policy: MigrationPolicy::default(),
        }
    }
}
