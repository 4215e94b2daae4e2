//! The lifecycle of one remote WAL object, in the manner of Kafka's `RemoteLogSegmentState`
//! (RFC 0003, `docs/rfcs/0003-remote-wal-lifecycle.md`).
//!
//! ```text
//!                 PUT ok                 metadata acked
//!   Uploading ───────────► Uploaded ───────────────────► Published
//!                              │                             │ every assigned replica (or the
//!                              │ crash / publish failed      │ tier) holds every slice, or older
//!                              ▼                             ▼ than its capped lifetime
//!                          Orphaned                     DeletePending
//!                              │ older than the grace       │ object deleted, then every slice's
//!                              │ period: object deleted     │ metadata tombstoned
//!                              ▼                             ▼
//!                           Deleted ◄────────────────────────┘
//! ```
//!
//! Every state may "transition" to itself: retries are idempotent (a PUT reusing its key, a
//! second publish of the same records, a DELETE of a missing object, a repeated tombstone).
//!
//! - **Uploading**: the uploader cut the object and its `put_if_absent` is in flight. A PUT that
//!   fails for good leaves no object; one that fails *ambiguously* (timeout) may still have
//!   landed, and such an object is in fact `Uploaded` without anyone knowing: the orphan sweep
//!   finds it by listing, so no `Uploading → Orphaned` edge is needed.
//! - **Uploaded**: the object exists; its metadata is not yet acknowledged by the metadata topic.
//! - **Published**: followers may read it.
//! - **Orphaned**: it exists but its metadata never will (the uploader crashed between PUT and
//!   publish, or the publish failed). Nothing points at it; the GC deletes it after a grace period.
//! - **DeletePending**: no follower needs it any more; the GC deletes the object and then
//!   tombstones its slices' records, retrying both until they succeed.
//! - **Deleted**: object gone and metadata tombstoned. Terminal.

use crate::error::{Result, WalError};

/// Where a remote WAL object is in its life (see the module docs for the diagram).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WalObjectState {
    Uploading,
    Uploaded,
    Published,
    DeletePending,
    Orphaned,
    Deleted,
}

impl WalObjectState {
    /// Every state, for tables and tests.
    pub const ALL: [WalObjectState; 6] = [
        Self::Uploading,
        Self::Uploaded,
        Self::Published,
        Self::DeletePending,
        Self::Orphaned,
        Self::Deleted,
    ];

    /// Whether no further transition (other than to itself) exists.
    pub fn is_terminal(self) -> bool {
        self == Self::Deleted
    }

    /// Whether followers may hold metadata pointing at the object.
    pub fn may_be_referenced(self) -> bool {
        matches!(self, Self::Published | Self::DeletePending)
    }

    /// Moves to `to` if the lifecycle allows it, else `WalError::Invalid`.
    pub fn transition(self, to: WalObjectState) -> Result<WalObjectState> {
        if is_valid_transition(self, to) {
            Ok(to)
        } else {
            Err(WalError::Invalid(format!(
                "remote WAL object cannot go from {self:?} to {to:?}"
            )))
        }
    }
}

/// Whether an object may go from `from` to `to`; a self-transition is always valid (an
/// idempotent retry).
pub fn is_valid_transition(from: WalObjectState, to: WalObjectState) -> bool {
    use WalObjectState::*;
    from == to
        || matches!(
            (from, to),
            (Uploading, Uploaded)
                | (Uploaded, Published)
                | (Uploaded, Orphaned)
                | (Published, DeletePending)
                | (DeletePending, Deleted)
                | (Orphaned, Deleted)
        )
}

#[cfg(test)]
mod tests {
    use super::WalObjectState::*;
    use super::*;

    /// Every ordered pair of states, with the expected answer spelled out row by row.
    #[test]
    fn transition_table_covers_every_pair() {
        // Rows: from; columns in `ALL` order: Uploading, Uploaded, Published, DeletePending,
        // Orphaned, Deleted.
        let table: [(WalObjectState, [bool; 6]); 6] = [
            (Uploading, [true, true, false, false, false, false]),
            (Uploaded, [false, true, true, false, true, false]),
            (Published, [false, false, true, true, false, false]),
            (DeletePending, [false, false, false, true, false, true]),
            (Orphaned, [false, false, false, false, true, true]),
            (Deleted, [false, false, false, false, false, true]),
        ];
        let mut checked = 0;
        for (from, row) in table {
            for (to, want) in WalObjectState::ALL.into_iter().zip(row) {
                assert_eq!(is_valid_transition(from, to), want, "{from:?} -> {to:?}");
                assert_eq!(from.transition(to).is_ok(), want, "{from:?} -> {to:?}");
                checked += 1;
            }
        }
        assert_eq!(checked, 36);
    }

    #[test]
    fn only_deleted_is_terminal_and_reachable_from_both_ends() {
        for s in WalObjectState::ALL {
            assert_eq!(s.is_terminal(), s == Deleted);
        }
        assert!(is_valid_transition(DeletePending, Deleted));
        assert!(is_valid_transition(Orphaned, Deleted));
        assert!(
            !is_valid_transition(Published, Orphaned),
            "published objects are never orphans"
        );
        assert!(
            !is_valid_transition(Published, Deleted),
            "delete goes through DeletePending"
        );
    }
}
