//! The JSON metadata file of ferry before the controller quorum (`ferry-metadata.json` in the
//! first log dir), read once so its topics and producer-id position can be imported into the
//! controller's log. After the import the file is renamed to `ferry-metadata.json.imported` and
//! never read again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use uuid::Uuid;

use super::MetadataError;

pub const FILE_NAME: &str = "ferry-metadata.json";
pub const IMPORTED_NAME: &str = "ferry-metadata.json.imported";

#[derive(Debug, Clone, Deserialize)]
pub struct LegacyTopic {
    pub name: String,
    pub id: Uuid,
    pub partitions: i32,
    pub replication_factor: i16,
    #[serde(default)]
    pub configs: BTreeMap<String, String>,
}

/// The old document, as the JSON store wrote it.
#[derive(Debug, Clone, Deserialize)]
pub struct LegacyState {
    pub cluster_id: String,
    pub node_id: i32,
    pub topics: BTreeMap<String, LegacyTopic>,
    /// Producer ids below this may have been handed out.
    pub producer_id_block_end: i64,
}

/// Reads the old file in `dir`, if it is still there (`None` once imported or never written).
pub fn read(dir: &Path, node_id: i32) -> Result<Option<(PathBuf, LegacyState)>, MetadataError> {
    let path = dir.join(FILE_NAME);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(MetadataError::Io { path, source }),
    };
    let state: LegacyState =
        serde_json::from_slice(&bytes).map_err(|e| MetadataError::Corrupt {
            path: path.clone(),
            detail: e.to_string(),
        })?;
    if state.node_id != node_id {
        return Err(MetadataError::NodeIdMismatch {
            found: state.node_id,
            configured: node_id,
        });
    }
    Ok(Some((path, state)))
}

/// Renames the imported file so it is not imported again (and fsyncs the directory).
pub fn mark_imported(path: &Path) -> Result<(), MetadataError> {
    let target = path.with_file_name(IMPORTED_NAME);
    std::fs::rename(path, &target).map_err(|source| MetadataError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if let Some(dir) = path.parent() {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}
