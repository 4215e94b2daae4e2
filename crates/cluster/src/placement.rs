//! Rack-aware replica placement, after Kafka's rack-alternating assignment.
//!
//! Input: the brokers that may hold replicas (id and `broker.rack`). Output: one replica list per
//! new partition. The first replica of each list is the preferred leader.
//!
//! What holds for every result:
//! - a partition's replicas are distinct brokers;
//! - when every broker has a rack, a partition's replicas cover
//!   `min(replication factor, number of racks)` distinct racks;
//! - first replicas (preferred leaders) go round the brokers in turn, so leaders and replicas are
//!   spread evenly when the racks hold equal numbers of brokers.
//!
//! How: brokers are arranged in a list that alternates racks (first broker of each rack, then the
//! second of each, ...). Partition `p`'s first replica is entry `(start + p) mod n` of that list;
//! the following replicas walk the list from there with a shift that changes every `n`
//! partitions, skipping brokers whose rack already holds a replica (until every rack does) and
//! brokers already chosen. If some broker has no rack, racks are ignored altogether.
//!
//! Pure: the caller chooses `start` (Kafka picks it at random; a seeded or hashed value keeps
//! tests deterministic).

use std::collections::{BTreeMap, BTreeSet};

use crate::image::BrokerId;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementBroker {
    pub id: BrokerId,
    pub rack: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("replication factor must be at least 1, got {0}")]
    InvalidReplicationFactor(i32),
    #[error(
        "replication factor {replication_factor} is larger than the {brokers} available brokers"
    )]
    NotEnoughBrokers {
        replication_factor: i32,
        brokers: usize,
    },
    #[error("the partition count must not be negative, got {0}")]
    InvalidPartitionCount(i32),
}

/// Where to place `partitions` new partitions of `replication_factor` replicas.
///
/// `first_partition` is the id of the first new partition (0 for a new topic, the current count
/// when adding partitions), so added partitions continue the rotation.
pub fn assign_replicas(
    brokers: &[PlacementBroker],
    partitions: i32,
    replication_factor: i32,
    first_partition: i32,
    start: usize,
) -> Result<Vec<Vec<BrokerId>>, PlacementError> {
    if replication_factor < 1 {
        return Err(PlacementError::InvalidReplicationFactor(replication_factor));
    }
    if partitions < 0 {
        return Err(PlacementError::InvalidPartitionCount(partitions));
    }
    // One entry per broker id (the first one listed wins).
    let mut unique: BTreeMap<BrokerId, PlacementBroker> = BTreeMap::new();
    for b in brokers {
        unique.entry(b.id).or_insert_with(|| b.clone());
    }
    let brokers: Vec<PlacementBroker> = unique.into_values().collect();
    let brokers = brokers.as_slice();
    let rf = replication_factor as usize;
    if rf > brokers.len() {
        return Err(PlacementError::NotEnoughBrokers {
            replication_factor,
            brokers: brokers.len(),
        });
    }
    let rack_aware = brokers.iter().all(|b| b.rack.is_some());
    let arranged = if rack_aware {
        rack_alternating(brokers)
    } else {
        brokers.iter().map(|b| b.id).collect()
    };
    let n = arranged.len();
    let rack_of: BTreeMap<BrokerId, &str> = brokers
        .iter()
        .map(|b| (b.id, b.rack.as_deref().unwrap_or("")))
        .collect();
    let rack_count = if rack_aware {
        rack_of.values().collect::<BTreeSet<_>>().len()
    } else {
        1
    };

    let start = start % n;
    let mut result = Vec::with_capacity(partitions as usize);
    for p in 0..partitions as usize {
        let partition = first_partition.max(0) as usize + p;
        // The second replica's offset from the first changes once per round of the brokers.
        let shift = start + partition / n;
        let first = (partition + start) % n;
        let leader = arranged[first];
        let mut replicas = vec![leader];
        let mut racks: BTreeSet<&str> = BTreeSet::from([rack_of[&leader]]);
        let mut chosen: BTreeSet<BrokerId> = BTreeSet::from([leader]);
        let mut k = 0usize;
        while replicas.len() < rf {
            let candidate = arranged[replica_index(first, shift * rack_count, k, n)];
            k += 1;
            let rack = rack_of[&candidate];
            let rack_ok = !rack_aware || !racks.contains(rack) || racks.len() == rack_count;
            if rack_ok && !chosen.contains(&candidate) {
                replicas.push(candidate);
                racks.insert(rack);
                chosen.insert(candidate);
            }
        }
        result.push(replicas);
    }
    Ok(result)
}

/// The broker `k` steps after `first`, never `first` itself (`n` ≥ 2 whenever this is called).
fn replica_index(first: usize, second_shift: usize, k: usize, n: usize) -> usize {
    let step = 1 + (second_shift + k) % (n - 1);
    (first + step) % n
}

/// Brokers in an order that alternates racks: racks sorted by name, brokers within a rack by id,
/// then the first broker of each rack, the second of each, and so on.
fn rack_alternating(brokers: &[PlacementBroker]) -> Vec<BrokerId> {
    let mut by_rack: BTreeMap<&str, Vec<BrokerId>> = BTreeMap::new();
    for b in brokers {
        by_rack
            .entry(b.rack.as_deref().unwrap_or(""))
            .or_default()
            .push(b.id);
    }
    for ids in by_rack.values_mut() {
        ids.sort_unstable();
    }
    let longest = by_rack.values().map(Vec::len).max().unwrap_or(0);
    let mut out = Vec::with_capacity(brokers.len());
    for i in 0..longest {
        for ids in by_rack.values() {
            if let Some(id) = ids.get(i) {
                out.push(*id);
            }
        }
    }
    out
}

#[cfg(test)]
#[path = "placement_test.rs"]
mod tests;
