//! The leader's hand-off to the uploader: an append's batches as the log stored them. The
//! decisions about followers' reports live in `ferry_wal::leader_tracker`.

use ferry_log::AppendInfo;
use ferry_wal::uploader::WalAppend;

use crate::replica_manager::Partition;

/// The batches of a leader append as the log stored them (it rewrote offsets and epochs), for
/// the uploader, under the epoch they were stamped with; `None` when nothing was written (a
/// duplicate).
pub fn stored_append(p: &Partition, info: &AppendInfo) -> Option<WalAppend> {
    if info.stored.is_empty() {
        return None;
    }
    Some(WalAppend {
        tp: p.tp.clone(),
        topic_id: p.topic_id,
        base_offset: info.first_offset,
        last_offset: info.last_offset,
        // Not the partition's epoch now: followers trust the record's epoch to tell an old
        // leader's batches from the current one's.
        leader_epoch: info.leader_epoch,
        records: info.stored.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote_wal::test_support::{batch, replicas, topic};

    /// The hand-off names the epoch the log stamped on the batches, whatever the partition's
    /// epoch is by the time it is read.
    #[test]
    fn the_hand_off_carries_the_epoch_the_batches_were_stamped_with() {
        let dir = tempfile::tempdir().unwrap();
        let rm = replicas(dir.path(), 1, &topic(1, 3));
        let p = rm.partition_of("t", 0).unwrap();
        let info = p.append(&batch(2)).unwrap();
        assert_eq!(info.leader_epoch, 3);
        rm.ensure_topic(&topic(1, 4), ferry_log::LogConfig::default())
            .unwrap();
        assert_eq!(p.leader_epoch(), 4);
        let append = stored_append(&p, &info).expect("batches were written");
        assert_eq!(append.leader_epoch, 3);
    }
}
