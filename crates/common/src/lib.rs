//! Leaf crate shared by every other ferry crate: the clock seam, small identifier types, the
//! disk space reserve of the metadata log, blocking work spread over a few threads, and bytes
//! that arrived in pieces joined into one buffer.
//!
//! Time is read only through [`Clock`], so tests can drive it by hand ([`ManualClock`]) and so
//! that no crate reaches for the system clock on its own.

pub mod framed;
mod pieces;
mod space_reserve;
mod threads;
pub use pieces::join_pieces;
pub use space_reserve::{is_disk_full, SpaceReserve};
pub use threads::map_on_threads;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock milliseconds since the Unix epoch, the unit Kafka uses for timestamps.
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now_ms(&self) -> i64;
}

/// The real wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    // The one place that reads the system's wall clock (clippy.toml's clock seam).
    #[allow(clippy::disallowed_methods)]
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// A clock that only moves when a test moves it.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicI64,
}

impl ManualClock {
    pub fn new(start_ms: i64) -> Arc<Self> {
        Arc::new(Self {
            now: AtomicI64::new(start_ms),
        })
    }
    pub fn advance(&self, ms: i64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }
    pub fn set(&self, ms: i64) {
        self.now.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now.load(Ordering::SeqCst)
    }
}

pub type SharedClock = Arc<dyn Clock>;

pub fn system_clock() -> SharedClock {
    Arc::new(SystemClock)
}

/// A topic and partition index, Kafka's `TopicPartition`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(1_000);
        assert_eq!(c.now_ms(), 1_000);
        c.advance(5);
        assert_eq!(c.now_ms(), 1_005);
        c.set(7);
        assert_eq!(c.now_ms(), 7);
    }

    #[test]
    fn topic_partition_displays_as_kafka_dir_name() {
        assert_eq!(TopicPartition::new("orders", 3).to_string(), "orders-3");
    }
}
