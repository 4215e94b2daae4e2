//! [`LocalDirStore`]: a bucket on a local directory, ferry's embedded default (a first run needs
//! no cloud) and the backend of single-machine tests.
//!
//! # Layout and invariants
//!
//! - Key `a/b/c` is the file `<root>/a/b/c`. Keys are checked by [`validate_key`], so no key can
//!   name a path outside `root`; the first segment [`TMP_DIR`] is reserved.
//! - **Readers never see a partial object.** A put writes `<root>/.ferry-tmp/<unique>`, fsyncs it,
//!   then renames it over the key (rename is atomic within one filesystem) and fsyncs the parent
//!   directory so the new name survives a crash.
//! - **`put_if_absent` is atomic.** The fsynced temp file is hard-linked to the key; `link(2)`
//!   fails with `EEXIST` if any object is there, so of two racing creates exactly one wins.
//! - After a crash, `.ferry-tmp/` may hold orphaned temp files; they are never listed, and
//!   [`LocalDirStore::new`] removes those older than ten minutes (younger ones may be puts in
//!   flight of another process sharing the directory: brokers open every rack's bucket).
//! - Missing directories above a key are created one by one, fsyncing each new entry's parent.
//! - A key cannot also be a "directory" of other keys (`a` next to `a/b`), which S3 allows; the
//!   WAL key layout ([`crate::keys`]) never produces such pairs. Such a put fails with `Other`.
//! - Directories emptied by `delete` are left in place (S3 has no directories; they cost nothing
//!   and removing them would race with puts creating them).
//!
//! All file-system work runs on tokio's blocking pool.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use async_trait::async_trait;
use bytes::Bytes;

use crate::keys::validate_key;
use crate::store::check_range;
use crate::{ObjStoreError, ObjectBody, ObjectMeta, ObjectStore, PutOutcome, Result};

/// Reserved top-level directory for in-flight writes.
pub const TMP_DIR: &str = ".ferry-tmp";

/// An [`ObjectStore`] on a local directory. Cloning shares the same root.
#[derive(Debug, Clone)]
pub struct LocalDirStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    root: PathBuf,
    name: String,
    next_tmp: AtomicU64,
}

impl LocalDirStore {
    /// Opens (creating if needed) a store rooted at `root` and clears leftover temp files.
    pub fn new(root: impl Into<PathBuf>) -> Result<Self> {
        let root = root.into();
        let op = "open";
        let tmp = root.join(TMP_DIR);
        fs::create_dir_all(&tmp)
            .map_err(|e| ObjStoreError::io(op, &root.display().to_string(), e))?;
        remove_orphans(&tmp);
        Ok(Self::at(root))
    }

    /// A store on another broker's directory that already exists, for reading: nothing is
    /// created, and its temp files (the owner's writes in flight) are left alone.
    pub fn existing(root: impl Into<PathBuf>) -> Result<Self> {
        let root = root.into();
        if !root.is_dir() {
            return Err(ObjStoreError::io(
                "open",
                &root.display().to_string(),
                std::io::Error::new(std::io::ErrorKind::NotFound, "not a directory"),
            ));
        }
        Ok(Self::at(root))
    }

    fn at(root: PathBuf) -> Self {
        let name = root.display().to_string();
        Self {
            inner: Arc::new(Inner {
                root,
                name,
                next_tmp: AtomicU64::new(0),
            }),
        }
    }

    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    fn path_of(&self, key: &str) -> Result<PathBuf> {
        validate_key(key)?;
        if key == TMP_DIR || key.starts_with(&format!("{TMP_DIR}/")) {
            return Err(ObjStoreError::InvalidKey {
                key: key.to_owned(),
                reason: "the '.ferry-tmp' prefix is reserved by the local-directory store",
            });
        }
        Ok(self.inner.root.join(key))
    }

    fn tmp_path(&self) -> PathBuf {
        let n = self.inner.next_tmp.fetch_add(1, Ordering::Relaxed);
        self.inner
            .root
            .join(TMP_DIR)
            .join(format!("{}-{n}.tmp", std::process::id()))
    }

