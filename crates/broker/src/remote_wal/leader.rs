//! The leader's hand-off to the uploader: an append's batches as the log stored them. The
//! decisions about followers' reports live in `ferry_wal::leader_tracker`.

use ferry_log::AppendInfo;
use ferry_wal::uploader::WalAppend;

use crate::replica_manager::Partition;

/// The batches of a leader append as the log stored them (it rewrote offsets and epochs), for
/// the uploader; `None` when nothing was written (a duplicate).
pub fn stored_append(p: &Partition, info: &AppendInfo) -> Option<WalAppend> {
    if info.stored.is_empty() {
        return None;
    }
    Some(WalAppend {
        tp: p.tp.clone(),
        topic_id: p.topic_id,
        base_offset: info.first_offset,
        last_offset: info.last_offset,
        leader_epoch: p.leader_epoch(),
        records: info.stored.clone(),
    })
}
