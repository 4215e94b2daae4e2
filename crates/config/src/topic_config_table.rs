//! The table of topic-level keys: every key Kafka 4.x defines for a topic (its `LogConfig`), the
//! deprecated keys a Kafka 4 broker still takes from older tools, and ferry's own
//! `remote.wal.enable`. Each entry says how a value is checked, where a topic without an
//! override takes its value from (the broker keys, in Kafka's order of precedence), and whether
//! ferry acts on it.

use crate::broker_config::ConfigType::{self, Boolean, Double, Int, List, Long};

/// One broker key a topic default comes from, and what its value is multiplied by to give the
/// topic key's unit (`log.retention.hours` → `retention.ms`: 3,600,000).
#[derive(Debug)]
pub struct Synonym {
    pub key: &'static str,
    pub factor: i64,
}

/// Where a topic without an override takes its value from.
#[derive(Debug)]
pub enum TopicDefault {
    /// The broker keys, in Kafka's order of precedence (`ServerTopicConfigSynonyms`): the first
    /// one set wins, else the default of the last one declared with a default.
    Broker(&'static [Synonym]),
    /// No broker key: Kafka's fixed default (its `CONFIGS_WITH_NO_SERVER_DEFAULTS`).
    Fixed(&'static str),
}

/// What ferry does with a topic key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// ferry acts on it.
    Applied,
    /// Accepted, checked and stored as Kafka does, with no effect in ferry.
    Ignored,
    /// Removed in Kafka 4 but still sent by older tools (MirrorMaker 2 from a 3.x cluster):
    /// checked, then dropped rather than stored, as a Kafka 4 broker does.
    Removed,
}

/// How a value is checked beyond its type; the messages follow Kafka's validators.
#[derive(Debug)]
pub enum Check {
    Any,
    /// Kafka's `Range.atLeast`.
    AtLeast(i64),
    /// Kafka's `Range.between`.
    Between(i64, i64),
    /// A compression level: `min..=max`, or the codec's "default level" marker.
    Level {
        min: i64,
        max: i64,
        or: i64,
    },
    /// Kafka's `ValidString.in`.
    OneOf(&'static [&'static str]),
    /// Kafka's `ValidList.in`: a non-empty list of these.
    ListOf(&'static [&'static str]),
    /// Kafka's `ThrottledReplicaListValidator`: `*` or `partition:broker,...`.
    ThrottledReplicas,
    /// A Kafka release (`message.format.version`): `0.10.2`, `2.8-IV1`, `3.0`.
    Version,
    /// `remote.storage.enable`: a boolean; `true` also needs the broker's tier
    /// ([`crate::topic_config::validate_with_broker`]).
    RemoteStorage,
}

/// One topic config key.
#[derive(Debug)]
pub struct TopicConfigDef {
    pub name: &'static str,
    pub ty: ConfigType,
    pub doc: &'static str,
    pub default: TopicDefault,
    pub check: Check,
    pub effect: Effect,
}

const fn s(key: &'static str) -> Synonym {
    Synonym { key, factor: 1 }
}

const MINUTES: i64 = 60_000;
const HOURS: i64 = 3_600_000;

const fn key(
    name: &'static str,
    ty: ConfigType,
    default: TopicDefault,
    check: Check,
    effect: Effect,
    doc: &'static str,
) -> TopicConfigDef {
    TopicConfigDef {
        name,
        ty,
        doc,
        default,
        check,
        effect,
    }
}

use Check::{Any, AtLeast};
use Effect::{Applied, Ignored, Removed};
use TopicDefault::{Broker, Fixed};

const COMPRESSION_TYPES: &[&str] = &[
    "uncompressed",
    "zstd",
    "lz4",
    "snappy",
    "gzip",
    "producer",
    "none",
];

