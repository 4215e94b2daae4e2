//! AlterPartitionReassignments through the metadata quorum (KIP-455): each partition's request
//! becomes one `ReassignPartition` record; [`crate::Image::apply`] decides the new replica set
//! from the state it meets ([`crate::reassignment`]), so no compare-and-set round is needed.
//! The call returns once every record is committed and applied on this node (or refused), so
//! a ListPartitionReassignments answered here right after shows it.

use super::{MetadataError, MetadataStore};
use crate::{BrokerId, ClusterError, MetadataRecord};

/// One partition's requested reassignment: a target replica list, or `None` to cancel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReassignRequest {
    pub topic: String,
    pub partition: i32,
    pub target: Option<Vec<BrokerId>>,
}

impl MetadataStore {
    /// Proposes every request at once; one outcome per request, in order.
    pub async fn reassign_partitions(
        &self,
        requests: &[ReassignRequest],
    ) -> Vec<Result<(), MetadataError>> {
        let image = self.image();
        let mut outcomes: Vec<Option<Result<(), MetadataError>>> = Vec::new();
        let mut records = Vec::new();
        for r in requests {
            match image.topic(&r.topic) {
                Some(topic) => {
                    outcomes.push(None);
                    records.push(MetadataRecord::ReassignPartition {
                        topic_id: topic.id,
                        partition: r.partition,
                        target: r.target.clone(),
                    });
                }
                None => outcomes.push(Some(Err(MetadataError::UnknownTopic(r.topic.clone())))),
            }
        }
        let mut committed = self.quorum.propose_each_async(records).await.into_iter();
        outcomes
            .into_iter()
            .map(|o| match o {
                Some(known) => known,
                None => match committed.next() {
                    Some(Ok(_)) => Ok(()),
                    Some(Err(e)) => Err(MetadataError::Controller(e)),
                    None => Err(MetadataError::Controller(ClusterError::Raft(
                        "the quorum answered fewer proposals than were made".into(),
                    ))),
                },
            })
            .collect()
    }
}
