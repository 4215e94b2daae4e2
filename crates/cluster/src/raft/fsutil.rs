//! Small durable-file helpers shared by the log and snapshot stores.

use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `path` atomically: a temporary file is written and fsynced, renamed over
/// `path`, and the directory fsynced, so after a crash `path` holds either the old or the new
/// contents, never a mix.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    })();
    if let Err(e) = written {
        // A half-written temporary file would hold space a full disk needs back.
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, path)?;
    sync_dir(path)
}

/// Fsyncs the directory holding `path`, so a create or rename in it is durable.
pub(crate) fn sync_dir(path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Reads `path`, or `None` if it does not exist.
pub(crate) fn read_optional(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}
