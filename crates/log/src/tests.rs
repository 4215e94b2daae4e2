//! Unit tests of the log crate, one file per area.

mod append_read_test;
mod cleaner_test;
mod index_test;
mod manager_test;
mod producer_test;
mod recovery_test;
mod relocate_test;
mod retention_test;
mod scrub_test;
mod slice_test;
mod timestamp_test;
mod txn_test;
