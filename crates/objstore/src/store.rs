//! The [`ObjectStore`] trait: the seam between ferry and a bucket.

use std::fmt;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use crate::{ObjStoreError, ObjectBody, Result};

/// What one stored object looks like from the outside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// The object's key (as given to `put`).
    pub key: String,
    /// Size in bytes.
    pub size: u64,
    /// Last modification time, milliseconds since the Unix epoch, as the store reports it.
    pub last_modified_ms: i64,
}

/// Result of [`ObjectStore::put_if_absent`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// The object did not exist and now holds the given bytes.
    Created,
    /// An object already existed under the key; it was left untouched.
    AlreadyExists,
}

/// The operations of [`ObjectStore`], for metrics labels, fault injection and error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    Put,
    PutIfAbsent,
    Get,
    GetRange,
    Head,
    List,
    Delete,
    /// Several deletes in one request (S3 `DeleteObjects`).
    DeleteMany,
}

impl Op {
    pub const ALL: [Op; 8] = [
        Op::Put,
        Op::PutIfAbsent,
        Op::Get,
        Op::GetRange,
        Op::Head,
        Op::List,
        Op::Delete,
        Op::DeleteMany,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::PutIfAbsent => "put_if_absent",
            Op::Get => "get",
            Op::GetRange => "get_range",
            Op::Head => "head",
            Op::List => "list",
            Op::Delete => "delete",
            Op::DeleteMany => "delete_objects",
        }
    }

    /// Whether the operation changes the store (and so may have happened despite an error).
    pub fn is_write(self) -> bool {
        matches!(
            self,
            Op::Put | Op::PutIfAbsent | Op::Delete | Op::DeleteMany
        )
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A flat namespace of immutable-once-written byte objects (a bucket).
///
/// Rules every implementation keeps (the conformance suite in `testing` checks them):
///
/// - **Whole objects only.** A reader sees either the complete previous object, the complete new
///   one, or none; never a prefix of a put in progress.
/// - `put` overwrites. `put_if_absent` is atomic: of many concurrent calls for one key exactly one
///   returns [`PutOutcome::Created`]; the others get [`PutOutcome::AlreadyExists`] and the object
///   keeps the winner's bytes.
/// - `get`/`get_range` of a missing key is [`ObjStoreError::NotFound`](crate::ObjStoreError);
///   `head` of a missing key is `Ok(None)`.
/// - `get_range(key, a..b)` returns exactly `b - a` bytes; `a > b` or `b > size` is
///   [`ObjStoreError::InvalidRange`](crate::ObjStoreError) (S3 would silently truncate; we do
///   not). An empty range inside the object returns empty bytes.
/// - `list(prefix)` is a plain string-prefix match over whole keys (not a directory listing) and
///   returns objects sorted by key.
/// - `delete` is idempotent: deleting a missing key succeeds.
/// - Keys must pass [`crate::keys::validate_key`]; others fail with `InvalidKey` on every backend.
///
/// The trait is object safe; brokers hold an `Arc<dyn ObjectStore>`.
#[async_trait]
pub trait ObjectStore: Send + Sync + fmt::Debug {
    /// Stores `data` under `key`, replacing any existing object.
    async fn put(&self, key: &str, data: Bytes) -> Result<()>;

    /// Stores `data` under `key` only if no object exists there (S3 `If-None-Match: *`).
    async fn put_if_absent(&self, key: &str, data: Bytes) -> Result<PutOutcome>;

    /// [`ObjectStore::put_if_absent`] of a body held in parts: stores that can send the parts as
    /// they are (S3, a local file) do, S3 with the body's CRC-32C (read again from the bytes
    /// only when the builder did not know it); the others join the parts.
    async fn put_body_if_absent(&self, key: &str, body: ObjectBody) -> Result<PutOutcome> {
        self.put_if_absent(key, body.to_bytes()).await
    }

    /// Stores the file at `path`, which holds `len` bytes and does not change meanwhile, under
    /// `key`, replacing any existing object. Stores that can copy a file without reading it
    /// into memory (a local directory: `copy_file_range`, no user-space copy) do; the others
    /// read it and [`ObjectStore::put`] it.
    async fn put_file(&self, key: &str, path: &Path, len: u64) -> Result<()> {
        let data = tokio::fs::read(path)
            .await
            .map_err(|e| crate::ObjStoreError::io("put_file", key, e))?;
        if data.len() as u64 != len {
            return Err(crate::ObjStoreError::io(
                "put_file",
                key,
                std::io::Error::other(format!(
                    "{} holds {} bytes, not {len}",
                    path.display(),
                    data.len()
                )),
            ));
        }
        self.put(key, Bytes::from(data)).await
    }

    /// Reads a whole object.
    async fn get(&self, key: &str) -> Result<Bytes>;

    /// Reads bytes `range.start..range.end` of an object.
    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes>;

    /// [`ObjectStore::get_range`] in the pieces the transport delivered, in order, for a
    /// caller that cuts the bytes up again anyway: joining a multi-megabyte body into one
    /// buffer costs a copy of every byte and the page faults of a fresh buffer. Stores that
    /// hold the bytes in one piece return one.
    async fn get_range_pieces(&self, key: &str, range: Range<u64>) -> Result<Vec<Bytes>> {
        Ok(vec![self.get_range(key, range).await?])
    }

    /// Size and modification time of an object, `None` when it does not exist.
    async fn head(&self, key: &str) -> Result<Option<ObjectMeta>>;

    /// All objects whose key starts with `prefix`, sorted by key.
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>>;

    /// Removes an object; succeeds when there is none.
    async fn delete(&self, key: &str) -> Result<()>;

    /// Removes `keys`, succeeding for those that do not exist, and answers the keys it could
    /// not remove with their errors (none when all went). Stores with a batch call send them
    /// in as few requests as they can (S3 `DeleteObjects`, 1,000 keys a request: one request
    /// where a remote-WAL GC round sent one DELETE per object); the others delete one key at a
    /// time. `Err` when a request failed as a whole: some keys may be gone, and deleting them
    /// again is harmless.
    async fn delete_many(&self, keys: &[String]) -> Result<Vec<(String, ObjStoreError)>> {
        let mut failed = Vec::new();
        for key in keys {
            if let Err(e) = self.delete(key).await {
                failed.push((key.clone(), e));
            }
        }
        Ok(failed)
    }

    /// The bucket (or root directory) this store writes to, for metrics labels and logs.
    fn bucket(&self) -> &str;
}

macro_rules! forward_object_store {
    ($ty:ty) => {
        #[async_trait]
        impl<S: ObjectStore + ?Sized> ObjectStore for $ty {
            async fn put(&self, key: &str, data: Bytes) -> Result<()> {
                (**self).put(key, data).await
            }
            async fn put_if_absent(&self, key: &str, data: Bytes) -> Result<PutOutcome> {
                (**self).put_if_absent(key, data).await
            }
            async fn put_body_if_absent(&self, key: &str, body: ObjectBody) -> Result<PutOutcome> {
                (**self).put_body_if_absent(key, body).await
            }
            async fn put_file(&self, key: &str, path: &Path, len: u64) -> Result<()> {
                (**self).put_file(key, path, len).await
            }
            async fn get(&self, key: &str) -> Result<Bytes> {
                (**self).get(key).await
            }
            async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
                (**self).get_range(key, range).await
            }
            async fn get_range_pieces(&self, key: &str, range: Range<u64>) -> Result<Vec<Bytes>> {
                (**self).get_range_pieces(key, range).await
            }
            async fn head(&self, key: &str) -> Result<Option<ObjectMeta>> {
                (**self).head(key).await
            }
            async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
                (**self).list(prefix).await
            }
            async fn delete(&self, key: &str) -> Result<()> {
                (**self).delete(key).await
            }
            async fn delete_many(&self, keys: &[String]) -> Result<Vec<(String, ObjStoreError)>> {
                (**self).delete_many(keys).await
            }
            fn bucket(&self) -> &str {
                (**self).bucket()
            }
        }
    };
}

forward_object_store!(Arc<S>);
forward_object_store!(Box<S>);

/// Checks `range` against an object of `size` bytes (the rule shared by every backend).
pub(crate) fn check_range(key: &str, range: &Range<u64>, size: u64) -> Result<()> {
    if range.start > range.end || range.end > size {
        return Err(crate::ObjStoreError::invalid_range(key, range, Some(size)));
    }
    Ok(())
}
