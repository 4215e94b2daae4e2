//! KIP-392: which replica a consumer should read from, decided by the leader.
//!
//! `replica.selector.class` names the policy with Kafka's class names. ferry defaults to the
//! rack-aware selector (Kafka's default is none, i.e. always the leader), because reading from
//! the replica in the consumer's availability zone is what saves cross-AZ bytes.
//!
//! The leader offers as candidates only itself and the followers that are in the ISR, live, and
//! hold the fetch offset (Kafka's `findPreferredReadReplica`): a lagging follower would make the
//! consumer fall behind the producer for as long as it keeps being picked.

use ferry_cluster::BrokerId;

/// Kafka's class names, accepted as the values of `replica.selector.class`.
pub const RACK_AWARE_SELECTOR: &str = "org.apache.kafka.common.replica.RackAwareReplicaSelector";
pub const LEADER_SELECTOR: &str = "org.apache.kafka.common.replica.LeaderSelector";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaSelector {
    /// The leader if it is in the client's rack (or the client names none, or no candidate is in
    /// it); else the most caught-up candidate in the client's rack.
    RackAware,
    /// Always the leader.
    Leader,
}

/// A replica the selector may choose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaView<'a> {
    pub id: BrokerId,
    pub rack: Option<&'a str>,
    pub log_end_offset: i64,
    /// Milliseconds since it last caught up with the leader (0 for the leader).
    pub time_since_caught_up_ms: i64,
}

impl ReplicaSelector {
    /// The selector a `replica.selector.class` value names; an empty value means the leader.
    pub fn from_class_name(name: &str) -> Option<Self> {
        match name.trim() {
            RACK_AWARE_SELECTOR => Some(Self::RackAware),
            LEADER_SELECTOR | "" => Some(Self::Leader),
            _ => None,
        }
    }

    /// The replica a client in `client_rack` should read from (Kafka's
    /// `RackAwareReplicaSelector.select`): ties among same-rack followers go to the greatest log
    /// end offset, then the most recently caught up, then the lowest id.
    pub fn select(
        self,
        client_rack: &str,
        leader: &ReplicaView<'_>,
        followers: &[ReplicaView<'_>],
    ) -> BrokerId {
        if self == Self::Leader || client_rack.is_empty() || leader.rack == Some(client_rack) {
            return leader.id;
        }
        followers
            .iter()
            .filter(|r| r.rack == Some(client_rack))
            .max_by(|a, b| {
                a.log_end_offset
                    .cmp(&b.log_end_offset)
                    .then(b.time_since_caught_up_ms.cmp(&a.time_since_caught_up_ms))
                    .then(b.id.cmp(&a.id))
            })
            .map_or(leader.id, |r| r.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(id: BrokerId, rack: Option<&str>, leo: i64, lag_ms: i64) -> ReplicaView<'_> {
        ReplicaView {
            id,
            rack,
            log_end_offset: leo,
            time_since_caught_up_ms: lag_ms,
        }
    }

    #[test]
    fn class_names_are_kafkas() {
        assert_eq!(
            ReplicaSelector::from_class_name(RACK_AWARE_SELECTOR),
            Some(ReplicaSelector::RackAware)
        );
        assert_eq!(
            ReplicaSelector::from_class_name(LEADER_SELECTOR),
            Some(ReplicaSelector::Leader)
        );
        assert_eq!(
            ReplicaSelector::from_class_name(""),
            Some(ReplicaSelector::Leader)
        );
        assert_eq!(ReplicaSelector::from_class_name("com.example.Mine"), None);
    }

    /// KIP-392 / RackAwareReplicaSelector, one row per rule.
    #[test]
    fn rack_aware_selection_table() {
        let leader = view(1, Some("az1"), 100, 0);
        let f2 = view(2, Some("az2"), 100, 10);
        let f3 = view(3, Some("az3"), 100, 10);
        let f4_az2_behind = view(4, Some("az2"), 90, 0);
        let f5_az2_stale = view(5, Some("az2"), 100, 500);
        let rows: &[(&str, &[ReplicaView<'_>], BrokerId, &str)] = &[
            ("az2", &[f2, f3], 2, "the follower in the client's rack"),
            (
                "az1",
                &[f2, f3],
                1,
                "the leader when it is in the client's rack",
            ),
            ("", &[f2, f3], 1, "the leader when the client names no rack"),
            (
                "az9",
                &[f2, f3],
                1,
                "the leader when no candidate is in the rack",
            ),
            ("az2", &[], 1, "the leader when there is no candidate"),
            (
                "az2",
                &[f4_az2_behind, f2],
                2,
                "the greatest log end offset",
            ),
            (
                "az2",
                &[f5_az2_stale, f2],
                2,
                "then the most recently caught up",
            ),
        ];
        for (rack, followers, want, why) in rows {
            assert_eq!(
                ReplicaSelector::RackAware.select(rack, &leader, followers),
                *want,
                "{why}"
            );
        }
        let no_rack_leader = view(1, None, 100, 0);
        assert_eq!(
            ReplicaSelector::RackAware.select("az2", &no_rack_leader, &[f2]),
            2
        );
    }

    #[test]
    fn leader_selector_always_picks_the_leader() {
        let leader = view(1, Some("az1"), 100, 0);
        let f2 = view(2, Some("az2"), 100, 0);
        assert_eq!(ReplicaSelector::Leader.select("az2", &leader, &[f2]), 1);
    }
}