    async fn blocking<T, F>(&self, op: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T> + Send + 'static,
    {
        tokio::task::spawn_blocking(f)
            .await
            .map_err(|e| ObjStoreError::other(op, format!("blocking task failed: {e}")))?
    }

    /// Create-if-absent of `parts` laid end to end: a temporary file, then a hard link that
    /// fails when the key exists.
    async fn put_parts_if_absent(&self, key: &str, parts: Vec<Bytes>) -> Result<PutOutcome> {
        let path = self.path_of(key)?;
        let tmp = self.tmp_path();
        let root = self.inner.root.clone();
        let key = key.to_owned();
        self.blocking("put_if_absent", move || {
            let result = (|| {
                if fs::symlink_metadata(&path).is_ok() {
                    return Ok(PutOutcome::AlreadyExists); // cheap early answer; link decides
                }
                let parent = ensure_parent(&root, &path)?;
                write_tmp_parts(&tmp, &parts)?;
                match fs::hard_link(&tmp, &path) {
                    Ok(()) => {
                        sync_dir(parent)?;
                        Ok(PutOutcome::Created)
                    }
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                        Ok(PutOutcome::AlreadyExists)
                    }
                    Err(e) => Err(e),
                }
            })();
            let _ = fs::remove_file(&tmp);
            result.map_err(|e| ObjStoreError::io("put_if_absent", &key, e))
        })
        .await
    }
}

/// Writes `data` to a new temp file at `tmp` and makes it durable.
/// A temporary file older than this when a store opens is an orphan of a put that crashed; a
/// younger one may be a put in flight of another process sharing the directory (brokers of
/// different racks open each other's bucket directories), which must be left alone.
const ORPHAN_AGE: std::time::Duration = std::time::Duration::from_secs(600);

/// Deletes the orphaned temporary files in `tmp`, as far as it can: a file it cannot look at
/// or delete is left for the next open.
fn remove_orphans(tmp: &Path) {
    let Ok(entries) = fs::read_dir(tmp) else {
        return;
    };
    // A file's modification time is wall time, so its age is measured against wall time.
    #[allow(clippy::disallowed_methods)]
    let now = std::time::SystemTime::now();
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age > ORPHAN_AGE));
        if old {
            if let Err(e) = fs::remove_file(entry.path()) {
                tracing::debug!(path = %entry.path().display(), error = %e,
                    "cannot delete an orphaned temporary file");
            }
        }
    }
}

fn write_tmp(tmp: &Path, data: &[u8]) -> io::Result<()> {
    write_tmp_parts(tmp, std::slice::from_ref(&data))
}

fn write_tmp_parts<P: AsRef<[u8]>>(tmp: &Path, parts: &[P]) -> io::Result<()> {
    let mut file = OpenOptions::new().write(true).create_new(true).open(tmp)?;
    for part in parts {
        file.write_all(part.as_ref())?;
    }
    file.sync_all()
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Creates the missing directories above `path` (below `root`), fsyncing the parent of each one
/// it creates so a durable object never hangs off a directory entry a crash could lose.
fn ensure_parent<'a>(root: &Path, path: &'a Path) -> io::Result<&'a Path> {
    let parent = path
        .parent()
        .ok_or_else(|| io::Error::other("object path has no parent"))?;
    if parent.is_dir() {
        return Ok(parent);
    }
    let rel = parent.strip_prefix(root).map_err(io::Error::other)?;
    let mut dir = root.to_path_buf();
    for component in rel.components() {
        let above = dir.clone();
        dir.push(component);
        match fs::create_dir(&dir) {
            Ok(()) => sync_dir(&above)?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(parent)
}

fn meta_of(key: String, md: &fs::Metadata) -> ObjectMeta {
    let last_modified_ms = md
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    ObjectMeta {
        key,
        size: md.len(),
        last_modified_ms,
    }
}

#[cfg(unix)]
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(not(unix))]
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = file;
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(buf)
}

