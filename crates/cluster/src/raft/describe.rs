//! The controller quorum's state as its leader describes it (DescribeQuorum, KIP-595): the
//! leader, its epoch (the Raft term), the high watermark (the offset after the last committed
//! entry), and every voter's log end offset with its last fetch and caught-up times
//! ([`super::quorum_progress`]). Only the leader knows the voters' progress, so a follower asks
//! the leader over the quorum transport ([`super::Controller::describe_quorum`]).
//!
//! Offsets are Kafka's: the entry at Raft log index `i` is offset `i`, so a log end offset or a
//! high watermark is the last index plus one. Every ferry broker is a voter: there are no
//! observers.

use serde::{Deserialize, Serialize};

use super::network::ProposeFailure;
use super::quorum_progress::QuorumProgress;
use super::Raft;

/// One voter of the quorum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VoterInfo {
    pub id: u64,
    /// Its controller address, `host:port` (empty for a single node's own quorum).
    pub addr: String,
    /// -1 while unknown (no answer yet in this term).
    pub log_end_offset: i64,
    pub last_fetch_ms: i64,
    pub last_caught_up_ms: i64,
}

/// The quorum as its leader sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuorumInfo {
    pub leader_id: u64,
    /// The leader's Raft term (Kafka's leader epoch of the metadata partition).
    pub leader_epoch: u64,
    pub high_watermark: i64,
    pub voters: Vec<VoterInfo>,
}

/// Describes the quorum if this node leads it.
pub(crate) async fn describe_local(
    raft: &Raft,
    progress: &QuorumProgress,
) -> Result<QuorumInfo, ProposeFailure> {
    let m = raft.metrics().borrow().clone();
    if m.current_leader != Some(m.id) {
        let leader_addr = m
            .current_leader
            .and_then(|l| m.membership_config.membership().get_node(&l).cloned())
            .map(|n| n.addr);
        return Err(ProposeFailure::NotLeader {
            leader: m.current_leader,
            leader_addr,
        });
    }
    let committed = raft
        .with_raft_state(|st| st.committed.map(|l| l.index))
        .await
        .map_err(|e| ProposeFailure::Raft(e.to_string()))?;
    let offset_after = |index: Option<u64>| index.map_or(0, |i| (i as i64).saturating_add(1));
    let known = progress.voters(m.current_term);
    let now = progress.now_ms();
    let replication = m.replication.clone().unwrap_or_default();
    let membership = m.membership_config.membership();
    let voters = membership
        .voter_ids()
        .map(|id| {
            let addr = membership
                .get_node(&id)
                .map(|n| n.addr.clone())
                .unwrap_or_default();
            if id == m.id {
                // Kafka reports the leader as fetching and caught up now.
                return VoterInfo {
                    id,
                    addr,
                    log_end_offset: offset_after(m.last_log_index),
                    last_fetch_ms: now,
                    last_caught_up_ms: now,
                };
            }
            let seen = known.get(&id);
            // What the leader's replication matched is authoritative for the log end.
            let matched = replication
                .get(&id)
                .copied()
                .flatten()
                .map(|l| offset_after(Some(l.index)));
            VoterInfo {
                id,
                addr,
                log_end_offset: matched.or(seen.map(|v| v.log_end_offset)).unwrap_or(-1),
                last_fetch_ms: seen.map_or(-1, |v| v.last_fetch_ms),
                last_caught_up_ms: seen.map_or(-1, |v| v.last_caught_up_ms),
            }
        })
        .collect();
    Ok(QuorumInfo {
        leader_id: m.id,
        leader_epoch: m.current_term,
        high_watermark: offset_after(committed),
        voters,
    })
}
