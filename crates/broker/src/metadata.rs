//! The cluster metadata of a single-node ferry: topics (name, id, partition count, config
//! overrides), the cluster id, and the producer-id block, persisted as one JSON document in the
//! first log dir (`ferry-metadata.json`).
//!
//! Invariants: a change is on disk (written to a temporary file, fsynced, renamed over the old
//! one) before the call that made it returns, so a topic a client was told exists survives a
//! crash; topic names and ids are unique; a producer id is never handed out twice, because the
//! upper end of the current block is persisted before any id from it is used.
//!
//! The multi-node controller quorum (a later issue) replaces this store; the broker reaches it
//! only through the methods below.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

const FILE_NAME: &str = "ferry-metadata.json";
const PRODUCER_ID_BLOCK: i64 = 1000;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TopicMeta {
    pub name: String,
    pub id: Uuid,
    pub partitions: i32,
    pub replication_factor: i16,
    /// Topic-level overrides only; defaults come from the broker config.
    pub configs: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct State {
    cluster_id: String,
    node_id: i32,
    topics: BTreeMap<String, TopicMeta>,
    /// Producer ids below this may have been handed out.
    producer_id_block_end: i64,
    #[serde(skip)]
    next_producer_id: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("metadata file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("metadata file {path} is corrupt: {detail}")]
    Corrupt { path: PathBuf, detail: String },
    #[error("metadata belongs to node {found}, this broker is node.id {configured}")]
    NodeIdMismatch { found: i32, configured: i32 },
    #[error("topic `{0}` already exists")]
    TopicExists(String),
    #[error("topic `{0}` does not exist")]
    UnknownTopic(String),
}

pub struct MetadataStore {
    path: PathBuf,
    state: RwLock<State>,
}

impl MetadataStore {
    /// Opens the store in `dir`, creating a new cluster id on first start.
    pub fn open(dir: &Path, node_id: i32) -> Result<Self, MetadataError> {
        let path = dir.join(FILE_NAME);
        let io = |source| MetadataError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let state = match std::fs::read(&path) {
            Ok(bytes) => {
                let mut s: State =
                    serde_json::from_slice(&bytes).map_err(|e| MetadataError::Corrupt {
                        path: path.clone(),
                        detail: e.to_string(),
                    })?;
                if s.node_id != node_id {
                    return Err(MetadataError::NodeIdMismatch {
                        found: s.node_id,
                        configured: node_id,
                    });
                }
                // Ids of the old block may have been used before a crash: start a new block.
                s.next_producer_id = s.producer_id_block_end;
                s
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => State {
                cluster_id: new_cluster_id(),
                node_id,
                topics: BTreeMap::new(),
                producer_id_block_end: 0,
                next_producer_id: 0,
            },
            Err(e) => return Err(io(e)),
        };
        let store = Self {
            path,
            state: RwLock::new(state),
        };
        store.persist(&store.read())?;
        Ok(store)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }

    pub fn cluster_id(&self) -> String {
        self.read().cluster_id.clone()
    }

    pub fn topics(&self) -> Vec<TopicMeta> {
        self.read().topics.values().cloned().collect()
    }

    pub fn topic(&self, name: &str) -> Option<TopicMeta> {
        self.read().topics.get(name).cloned()
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<TopicMeta> {
        self.read().topics.values().find(|t| t.id == id).cloned()
    }

    pub fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicMeta, MetadataError> {
        let mut state = self.write();
        if state.topics.contains_key(name) {
            return Err(MetadataError::TopicExists(name.to_string()));
        }
        let mut id = Uuid::new_v4();
        while id.is_nil() || state.topics.values().any(|t| t.id == id) {
            id = Uuid::new_v4();
        }
        let topic = TopicMeta {
            name: name.to_string(),
            id,
            partitions,
            replication_factor,
            configs,
        };
        let mut next = state.clone();
        next.topics.insert(name.to_string(), topic.clone());
        self.persist(&next)?;
        *state = next;
        Ok(topic)
    }

    pub fn delete_topic(&self, name: &str) -> Result<TopicMeta, MetadataError> {
        let mut state = self.write();
        let mut next = state.clone();
        let removed = next
            .topics
            .remove(name)
            .ok_or_else(|| MetadataError::UnknownTopic(name.to_string()))?;
        self.persist(&next)?;
        *state = next;
        Ok(removed)
    }

    pub fn set_partition_count(&self, name: &str, count: i32) -> Result<TopicMeta, MetadataError> {
        self.update(name, |t| {
            t.partitions = count;
            Ok(())
        })
    }

    pub fn set_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicMeta, MetadataError> {
        self.update(name, |t| {
            t.configs = configs;
            Ok(())
        })
    }

    fn update(
        &self,
        name: &str,
        change: impl FnOnce(&mut TopicMeta) -> Result<(), MetadataError>,
    ) -> Result<TopicMeta, MetadataError> {
        let mut state = self.write();
        let mut next = state.clone();
        let topic = next
            .topics
            .get_mut(name)
            .ok_or_else(|| MetadataError::UnknownTopic(name.to_string()))?;
        change(topic)?;
        let result = topic.clone();
        self.persist(&next)?;
        *state = next;
        Ok(result)
    }

    /// A producer id never handed out before, across restarts.
    pub fn allocate_producer_id(&self) -> Result<i64, MetadataError> {
        let mut state = self.write();
        if state.next_producer_id >= state.producer_id_block_end {
            let mut next = state.clone();
            next.producer_id_block_end = state.next_producer_id + PRODUCER_ID_BLOCK;
            self.persist(&next)?;
            state.producer_id_block_end = next.producer_id_block_end;
        }
        let id = state.next_producer_id;
        state.next_producer_id += 1;
        Ok(id)
    }

    fn persist(&self, state: &State) -> Result<(), MetadataError> {
        let io = |source| MetadataError::Io {
            path: self.path.clone(),
            source,
        };
        let bytes = serde_json::to_vec_pretty(state).map_err(|e| MetadataError::Corrupt {
            path: self.path.clone(),
            detail: e.to_string(),
        })?;
        let tmp = self.path.with_extension("json.tmp");
        let mut f = std::fs::File::create(&tmp).map_err(io)?;
        f.write_all(&bytes).map_err(io)?;
        f.sync_all().map_err(io)?;
        std::fs::rename(&tmp, &self.path).map_err(io)?;
        if let Some(dir) = self.path.parent() {
            if let Ok(d) = std::fs::File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }
}

impl ferry_group::TopicCatalog for MetadataStore {
    fn topic(&self, name: &str) -> Option<(Uuid, i32)> {
        MetadataStore::topic(self, name).map(|t| (t.id, t.partitions))
    }
    fn topic_name(&self, id: Uuid) -> Option<String> {
        self.topic_by_id(id).map(|t| t.name)
    }
}

/// Kafka cluster ids are 16 random bytes in URL-safe base64 without padding (22 chars).
fn new_cluster_id() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = Uuid::new_v4().into_bytes();
    let mut bits: u128 = u128::from_be_bytes(bytes);
    let mut out = String::with_capacity(22);
    for _ in 0..22 {
        out.push(ALPHABET[(bits & 63) as usize] as char);
        bits >>= 6;
    }
    out
}

/// Kafka's topic name rules: 1..=249 chars of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("topic name is empty".into());
    }
    if name == "." || name == ".." {
        return Err(format!("topic name cannot be `{name}`"));
    }
    if name.len() > 249 {
        return Err(format!(
            "topic name is {} characters, the limit is 249",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "topic name `{name}` contains `{c}`; legal characters are ASCII letters, digits, `.`, `_` and `-`"
        ));
    }
    Ok(())
}

/// Topics whose names differ only by `.` versus `_` collide in metric names (Kafka refuses them).
pub fn collides(a: &str, b: &str) -> bool {
    a != b && a.replace('.', "_") == b.replace('.', "_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_and_producer_ids_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let store = MetadataStore::open(dir.path(), 1).unwrap();
        let cluster = store.cluster_id();
        assert_eq!(cluster.len(), 22);
        let mut cfg = BTreeMap::new();
        cfg.insert("retention.ms".to_string(), "1000".to_string());
        let t = store.create_topic("orders", 3, 1, cfg.clone()).unwrap();
        assert!(matches!(
            store.create_topic("orders", 1, 1, BTreeMap::new()),
            Err(MetadataError::TopicExists(_))
        ));
        let p1 = store.allocate_producer_id().unwrap();
        let p2 = store.allocate_producer_id().unwrap();
        assert_ne!(p1, p2);
        store.set_partition_count("orders", 5).unwrap();
        drop(store);

        let store = MetadataStore::open(dir.path(), 1).unwrap();
        assert_eq!(store.cluster_id(), cluster);
        let again = store.topic("orders").unwrap();
        assert_eq!(again.id, t.id);
        assert_eq!(again.partitions, 5);
        assert_eq!(again.configs, cfg);
        assert_eq!(store.topic_by_id(t.id).unwrap().name, "orders");
        let p3 = store.allocate_producer_id().unwrap();
        assert!(p3 > p2, "producer ids are never reused: {p3} after {p2}");
        store.delete_topic("orders").unwrap();
        assert!(store.topic("orders").is_none());
    }

    #[test]
    fn another_node_id_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        drop(MetadataStore::open(dir.path(), 1).unwrap());
        assert!(matches!(
            MetadataStore::open(dir.path(), 2),
            Err(MetadataError::NodeIdMismatch {
                found: 1,
                configured: 2
            })
        ));
    }

    #[test]
    fn corrupt_file_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), b"{not json").unwrap();
        assert!(matches!(
            MetadataStore::open(dir.path(), 1),
            Err(MetadataError::Corrupt { .. })
        ));
    }

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert!(validate_topic_name("orders.v1_x-2").is_ok());
        for bad in ["", ".", "..", "bad name", "a/b", "ü"] {
            assert!(validate_topic_name(bad).is_err(), "{bad}");
        }
        assert!(validate_topic_name(&"a".repeat(250)).is_err());
        assert!(validate_topic_name(&"a".repeat(249)).is_ok());
        assert!(collides("a.b", "a_b"));
        assert!(!collides("a.b", "a.b"));
    }
}