/// Walks `dir` recursively, collecting objects whose key starts with `prefix`.
fn walk(root: &Path, dir: &Path, prefix: &str, out: &mut Vec<ObjectMeta>) -> io::Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let path = entry.path();
        let Ok(rel) = path.strip_prefix(root) else {
            continue;
        };
        let Some(rel) = rel.to_str() else {
            continue; // not valid UTF-8: cannot have been written through this store
        };
        let key = rel.replace(std::path::MAIN_SEPARATOR, "/");
        if key == TMP_DIR {
            continue;
        }
        let file_type = entry.file_type()?;
        if file_type.is_dir() {
            // Descend only where keys below could still match the prefix.
            let dir_key = format!("{key}/");
            if dir_key.starts_with(prefix) || prefix.starts_with(&dir_key) {
                walk(root, &path, prefix, out)?;
            }
        } else if file_type.is_file() && key.starts_with(prefix) {
            match entry.metadata() {
                Ok(md) => out.push(meta_of(key, &md)),
                // Deleted between read_dir and stat: no longer part of the listing.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

#[async_trait]
impl ObjectStore for LocalDirStore {
    async fn put(&self, key: &str, data: Bytes) -> Result<()> {
        let path = self.path_of(key)?;
        let tmp = self.tmp_path();
        let root = self.inner.root.clone();
        let key = key.to_owned();
        self.blocking("put", move || {
            let result = (|| {
                let parent = ensure_parent(&root, &path)?;
                write_tmp(&tmp, &data)?;
                fs::rename(&tmp, &path)?;
                sync_dir(parent)
            })();
            if result.is_err() {
                let _ = fs::remove_file(&tmp);
            }
            result.map_err(|e| ObjStoreError::io("put", &key, e))
        })
        .await
    }

    async fn put_if_absent(&self, key: &str, data: Bytes) -> Result<PutOutcome> {
        self.put_parts_if_absent(key, vec![data]).await
    }

    /// The file copied into the temporary file by the kernel (`std::fs::copy` is
    /// `copy_file_range` on Linux: no read into memory, no user-space copy), then as `put`.
    async fn put_file(&self, key: &str, source: &Path, len: u64) -> Result<()> {
        let path = self.path_of(key)?;
        let tmp = self.tmp_path();
        let root = self.inner.root.clone();
        let key = key.to_owned();
        let source = source.to_path_buf();
        self.blocking("put_file", move || {
            let result = (|| {
                let parent = ensure_parent(&root, &path)?;
                let copied = fs::copy(&source, &tmp)?;
                if copied != len {
                    return Err(io::Error::other(format!(
                        "{} held {copied} bytes, not {len}",
                        source.display()
                    )));
                }
                File::open(&tmp)?.sync_all()?;
                fs::rename(&tmp, &path)?;
                sync_dir(parent)
            })();
            if result.is_err() {
                let _ = fs::remove_file(&tmp);
            }
            result.map_err(|e| ObjStoreError::io("put_file", &key, e))
        })
        .await
    }

    async fn put_body_if_absent(&self, key: &str, body: ObjectBody) -> Result<PutOutcome> {
        self.put_parts_if_absent(key, body.into_parts()).await
    }

    async fn get(&self, key: &str) -> Result<Bytes> {
        let path = self.path_of(key)?;
        let key = key.to_owned();
        self.blocking("get", move || {
            fs::read(&path)
                .map(Bytes::from)
                .map_err(|e| ObjStoreError::io("get", &key, e))
        })
        .await
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        let path = self.path_of(key)?;
        let key = key.to_owned();
        self.blocking("get_range", move || {
            let io_err = |e| ObjStoreError::io("get_range", &key, e);
            let file = File::open(&path).map_err(io_err)?;
            let size = file.metadata().map_err(io_err)?.len();
            check_range(&key, &range, size)?;
            let mut buf = vec![0u8; (range.end - range.start) as usize];
            read_at(&file, &mut buf, range.start).map_err(io_err)?;
            Ok(Bytes::from(buf))
        })
        .await
    }

    async fn head(&self, key: &str) -> Result<Option<ObjectMeta>> {
        let path = self.path_of(key)?;
        let key = key.to_owned();
        self.blocking("head", move || match fs::metadata(&path) {
            Ok(md) if md.is_file() => Ok(Some(meta_of(key, &md))),
            Ok(_) => Ok(None), // a directory: a key prefix, not an object
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(ObjStoreError::io("head", &key, e)),
        })
        .await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        let prefix = prefix.to_owned();
        let root = self.inner.root.clone();
        self.blocking("list", move || {
            // Start at the deepest directory the prefix names; `walk` filters the rest.
            let start = match prefix.rfind('/') {
                Some(i) => root.join(&prefix[..i]),
                None => root.clone(),
            };
            let mut out = Vec::new();
            walk(&root, &start, &prefix, &mut out)
                .map_err(|e| ObjStoreError::io("list", &prefix, e))?;
            out.sort_by(|a, b| a.key.cmp(&b.key));
            Ok(out)
        })
        .await
    }

    async fn delete(&self, key: &str) -> Result<()> {
        let path = self.path_of(key)?;
        let key = key.to_owned();
        self.blocking("delete", move || match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(ObjStoreError::io("delete", &key, e)),
        })
        .await
    }

    fn bucket(&self) -> &str {
        &self.inner.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn local_dir_store_passes_conformance() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalDirStore::new(dir.path()).unwrap();
        crate::testing::conformance(&store).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_put_if_absent_has_exactly_one_winner() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalDirStore::new(dir.path()).unwrap();
        crate::testing::conformance_with_races(Arc::new(store), 16).await;
    }

    #[tokio::test]
    async fn keys_cannot_escape_the_root_or_touch_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalDirStore::new(dir.path().join("root")).unwrap();
        for key in [
            "../outside",
            "/etc/passwd",
            "a/../../x",
            ".ferry-tmp/x",
            ".ferry-tmp",
        ] {
            let err = store.put(key, Bytes::from_static(b"x")).await.unwrap_err();
            assert!(
                matches!(err, ObjStoreError::InvalidKey { .. }),
                "{key}: {err}"
            );
        }
        assert!(!dir.path().join("outside").exists());
    }

    #[tokio::test]
    async fn temp_files_are_never_listed_and_are_cleared_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalDirStore::new(dir.path()).unwrap();
        store.put("a", Bytes::from_static(b"1")).await.unwrap();
        // A crash mid-put leaves a temp file behind (an hour ago); another process sharing the
        // directory has a put in flight (now).
        let orphan = dir.path().join(TMP_DIR).join("orphan.tmp");
        #[allow(clippy::disallowed_methods)] // a file's modification time is wall time
        let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        fs::write(&orphan, b"partial").unwrap();
        fs::File::options()
            .write(true)
            .open(&orphan)
            .unwrap()
            .set_modified(an_hour_ago)
            .unwrap();
        let in_flight = dir.path().join(TMP_DIR).join("other-process.tmp");
        fs::write(&in_flight, b"being written").unwrap();
        let keys: Vec<String> = store
            .list("")
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.key)
            .collect();
        assert_eq!(keys, ["a"]);
        let reopened = LocalDirStore::new(dir.path()).unwrap();
        assert!(!orphan.exists(), "the orphan is gone");
        assert!(
            in_flight.exists(),
            "another process's put in flight is left alone"
        );
        assert_eq!(reopened.get("a").await.unwrap(), Bytes::from_static(b"1"));
    }

    #[tokio::test]
    async fn writes_leave_no_temp_files_behind() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalDirStore::new(dir.path()).unwrap();
        store.put("x/y", Bytes::from_static(b"1")).await.unwrap();
        store
            .put_if_absent("x/z", Bytes::from_static(b"2"))
            .await
            .unwrap();
        store
            .put_if_absent("x/z", Bytes::from_static(b"3"))
            .await
            .unwrap();
        assert_eq!(fs::read_dir(dir.path().join(TMP_DIR)).unwrap().count(), 0);
    }
}
