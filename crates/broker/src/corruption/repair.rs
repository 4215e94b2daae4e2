//! The bytes of a corrupt range, fetched from another replica of the partition.
//!
//! The request is a consumer's Fetch (`replica_id` -1, no rack): it does not move the asking
//! broker's position in the leader's follower bookkeeping (a follower's Fetch would report its
//! log end as the fetch offset, far below it), and a follower serves it too while it is in the
//! ISR (KIP-392 follower reads), up to its high watermark. Replicas hold byte-identical
//! batches, so the answer for the range's offsets is the range's bytes; the log checks that
//! before writing ([`ferry_log::PartitionLog::repair_range`]).
//!
//! Candidates, in order: the leader (when this broker follows), then the other in-sync
//! replicas. Each answer is trusted only as far as its own CRCs go.

use bytes::{Bytes, BytesMut};
use ferry_cluster::BrokerId;
use ferry_log::batch::whole_batches;
use ferry_log::CorruptRange;
use ferry_metrics::{inter_broker_client_id, TrafficKind};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId as WireBrokerId, FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::inter_broker::PeerClient;
use crate::replica_manager::Partition;

/// The client-id purpose of repair fetches.
pub const PURPOSE_REPAIR: &str = "scrubber-repair";
/// Most bytes asked for in one repair Fetch; a longer range takes several.
const MAX_BYTES_PER_FETCH: u64 = 8 << 20;
/// Fetches per candidate before giving up on it (a range of at most 512 MiB).
const MAX_FETCHES: usize = 64;

/// The replicas to ask for `partition`'s batches, best first: the leader if it is another
/// broker, then the other in-sync replicas.
pub fn candidates(partition: &Partition, node_id: BrokerId) -> Vec<BrokerId> {
    let leader = partition.leader();
    let mut out = Vec::new();
    if leader >= 0 && leader != node_id {
        out.push(leader);
    }
    for id in partition.isr() {
        if id != node_id && !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

/// The batches another replica holds for `range`'s offsets, from the first candidate that
/// has all of them; `Err` with each candidate's reason when none has.
pub async fn fetch_range(
    peers: &PeerClient,
    node_id: BrokerId,
    partition: &Partition,
    range: &CorruptRange,
) -> Result<(BrokerId, Bytes), String> {
    let mut reasons = Vec::new();
    for peer in candidates(partition, node_id) {
        match fetch_from(peers, node_id, peer, partition, range).await {
            Ok(bytes) => return Ok((peer, bytes)),
            Err(e) => reasons.push(format!("broker {peer}: {e}")),
        }
    }
    if reasons.is_empty() {
        return Err("no other replica in sync".into());
    }
    Err(reasons.join("; "))
}

async fn fetch_from(
    peers: &PeerClient,
    node_id: BrokerId,
    peer: BrokerId,
    partition: &Partition,
    range: &CorruptRange,
) -> anyhow::Result<Bytes> {
    let mut conn = peers.connect(peer, TrafficKind::Other).await?;
    let client_id = inter_broker_client_id(node_id, PURPOSE_REPAIR);
    let mut out = BytesMut::new();
    let mut next = range.first_offset;
    for _ in 0..MAX_FETCHES {
        if out.len() as u64 >= range.length || next > range.last_offset {
            break;
        }
        let want = (range.length - out.len() as u64).clamp(1, MAX_BYTES_PER_FETCH);
        let request = FetchRequest::default()
            .with_replica_id(WireBrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(1)
            .with_max_bytes(want as i32)
            .with_isolation_level(0)
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(partition.tp.topic.clone())))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(partition.tp.partition)
                    .with_current_leader_epoch(-1)
                    .with_fetch_offset(next)
                    .with_partition_max_bytes(want as i32)])]);
        let response = conn.fetch(&request, &client_id).await?;
        if response.error_code != 0 {
            anyhow::bail!("Fetch error {}", response.error_code);
        }
        let data = response
            .responses
            .iter()
            .flat_map(|t| &t.partitions)
            .find(|p| p.partition_index == partition.tp.partition)
            .ok_or_else(|| anyhow::anyhow!("no answer for the partition"))?;
        if data.error_code != 0 {
            anyhow::bail!("partition error {}", data.error_code);
        }
        let records = data.records.clone().unwrap_or_default();
        let mut took = false;
        for b in whole_batches(&records) {
            if b.last_offset < next {
                continue;
            }
            if out.len() + b.bytes.len() > range.length as usize {
                // More bytes than the range: not the same batches; the log's check says so.
                out.extend_from_slice(&records[b.bytes.clone()]);
                return Ok(out.freeze());
            }
            out.extend_from_slice(&records[b.bytes.clone()]);
            next = b.last_offset + 1;
            took = true;
            if next > range.last_offset {
                break;
            }
        }
        if !took {
            anyhow::bail!(
                "served no batch from offset {next} (past its high watermark, or corrupt there too)"
            );
        }
    }
    Ok(out.freeze())
}
