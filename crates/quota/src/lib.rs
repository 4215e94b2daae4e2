//! Kafka's client quotas for ferry (KIP-13 byte rates, KIP-55 user and (user, client-id)
//! quotas, KIP-124 request-time quotas, KIP-219 throttling) as pure logic: no sockets, no
//! threads, no clock. Every decision is a function of (state, value, `now_ms`), so that tests
//! drive time by hand and the broker decides where the time comes from.
//!
//! Why a crate of its own: the rules (eight levels of precedence, shared usage buckets, Kafka's
//! windowed rate, its throttle-time formula) are easy to get subtly wrong and are only testable
//! deterministically away from the request path. The controller stores quotas in the metadata
//! log; the broker fills a [`QuotaConfig`] from its image and calls a [`QuotaManager`] from the
//! request path:
//!
//! - **produce**: `record_and_get_throttle_ms(ProducerByteRate, user, client_id, request_bytes,
//!   now)`; **fetch**: the same with `ConsumerByteRate` and the response size, then `unrecord`
//!   and answer empty when throttled; fetch sizes capped by `max_value_in_quota_window`;
//! - **every request**: `record_request_time_and_get_throttle_ms` with the handler thread time
//!   (except exempt inter-broker principals: `record_exempt`);
//! - **CreateTopics, CreatePartitions, DeleteTopics**: `record_controller_mutations` per topic
//!   with its partition count (KIP-599's token bucket, strict or permissive by request version);
//! - **replication throttles** (KIP-73, [`replication`]): leader and follower byte rates for the
//!   throttled replicas of a reassignment;
//! - the response carries the larger throttle time in `throttle_time_ms`, is sent at once, and
//!   the connection is muted for that long ([`ChannelThrottle`], KIP-219).
//!
//! Modules: [`entity`] (keys, entities, precedence levels, usage buckets), [`config`] (the store
//! and the precedence lookup), [`rate`] (Kafka's sampled rate), [`throttle`] (throttle time and
//! the connection mute), [`token_bucket`] (controller mutations), [`manager`] (sensors, recording, expiry, metrics accessors).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod entity;
pub mod error;
pub mod manager;
pub mod rate;
pub mod replication;
pub mod throttle;
pub mod token_bucket;

pub use config::{validate_quota, QuotaConfig, ResolvedQuota};
pub use entity::{EntityName, MetricKey, QuotaEntity, QuotaKey, QuotaLevel};
pub use error::QuotaError;
pub use manager::{MutationDecision, QuotaManager, QuotaManagerConfig, SensorStats};
pub use rate::{RateConfig, SampledRate};
pub use replication::{throttled_partitions, ReplicationQuota, ThrottledPartitions};
pub use throttle::{
    bounded_throttle_time_ms, nanos_to_percentage, throttle_time_ms, ChannelThrottle,
};
pub use token_bucket::{token_bucket_throttle_ms, TokenBucket};
