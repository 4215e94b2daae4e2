//! [`MemoryStore`]: an in-process bucket for unit tests.
//!
//! Objects live in a `BTreeMap` behind a mutex, so every operation is atomic and listings come out
//! sorted for free. Modification times come from an injected [`Clock`] so tests can pin them.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;
use ferry_common::{SharedClock, SystemClock};

use crate::keys::validate_key;
use crate::store::check_range;
use crate::{ObjStoreError, ObjectMeta, ObjectStore, PutOutcome, Result};

#[derive(Debug, Clone)]
struct Stored {
    data: Bytes,
    last_modified_ms: i64,
}

/// An in-memory [`ObjectStore`]. Cloning shares the same objects.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    name: Arc<str>,
    clock: SharedClock,
    objects: Arc<Mutex<BTreeMap<String, Stored>>>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store named `memory`, timestamped by the system clock.
    pub fn new() -> Self {
        Self::with_clock("memory", Arc::new(SystemClock))
    }

    /// An empty store with a bucket name and clock of the caller's choosing.
    pub fn with_clock(name: &str, clock: SharedClock) -> Self {
        Self {
            name: name.into(),
            clock,
            objects: Arc::default(),
        }
    }

    /// Number of stored objects.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Stored>> {
        // A panic while holding the lock cannot leave the map half-updated (every update is a
        // single insert/remove), so a poisoned lock is still safe to use.
        self.objects
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn stored(&self, data: Bytes) -> Stored {
        Stored {
            data,
            last_modified_ms: self.clock.now_ms(),
        }
    }
}

#[async_trait]
impl ObjectStore for MemoryStore {
    async fn put(&self, key: &str, data: Bytes) -> Result<()> {
        validate_key(key)?;
        let stored = self.stored(data);
        self.lock().insert(key.to_owned(), stored);
        Ok(())
    }

    async fn put_if_absent(&self, key: &str, data: Bytes) -> Result<PutOutcome> {
        validate_key(key)?;
        let stored = self.stored(data);
        let mut objects = self.lock();
        if objects.contains_key(key) {
            return Ok(PutOutcome::AlreadyExists);
        }
        objects.insert(key.to_owned(), stored);
        Ok(PutOutcome::Created)
    }

    async fn get(&self, key: &str) -> Result<Bytes> {
        validate_key(key)?;
        self.lock()
            .get(key)
            .map(|s| s.data.clone())
            .ok_or_else(|| ObjStoreError::not_found(key))
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        let data = self.get(key).await?;
        check_range(key, &range, data.len() as u64)?;
        Ok(data.slice(range.start as usize..range.end as usize))
    }

    async fn head(&self, key: &str) -> Result<Option<ObjectMeta>> {
        validate_key(key)?;
        Ok(self.lock().get(key).map(|s| ObjectMeta {
            key: key.to_owned(),
            size: s.data.len() as u64,
            last_modified_ms: s.last_modified_ms,
        }))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        Ok(self
            .lock()
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, s)| ObjectMeta {
                key: k.clone(),
                size: s.data.len() as u64,
                last_modified_ms: s.last_modified_ms,
            })
            .collect())
    }

    async fn delete(&self, key: &str) -> Result<()> {
        validate_key(key)?;
        self.lock().remove(key);
        Ok(())
    }

    fn bucket(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_common::ManualClock;

    #[tokio::test]
    async fn memory_store_passes_conformance() {
        crate::testing::conformance_with_races(Arc::new(MemoryStore::new()), 16).await;
    }

    #[tokio::test]
    async fn modification_time_comes_from_the_injected_clock() {
        let clock = ManualClock::new(1_000);
        let store = MemoryStore::with_clock("m", clock.clone());
        store.put("a", Bytes::from_static(b"x")).await.unwrap();
        clock.advance(5);
        store.put("b", Bytes::from_static(b"y")).await.unwrap();
        let listed = store.list("").await.unwrap();
        let times: Vec<i64> = listed.iter().map(|m| m.last_modified_ms).collect();
        assert_eq!(times, [1_000, 1_005]);
        assert_eq!(store.bucket(), "m");
    }
}
