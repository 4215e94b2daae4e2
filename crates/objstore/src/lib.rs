//! ferry's object-store seam: the one small trait through which the remote WAL (KIP-1176) and
//! tiered storage talk to a bucket, its backends, and the thin wrappers that each add one concern.
//!
//! # The stack
//!
//! A broker builds its store bottom-up, each layer owning exactly one job:
//!
//! ```text
//!   RetryingStore        retries retriable errors with backoff + jitter, bounds each operation
//!     MeteredStore       counts every request that reaches the backend (= every billed request)
//!       S3Store | LocalDirStore | MemoryStore      (FaultyStore slots in here in tests)
//! ```
//!
//! i.e. `RetryingStore<MeteredStore<S3Store>>`. Metering sits *below* the retrier on purpose:
//! S3 bills per attempt, so each retry attempt is a request of its own in the metrics.
//!
//! # What every backend guarantees
//!
//! The contract is written on [`ObjectStore`] and checked by one conformance suite,
//! `ferry_objstore::testing::conformance` (feature `test-util`), that every backend runs:
//! whole-object puts that readers never see half-written, an atomic create-if-absent, exact
//! range reads, idempotent deletes and key-sorted listings.
//!
//! Object keys for the remote WAL have one owner, [`keys`]; every backend validates keys with
//! [`keys::validate_key`] so a key that works on the local directory also works on S3.

// Tests may read the real clock (clippy.toml's clock seam binds the code under test).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

mod body;
mod error;
mod faulty;
pub mod keys;
mod local_dir;
mod memory;
mod metered;
mod retrying;
mod s3;
mod s3_direct;
mod store;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;

pub use body::ObjectBody;
pub use error::{ErrorKind, ObjStoreError, Result};
pub use faulty::{FaultController, FaultKind, FaultTarget, FaultyStore};
pub use local_dir::LocalDirStore;
pub use memory::MemoryStore;
pub use metered::{MeteredStore, ObjStoreMetrics};
pub use retrying::{RetryConfig, RetryingStore};
pub use s3::{is_directory_bucket_name, S3Config, S3Store};
pub use store::{ObjectMeta, ObjectStore, Op, PutOutcome};

/// The production stack over a backend: retries over metering, so that every attempt is
/// counted as the request the store bills.
pub fn metered_and_retried<S: ObjectStore + 'static>(
    backend: S,
    metrics: &ObjStoreMetrics,
    retry: RetryConfig,
) -> std::sync::Arc<dyn ObjectStore> {
    std::sync::Arc::new(RetryingStore::new(
        MeteredStore::new(backend, metrics.clone()),
        retry,
    ))
}
