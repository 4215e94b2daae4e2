//! ElectLeaders through the metadata quorum, as Kafka's controller runs it: each partition's
//! election is decided from the image ([`crate::elect_leaders`]) and proposed as an
//! `AlterPartition` record; the call returns once every proposed record is committed and
//! applied on this node (or refused), so a client told NONE sees the new leader in Metadata.
//!
//! A record computed from an image that has moved on (another election, an ISR change) is
//! rejected by [`crate::Image::apply`]'s partition-epoch check; that partition is recomputed
//! from the newer image, up to [`ROUNDS`] times, so the answer reflects the state the election
//! met (NOT_NEEDED if someone else already moved the leader there, for example).

use std::time::Duration;

use uuid::Uuid;

use super::MetadataStore;
use crate::elect_leaders::{self, ElectionRefused, ElectionType};
use crate::{ClusterError, Image, MetadataRecord};

/// How many times one partition's election is computed and proposed at most.
const ROUNDS: usize = 3;
/// How long to wait for this node's image to show what a rejected record conflicted with.
const CATCH_UP_WAIT: Duration = Duration::from_millis(500);

/// Why one partition's election did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ElectError {
    #[error(transparent)]
    Refused(#[from] ElectionRefused),
    /// The record could not be committed (no controller, a rejected record after every round).
    #[error("controller: {0}")]
    Controller(ClusterError),
}

/// The outcome of one partition's election.
#[derive(Debug)]
pub struct PartitionElection {
    pub partition: i32,
    pub result: Result<Elected, ElectError>,
}

/// A leader an election put in place (committed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elected {
    pub leader: crate::BrokerId,
    pub leader_epoch: i32,
    /// Chosen outside the ISR.
    pub unclean: bool,
}

impl Elected {
    fn of(record: &MetadataRecord) -> Option<Self> {
        match record {
            MetadataRecord::AlterPartition {
                leader,
                leader_epoch,
                unclean,
                ..
            } => Some(Self {
                leader: *leader,
                leader_epoch: *leader_epoch,
                unclean: *unclean,
            }),
            _ => None,
        }
    }
}

/// The outcomes for one topic, in the order asked.
#[derive(Debug)]
pub struct TopicElections {
    pub topic: String,
    pub partitions: Vec<PartitionElection>,
}

/// A proposed record's partition and the partition epoch it was computed from.
#[derive(Debug, Clone, Copy)]
struct Basis {
    topic_id: Uuid,
    partition: i32,
    partition_epoch: i32,
}

impl Basis {
    fn of(record: &MetadataRecord) -> Option<Self> {
        match record {
            MetadataRecord::AlterPartition {
                topic_id,
                partition,
                partition_epoch,
                ..
            } => Some(Self {
                topic_id: *topic_id,
                partition: *partition,
                partition_epoch: partition_epoch - 1,
            }),
            _ => None,
        }
    }

    /// Whether `image` no longer holds the state the record was computed from.
    fn moved_on(&self, image: &Image) -> bool {
        image
            .partition(self.topic_id, self.partition)
            .is_none_or(|p| p.partition_epoch != self.partition_epoch)
    }
}

impl MetadataStore {
    /// Elects leaders by `kind` for `wanted` (topic, partitions), or for every partition of the
    /// image when `None`; then, as Kafka answers, partitions that needed no election are left
    /// out. Returns once every record proposed is committed and applied here; callers bound
    /// the wait with the request's timeout.
    pub async fn elect_leaders(
        &self,
        kind: ElectionType,
        wanted: Option<Vec<(String, Vec<i32>)>>,
    ) -> Vec<TopicElections> {
        let all = wanted.is_none();
        let wanted = wanted.unwrap_or_else(|| elect_leaders::all_partitions(&self.image()));
        let targets: Vec<(usize, i32)> = wanted
            .iter()
            .enumerate()
            .flat_map(|(t, (_, ps))| ps.iter().map(move |p| (t, *p)))
            .collect();
        let mut results: Vec<Option<Result<Elected, ElectError>>> =
            targets.iter().map(|_| None).collect();
        let mut pending: Vec<usize> = (0..targets.len()).collect();
        for round in 1..=ROUNDS {
            let image = self.image();
            let mut records = Vec::new();
            let mut proposed = Vec::new();
            for i in pending.drain(..) {
                let (t, partition) = targets[i];
                match elect_leaders::elect(&image, &wanted[t].0, partition, kind) {
                    Ok(record) => {
                        records.push(record);
                        proposed.push(i);
                    }
                    Err(refused) => results[i] = Some(Err(refused.into())),
                }
            }
            if records.is_empty() {
                break;
            }
            let bases: Vec<(Option<Basis>, Option<Elected>)> = records
                .iter()
                .map(|r| (Basis::of(r), Elected::of(r)))
                .collect();
            let outcomes = self.quorum.propose_each_async(records).await;
            let mut stale = Vec::new();
            for ((i, outcome), (basis, elected)) in proposed.into_iter().zip(outcomes).zip(bases) {
                match outcome {
                    Ok(_) => {
                        results[i] = Some(elected.ok_or_else(|| {
                            ElectError::Controller(ClusterError::Raft("not an election".into()))
                        }))
                    }
                    Err(ClusterError::Rejected(e)) if round < ROUNDS => {
                        tracing::debug!(error = %e, "election record rejected; recomputing it");
                        pending.push(i);
                        stale.extend(basis);
                    }
                    Err(e) => results[i] = Some(Err(ElectError::Controller(e))),
                }
            }
            if !stale.is_empty() {
                let mut rx = self.subscribe();
                let caught_up = rx.wait_for(|img| stale.iter().all(|b| b.moved_on(img)));
                let _ = tokio::time::timeout(CATCH_UP_WAIT, caught_up).await;
            }
        }
        let mut out: Vec<TopicElections> = wanted
            .iter()
            .map(|(topic, _)| TopicElections {
                topic: topic.clone(),
                partitions: Vec::new(),
            })
            .collect();
        for ((t, partition), result) in targets.into_iter().zip(results) {
            let result = result.unwrap_or(Err(ElectError::Refused(ElectionRefused::NotNeeded)));
            if all && matches!(result, Err(ElectError::Refused(ElectionRefused::NotNeeded))) {
                continue;
            }
            out[t]
                .partitions
                .push(PartitionElection { partition, result });
        }
        out
    }
}

#[cfg(test)]
#[path = "elect_test.rs"]
mod tests;
