//! Reading the metadata topic so that a full queue holds back only its own partition.
//!
//! A follower back from an outage has more metadata to replay for a partition than its queue
//! holds ([`FetcherConfig::max_records_per_partition`]). The records that do not fit are not
//! dropped (their ranges would come by the classic fetch, across zones): the fetcher notes,
//! per metadata partition, the offset of that partition's first record not taken, and asks for
//! the metadata to be read again from there ([`WalFetcher::reread_from`]) once the queue has
//! room. Records of the other partitions are taken as they come, so a partition in the ISR
//! never waits behind one catching up (acks=all waits for its report).
//!
//! A re-read gives each partition only what it did not take: a partition behind from `y` takes
//! the records at or after `y`, the others none below what was read before. A partition whose
//! records before the read's start were not taken takes none of it (that would leave a hole);
//! a later re-read starts low enough for it.
//!
//! [`FetcherConfig::max_records_per_partition`]: super::FetcherConfig::max_records_per_partition

use std::collections::{BTreeMap, HashMap};

use super::WalFetcher;
use crate::metadata::WalMetadataEvent;
use crate::uploader::WalPartition;

/// Where the fetcher stands in one partition of the metadata topic.
#[derive(Debug, Default)]
pub(super) struct MetadataRead {
    /// Every record below this was offered once (`None`: nothing read yet).
    read_to: Option<i64>,
    /// Partitions whose queue was full: their records from this offset on, below `read_to`,
    /// were not taken.
    behind: HashMap<WalPartition, i64>,
}

/// What [`WalFetcher::on_metadata_read`] did with a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetadataReadTaken {
    /// A partition's queue was full: some of its records are left to a re-read.
    pub queue_full: bool,
}

impl WalFetcher {
    /// Queues what one read of partition `metadata_partition` of the metadata topic brought:
    /// `events` with their offsets, in order, from a read that covered `from..next` (nothing
    /// before `from`; `from` may lie below what is left of the log, whose start moved). See
    /// the module docs for what each partition takes.
    ///
    /// Says whether a partition's queue was full.
    pub fn on_metadata_read(
        &self,
        metadata_partition: i32,
        events: Vec<(i64, WalMetadataEvent)>,
        from: i64,
        next: i64,
    ) -> MetadataReadTaken {
        let (read_to, behind) = {
            let st = self.state();
            let read = st.metadata_reads.get(&metadata_partition);
            (
                read.and_then(|r| r.read_to).unwrap_or(i64::MIN),
                read.map(|r| r.behind.clone()).unwrap_or_default(),
            )
        };
        let (offsets, events): (Vec<i64>, Vec<WalMetadataEvent>) = events.into_iter().unzip();
        let refused = self.take(events, |i, wp| match behind.get(wp) {
            Some(&y) => y >= from && offsets[i] >= y,
            None => offsets[i] >= read_to,
        });
        let read_to_now = read_to.max(next);
        let mut behind_now: HashMap<WalPartition, i64> = behind
            .into_iter()
            .map(|(wp, y)| {
                let y = match refused.get(&wp) {
                    Some(&i) => offsets[i],
                    // Took all of its records this read covered.
                    None if y >= from => y.max(next),
                    None => y,
                };
                (wp, y)
            })
            .collect();
        for (wp, i) in &refused {
            behind_now.entry(*wp).or_insert(offsets[*i]);
        }
        behind_now.retain(|_, y| *y < read_to_now);
        let mut st = self.state();
        let read = st.metadata_reads.entry(metadata_partition).or_default();
        read.read_to = Some(read_to_now);
        read.behind = behind_now;
        MetadataReadTaken {
            queue_full: !refused.is_empty(),
        }
    }

    /// Every record of partition `metadata_partition` of the metadata topic below this was
    /// read once ([`i64::MIN`] before the first read): the GC is shown each record once.
    pub fn metadata_read_to(&self, metadata_partition: i32) -> i64 {
        self.state()
            .metadata_reads
            .get(&metadata_partition)
            .and_then(|r| r.read_to)
            .unwrap_or(i64::MIN)
    }

    /// Where partition `metadata_partition` of the metadata topic should be read again from:
    /// the first record not taken of a partition whose queue is at most half full now; `None`
    /// when there is none.
    pub fn reread_from(&self, metadata_partition: i32) -> Option<i64> {
        let st = self.state();
        let read = st.metadata_reads.get(&metadata_partition)?;
        let room_below = self.config.max_records_per_partition.div_ceil(2);
        read.behind
            .iter()
            .filter(|(wp, _)| st.records.get(wp).map_or(0, BTreeMap::len) < room_below)
            .map(|(_, y)| *y)
            .min()
    }

    /// Partitions whose records wait to be read again, over every metadata partition.
    pub fn partitions_awaiting_reread(&self) -> usize {
        self.state()
            .metadata_reads
            .values()
            .map(|r| r.behind.len())
            .sum()
    }

    /// The records of partition `metadata_partition` of the metadata topic below `offset` are
    /// gone (its log start moved past them): partitions behind read on from `offset` (the
    /// follower fetches what they missed classically).
    pub fn metadata_gone_below(&self, metadata_partition: i32, offset: i64) {
        let mut st = self.state();
        if let Some(read) = st.metadata_reads.get_mut(&metadata_partition) {
            let read_to = read.read_to.unwrap_or(i64::MIN);
            for y in read.behind.values_mut() {
                *y = (*y).max(offset);
            }
            read.behind.retain(|_, y| *y < read_to);
        }
    }
}