/// Every topic-level key ferry accepts (CreateTopics, AlterConfigs, IncrementalAlterConfigs).
#[rustfmt::skip]
pub const TOPIC_CONFIGS: &[TopicConfigDef] = &[
    key("cleanup.policy", List, Broker(&[s("log.cleanup.policy")]), Check::ListOf(&["compact", "delete"]), Applied,
        "`delete` (retention by time and size) and/or `compact` (keep the latest record per key)."),
    key("delete.retention.ms", Long, Broker(&[s("log.cleaner.delete.retention.ms")]), AtLeast(0), Applied,
        "How long a tombstone survives on a compacted topic."),
    key("min.compaction.lag.ms", Long, Broker(&[s("log.cleaner.min.compaction.lag.ms")]), AtLeast(0), Applied,
        "Records younger than this are not compacted."),
    key("max.compaction.lag.ms", Long, Broker(&[s("log.cleaner.max.compaction.lag.ms")]), AtLeast(1), Applied,
        "Records older than this are compacted whatever the dirty ratio."),
    key("min.cleanable.dirty.ratio", Double, Broker(&[s("log.cleaner.min.cleanable.ratio")]), Any, Applied,
        "Compact when this share of the log is uncompacted (0 to 1)."),
    key("retention.ms", Long, Broker(&[s("log.retention.ms"), Synonym { key: "log.retention.minutes", factor: MINUTES }, Synonym { key: "log.retention.hours", factor: HOURS }]), AtLeast(-1), Applied,
        "Delete segments whose newest record is older than this; -1 keeps data forever."),
    key("local.retention.ms", Long, Broker(&[s("log.local.retention.ms")]), AtLeast(-2), Applied,
        "How long data stays in the local log (KIP-405); -2 means `retention.ms`, -1 forever. With `remote.storage.enable`, segments older than this leave the local disk once they are in the tier (reads below the local log start come from the tier). Remote-WAL objects whose replicas have not all read them are kept at most this long, and a new remote-WAL leader republishes no older data."),
    key("local.retention.bytes", Long, Broker(&[s("log.local.retention.bytes")]), AtLeast(-2), Applied,
        "Bytes of a partition kept in the local log when tiered (KIP-405); -2 means `retention.bytes`. With `remote.storage.enable`, the oldest segments beyond it leave the local disk once they are in the tier."),
    key("retention.bytes", Long, Broker(&[s("log.retention.bytes")]), Any, Applied,
        "Delete the oldest segments while the partition is larger than this; -1 means no limit."),
    key("segment.bytes", Int, Broker(&[s("log.segment.bytes")]), AtLeast(14), Applied,
        "Roll a new segment at this size. ferry accepts sizes from 14 bytes (Kafka 4 from 1 MiB), which tests of retention and compaction use."),
    key("segment.ms", Long, Broker(&[s("log.roll.ms"), Synonym { key: "log.roll.hours", factor: HOURS }]), AtLeast(1), Applied,
        "Roll a new segment at this age."),
    key("segment.jitter.ms", Long, Broker(&[s("log.roll.jitter.ms"), Synonym { key: "log.roll.jitter.hours", factor: HOURS }]), AtLeast(0), Ignored,
        "Random jitter subtracted from `segment.ms` so that segments of many partitions do not roll together. ferry rolls at `segment.ms` exactly."),
    key("segment.index.bytes", Int, Broker(&[s("log.index.size.max.bytes")]), AtLeast(4), Applied,
        "Largest offset index before a roll (at least one entry is kept)."),
    key("index.interval.bytes", Int, Broker(&[s("log.index.interval.bytes")]), AtLeast(0), Applied,
        "Bytes between offset-index entries."),
    key("max.message.bytes", Int, Broker(&[s("message.max.bytes")]), AtLeast(0), Applied,
        "Largest record batch accepted (MESSAGE_TOO_LARGE above)."),
    key("message.timestamp.type", ConfigType::String, Broker(&[s("log.message.timestamp.type")]), Check::OneOf(&["CreateTime", "LogAppendTime"]), Applied,
        "`CreateTime` (the producer's) or `LogAppendTime` (the broker's clock)."),
    key("message.timestamp.before.max.ms", Long, Broker(&[s("log.message.timestamp.before.max.ms")]), AtLeast(0), Applied,
        "Largest time a CreateTime timestamp may lie before the broker's clock (KIP-937): a batch with an older record is refused with INVALID_TIMESTAMP, naming each such record (Produce v8+ record errors). Every record is checked when this is set."),
    key("message.timestamp.after.max.ms", Long, Broker(&[s("log.message.timestamp.after.max.ms")]), AtLeast(0), Applied,
        "Largest time a CreateTime timestamp may lie after the broker's clock (KIP-937): a batch whose largest timestamp is further ahead is refused with INVALID_TIMESTAMP, naming each such record (Produce v8+ record errors)."),
    key("flush.messages", Long, Broker(&[s("log.flush.interval.messages")]), AtLeast(1), Applied,
        "fsync after this many messages."),
    key("flush.ms", Long, Broker(&[s("log.flush.interval.ms"), s("log.flush.scheduler.interval.ms")]), AtLeast(0), Ignored,
        "fsync when data has waited this long. ferry leaves timing to the page cache (and `flush.messages`), as Kafka's default does."),
    key("file.delete.delay.ms", Long, Broker(&[s("log.segment.delete.delay.ms")]), AtLeast(0), Applied,
        "Delay before a deleted segment's files are removed."),
    key("preallocate", Boolean, Broker(&[s("log.preallocate")]), Any, Ignored,
        "Preallocate a new segment file at its full size. ferry's segment files grow as written."),
    key("min.insync.replicas", Int, Broker(&[s("min.insync.replicas")]), AtLeast(1), Applied,
        "Replicas that must hold a write for acks=all."),
    key("compression.type", ConfigType::String, Broker(&[s("compression.type")]), Check::OneOf(COMPRESSION_TYPES), Applied,
        "`producer` stores batches as the producer compressed them; `uncompressed`/`none`, `gzip`, `snappy`, `lz4`, `zstd` re-encode them with that codec."),
    key("compression.gzip.level", Int, Broker(&[s("compression.gzip.level")]), Check::Level { min: 1, max: 9, or: -1 }, Applied,
        "gzip level when `compression.type` is `gzip` and the broker re-encodes a batch (1 to 9, -1 the codec's default)."),
    key("compression.lz4.level", Int, Broker(&[s("compression.lz4.level")]), Check::Level { min: 1, max: 17, or: 9 }, Applied,
        "lz4 level when `compression.type` is `lz4` and the broker re-encodes a batch (1 to 17; the lz4 library ferry uses tops out at 12, which levels above use)."),
    key("compression.zstd.level", Int, Broker(&[s("compression.zstd.level")]), Check::Level { min: -131072, max: 22, or: 3 }, Applied,
        "zstd level when `compression.type` is `zstd` and the broker re-encodes a batch (-131072 to 22)."),
    key("unclean.leader.election.enable", Boolean, Broker(&[s("unclean.leader.election.enable")]), Any, Applied,
        "Allow an out-of-sync replica to become leader."),
    key("leader.replication.throttled.replicas", List, Fixed(""), Check::ThrottledReplicas, Applied,
        "Replicas whose leader-side replication is throttled, `partition:broker,...` or `*` (KIP-73): the broker named sends the partition's records to followers outside the ISR at most at its `leader.replication.throttled.rate` (all such replicas together)."),
    key("follower.replication.throttled.replicas", List, Fixed(""), Check::ThrottledReplicas, Applied,
        "Replicas whose follower-side replication is throttled, `partition:broker,...` or `*` (KIP-73): the broker named, while outside the ISR, fetches the partition at most at its `follower.replication.throttled.rate` (all such replicas together)."),
    key("remote.storage.enable", Boolean, Fixed("false"), Check::RemoteStorage, Applied,
        "Copy closed segments to the long-term tier (KIP-405): the local disk keeps `local.retention.*`, the tier `retention.*`, and consumers read below the local log start from the tier. Refused unless the broker has `remote.log.storage.system.enable=true`, and for compacted topics, as Kafka refuses them."),
    key("remote.log.copy.disable", Boolean, Fixed("false"), Any, Applied,
        "Stop copying segments to the long-term tier (KIP-950): what it holds stays readable and keeps expiring by `retention.*`, and the local log is kept by `retention.*` again (no longer by `local.retention.*`)."),
    key("remote.log.delete.on.disable", Boolean, Fixed("false"), Any, Applied,
        "Set together with `remote.storage.enable=false` to turn the tier off for the topic: its leaders delete what the tier holds of it (KIP-950). Turning the tier off without it is refused."),
    key("remote.wal.enable", Boolean, Broker(&[s("remote.wal.enable")]), Any, Applied,
        "Replicate through the object store of the leader's rack (KIP-1176 remote WAL) instead of by Fetch across racks. Internal topics (`__consumer_offsets`, `__transaction_state`, the WAL's own metadata topic) always replicate by Fetch, whatever it says."),
    key("message.format.version", ConfigType::String, Fixed("3.0-IV1"), Check::Version, Removed,
        "Record format of Kafka before 3.0 (KIP-724). Removed in Kafka 4: accepted and dropped, never stored."),
    key("message.timestamp.difference.max.ms", Long, Fixed("9223372036854775807"), AtLeast(0), Removed,
        "Replaced by `message.timestamp.before.max.ms` / `after.max.ms` (KIP-937), removed in Kafka 4: accepted and dropped, never stored."),
    key("message.downconversion.enable", Boolean, Fixed("true"), Any, Removed,
        "Down-conversion for old fetchers, a no-op since Kafka 4 (KIP-724): accepted and dropped, never stored."),
];
