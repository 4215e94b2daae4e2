//! The backend conformance suite (feature `test-util`): one set of checks that every
//! [`ObjectStore`] must pass, so the local directory, memory and S3 backends (and any wrapper
//! that claims to be transparent) agree on semantics.
//!
//! ```no_run
//! # async fn demo() {
//! let store = ferry_objstore::MemoryStore::new();
//! ferry_objstore::testing::conformance(&store).await;
//! # }
//! ```
//!
//! The suite only touches keys under [`CONFORMANCE_PREFIX`], deletes leftovers from an earlier
//! run first and cleans up after itself, so it can share a bucket with other data. It panics
//! (with the failing property in the message) on the first violation.

use std::sync::Arc;

use bytes::Bytes;

use crate::{ObjStoreError, ObjectBody, ObjectStore, PutOutcome};

/// All keys the suite writes start with this.
pub const CONFORMANCE_PREFIX: &str = "conformance/";

fn k(rest: &str) -> String {
    format!("{CONFORMANCE_PREFIX}{rest}")
}

/// Deterministic, non-repeating-looking test bytes (every byte value occurs).
pub fn pattern(len: usize, salt: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt) ^ ((i >> 8) as u8))
        .collect::<Vec<u8>>()
        .into()
}

/// Runs every check against `store`. Panics on the first violation.
pub async fn conformance(store: &dyn ObjectStore) {
    clean(store).await;
    missing_objects(store).await;
    put_get_head(store).await;
    overwrite(store).await;
    empty_object(store).await;
    ranges(store).await;
    put_if_absent(store).await;
    body_in_parts(store).await;
    put_file(store).await;
    list_is_a_sorted_string_prefix_match(store).await;
    delete_is_idempotent(store).await;
    delete_many_removes_present_and_absent_keys(store).await;
    invalid_keys_are_rejected(store).await;
    unusual_but_valid_keys(store).await;
    clean(store).await;
    let left = store.list(CONFORMANCE_PREFIX).await.expect("final list");
    assert!(left.is_empty(), "cleanup left objects behind: {left:?}");
}

/// Like [`conformance`], plus a race: `racers` tasks `put_if_absent` the same key at once and
/// exactly one must win. Needs an `Arc` because the racers run as tasks.
pub async fn conformance_with_races(store: Arc<dyn ObjectStore>, racers: usize) {
    conformance(store.as_ref()).await;
    concurrent_put_if_absent_has_one_winner(store.clone(), racers).await;
    clean(store.as_ref()).await;
}

async fn clean(store: &dyn ObjectStore) {
    for meta in store
        .list(CONFORMANCE_PREFIX)
        .await
        .expect("list for cleanup")
    {
        store.delete(&meta.key).await.expect("delete for cleanup");
    }
}

async fn missing_objects(store: &dyn ObjectStore) {
    let key = k("missing/object");
    let err = store
        .get(&key)
        .await
        .expect_err("get of a missing key must fail");
    assert!(
        matches!(err, ObjStoreError::NotFound { .. }),
        "get missing: {err:?}"
    );
    let err = store
        .get_range(&key, 0..1)
        .await
        .expect_err("get_range of a missing key");
    assert!(
        matches!(err, ObjStoreError::NotFound { .. }),
        "get_range missing: {err:?}"
    );
    assert_eq!(store.head(&key).await.expect("head missing"), None);
    store
        .delete(&key)
        .await
        .expect("delete of a missing key succeeds");
    assert!(store.list(&k("missing/")).await.expect("list").is_empty());
}

async fn put_get_head(store: &dyn ObjectStore) {
    let key = k("basic/object.bin");
    let data = pattern(70_001, 7);
    store.put(&key, data.clone()).await.expect("put");
    assert_eq!(
        store.get(&key).await.expect("get"),
        data,
        "get returns what put stored"
    );
    let meta = store
        .head(&key)
        .await
        .expect("head")
        .expect("head finds the object");
    assert_eq!(meta.key, key);
    assert_eq!(meta.size, data.len() as u64);
    assert!(
        meta.last_modified_ms > 0,
        "last_modified_ms is set: {meta:?}"
    );
}

/// `put_file` stores the file's bytes; a file that does not hold the length given stores
/// nothing.
async fn put_file(store: &dyn ObjectStore) {
    let path = std::env::temp_dir().join(format!(
        "ferry-objstore-put-file-{}-{}",
        std::process::id(),
        store.bucket().replace('/', "_")
    ));
    let data = pattern(300_017, 5);
    std::fs::write(&path, &data).expect("write the source file");
    let key = k("file/segment.log");
    store
        .put_file(&key, &path, data.len() as u64)
        .await
        .expect("put_file");
    assert_eq!(store.get(&key).await.expect("get"), data);
    let other = k("file/short.log");
    assert!(store
        .put_file(&other, &path, data.len() as u64 + 1)
        .await
        .is_err());
    assert!(
        store.head(&other).await.expect("head").is_none(),
        "a failed put_file stores nothing"
    );
    let _ = std::fs::remove_file(&path);
}

async fn overwrite(store: &dyn ObjectStore) {
    let key = k("overwrite");
    store.put(&key, pattern(100, 1)).await.expect("put 1");
    store
        .put(&key, pattern(10, 2))
        .await
        .expect("put 2 (overwrite)");
    assert_eq!(
        store.get(&key).await.expect("get"),
        pattern(10, 2),
        "put overwrites"
    );
    assert_eq!(
        store.head(&key).await.expect("head").map(|m| m.size),
        Some(10)
    );
}

async fn empty_object(store: &dyn ObjectStore) {
    let key = k("empty");
    store.put(&key, Bytes::new()).await.expect("put empty");
    assert_eq!(store.get(&key).await.expect("get empty"), Bytes::new());
    assert_eq!(
        store.head(&key).await.expect("head").map(|m| m.size),
        Some(0)
    );
    let got = store
        .get_range(&key, 0..0)
        .await
        .expect("empty range of empty object");
    assert!(got.is_empty());
}

async fn ranges(store: &dyn ObjectStore) {
    let key = k("ranges/object");
    let len = (1 << 20) + 7;
    let data = pattern(len, 3);
    store.put(&key, data.clone()).await.expect("put");
    let len = len as u64;
    for range in [
        0..1,
        0..len,
        1..len,
        len - 1..len,
        4095..4097,
        65_536..(1 << 20) + 3,
        12_345..12_346,
    ] {
        let got = store
            .get_range(&key, range.clone())
            .await
            .expect("get_range");
        assert_eq!(
            got.len() as u64,
            range.end - range.start,
            "length of {range:?}"
        );
        assert_eq!(
            got,
            data.slice(range.start as usize..range.end as usize),
            "{range:?}"
        );
        // The same bytes in the pieces the transport delivered, in order.
        let pieces = store
            .get_range_pieces(&key, range.clone())
            .await
            .expect("get_range_pieces");
        assert_eq!(pieces.concat(), got, "pieces of {range:?}");
    }
    for empty in [0..0, 17..17, len..len] {
        let got = store
            .get_range(&key, empty.clone())
            .await
            .expect("empty range");
        assert!(got.is_empty(), "{empty:?} is empty");
    }
    #[allow(clippy::reversed_empty_ranges)]
    for bad in [len - 1..len + 1, len..len + 1, len + 10..len + 20, 10..5] {
        let err = store
            .get_range(&key, bad.clone())
            .await
            .expect_err("range outside the object must fail");
        assert!(
            matches!(err, ObjStoreError::InvalidRange { .. }),
            "{bad:?} gave {err:?}"
        );
        let err = store
            .get_range_pieces(&key, bad.clone())
            .await
            .expect_err("pieces of a range outside the object must fail");
        assert!(
            matches!(err, ObjStoreError::InvalidRange { .. }),
            "pieces of {bad:?} gave {err:?}"
        );
    }
}

async fn put_if_absent(store: &dyn ObjectStore) {
    let key = k("conditional/object");
    let first = store
        .put_if_absent(&key, pattern(33, 1))
        .await
        .expect("first create");
    assert_eq!(first, PutOutcome::Created);
    let second = store
        .put_if_absent(&key, pattern(44, 2))
        .await
        .expect("second create");
    assert_eq!(second, PutOutcome::AlreadyExists);
    assert_eq!(
        store.get(&key).await.expect("get"),
        pattern(33, 1),
        "loser changed nothing"
    );
    store.delete(&key).await.expect("delete");
    let again = store
        .put_if_absent(&key, pattern(5, 3))
        .await
        .expect("create after delete");
    assert_eq!(
        again,
        PutOutcome::Created,
        "a deleted key can be created again"
    );
    assert_eq!(store.get(&key).await.expect("get"), pattern(5, 3));
}

/// `put_body_if_absent` stores the parts laid end to end, with create-if-absent's rules.
async fn body_in_parts(store: &dyn ObjectStore) {
    let key = k("parts/object");
    let parts = vec![
        pattern(10, 1),
        pattern(70_000, 2),
        Bytes::new(),
        pattern(3, 3),
    ];
    let crc = parts.iter().fold(0, |crc, p| crc32c::crc32c_append(crc, p));
    let body = ObjectBody::from_parts(parts.clone(), crc);
    let whole = body.to_bytes();
    assert_eq!(whole.len(), 70_013);
    let first = store
        .put_body_if_absent(&key, body.clone())
        .await
        .expect("create from parts");
    assert_eq!(first, PutOutcome::Created);
    assert_eq!(store.get(&key).await.expect("get"), whole);
    assert_eq!(
        store.get_range(&key, 5..70_012).await.expect("range"),
        whole.slice(5..70_012)
    );
    let second = store
        .put_body_if_absent(&key, ObjectBody::from_bytes(pattern(4, 4)))
        .await
        .expect("second create");
    assert_eq!(second, PutOutcome::AlreadyExists);
    assert_eq!(
        store.get(&key).await.expect("get"),
        whole,
        "loser changed nothing"
    );
    store.delete(&key).await.expect("delete");
}

async fn list_is_a_sorted_string_prefix_match(store: &dyn ObjectStore) {
    let keys = [
        "list/b/c",
        "list/a",
        "list/bb",
        "list/b/d/e",
        "list/ba",
        "lis",
        "listing",
    ];
    for (i, key) in keys.iter().enumerate() {
        store
            .put(&k(key), pattern(i + 1, i as u8))
            .await
            .expect("put");
    }
    let names = |metas: Vec<crate::ObjectMeta>| -> Vec<String> {
        metas
            .into_iter()
            .map(|m| {
                let size = m.size;
                let rel = m
                    .key
                    .strip_prefix(CONFORMANCE_PREFIX)
                    .unwrap_or(&m.key)
                    .to_owned();
                let want = keys.iter().position(|x| *x == rel).map(|i| i as u64 + 1);
                assert_eq!(Some(size), want, "size of {rel} in listing");
                rel
            })
            .collect()
    };
    let all = names(store.list(&k("list/")).await.expect("list dir"));
    assert_eq!(
        all,
        ["list/a", "list/b/c", "list/b/d/e", "list/ba", "list/bb"]
    );
    let b = names(
        store
            .list(&k("list/b"))
            .await
            .expect("list partial segment"),
    );
    assert_eq!(
        b,
        ["list/b/c", "list/b/d/e", "list/ba", "list/bb"],
        "string prefix"
    );
    let bd = names(store.list(&k("list/b/")).await.expect("list subdir"));
    assert_eq!(bd, ["list/b/c", "list/b/d/e"]);
    let lis = names(store.list(&k("lis")).await.expect("list short prefix"));
    assert_eq!(lis.len(), 7, "'lis' matches every key: {lis:?}");
    let exact = names(store.list(&k("list/a")).await.expect("list exact key"));
    assert_eq!(exact, ["list/a"]);
    assert!(store
        .list(&k("nothing-here/"))
        .await
        .expect("list empty")
        .is_empty());
    for key in keys {
        store.delete(&k(key)).await.expect("delete");
    }
}

async fn delete_is_idempotent(store: &dyn ObjectStore) {
    let key = k("delete/me");
    store.put(&key, pattern(9, 9)).await.expect("put");
    store.delete(&key).await.expect("delete");
    let err = store.get(&key).await.expect_err("deleted object is gone");
    assert!(matches!(err, ObjStoreError::NotFound { .. }), "{err:?}");
    assert_eq!(store.head(&key).await.expect("head"), None);
    assert!(store.list(&k("delete/")).await.expect("list").is_empty());
    store.delete(&key).await.expect("second delete succeeds");
}

async fn delete_many_removes_present_and_absent_keys(store: &dyn ObjectStore) {
    let present: Vec<String> = (0..5).map(|i| k(&format!("many/{i}"))).collect();
    for key in &present {
        store.put(key, pattern(7, 3)).await.expect("put");
    }
    let keep = k("many/keep");
    store.put(&keep, pattern(7, 4)).await.expect("put");
    let mut keys = present.clone();
    keys.push(k("many/never-written"));
    let failed = store.delete_many(&keys).await.expect("delete_many");
    assert!(failed.is_empty(), "refused: {failed:?}");
    let left: Vec<String> = store
        .list(&k("many/"))
        .await
        .expect("list")
        .into_iter()
        .map(|m| m.key)
        .collect();
    assert_eq!(
        left,
        vec![keep.clone()],
        "only the key not asked for is left"
    );
    assert!(store.delete_many(&[]).await.expect("nothing").is_empty());
    let failed = store
        .delete_many(std::slice::from_ref(&keep))
        .await
        .expect("delete_many again");
    assert!(failed.is_empty());
    assert_eq!(store.head(&keep).await.expect("head"), None);
}

async fn invalid_keys_are_rejected(store: &dyn ObjectStore) {
    for key in [
        "",
        "/conformance/abs",
        "conformance/../x",
        "conformance//x",
        "conformance/x/",
    ] {
        let err = store
            .put(key, Bytes::from_static(b"x"))
            .await
            .expect_err("invalid key must be rejected");
        assert!(
            matches!(err, ObjStoreError::InvalidKey { .. }),
            "{key:?}: {err:?}"
        );
        let err = store.get(key).await.expect_err("invalid key get");
        assert!(
            matches!(err, ObjStoreError::InvalidKey { .. }),
            "{key:?}: {err:?}"
        );
    }
}

async fn unusual_but_valid_keys(store: &dyn ObjectStore) {
    for (i, rest) in [
        "odd/a b+c=d%e&f",
        "odd/ünïcødé",
        "odd/x.y~z_(1)",
        "odd/.dot",
    ]
    .iter()
    .enumerate()
    {
        let key = k(rest);
        store
            .put(&key, pattern(i + 3, 5))
            .await
            .expect("put odd key");
        assert_eq!(
            store.get(&key).await.expect("get odd key"),
            pattern(i + 3, 5),
            "{key}"
        );
        let listed = store.list(&key).await.expect("list odd key");
        assert_eq!(listed.len(), 1, "{key}: {listed:?}");
        assert_eq!(listed[0].key, key);
        store.delete(&key).await.expect("delete odd key");
    }
}

async fn concurrent_put_if_absent_has_one_winner(store: Arc<dyn ObjectStore>, racers: usize) {
    let key = k("race/object");
    let mut tasks = Vec::new();
    for i in 0..racers {
        let store = store.clone();
        let key = key.clone();
        tasks.push(tokio::spawn(async move {
            let data = pattern(1000 + i, i as u8);
            (i, store.put_if_absent(&key, data).await)
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        let (i, outcome) = task.await.expect("racer task");
        if outcome.expect("racing put_if_absent") == PutOutcome::Created {
            winners.push(i);
        }
    }
    assert_eq!(
        winners.len(),
        1,
        "exactly one racer creates the object: {winners:?}"
    );
    let winner = winners[0];
    let got = store.get(&key).await.expect("get race winner");
    assert_eq!(
        got,
        pattern(1000 + winner, winner as u8),
        "object holds the winner's bytes"
    );
}

/// A running `s3s-fs` (the S3 API server of scripts/install-s3s-fs.sh) on 127.0.0.1 with an
/// ephemeral port and a temp root; killed on drop (also when a test panics). `FERRY_S3S_FS`
/// overrides where the binary is looked up.
pub struct S3sFs {
    pub child: std::process::Child,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    pub root: tempfile::TempDir,
}

impl Drop for S3sFs {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl S3sFs {
    /// Starts one with `buckets` (a directory of its root is a bucket to s3s-fs) and the given
    /// static credentials, or returns `None` when `FERRY_SKIP_S3_TESTS=1` (logged under
    /// `test`). Panics, with the install hint, when the binary is missing.
    pub fn start(test: &str, buckets: &[&str], access_key: &str, secret_key: &str) -> Option<Self> {
        use std::net::{SocketAddr, TcpListener, TcpStream};
        use std::process::{Command, Stdio};
        use std::time::Duration;

        if std::env::var("FERRY_SKIP_S3_TESTS").is_ok_and(|v| v == "1") {
            eprintln!("{test}: skipped (FERRY_SKIP_S3_TESTS=1)");
            return None;
        }
        let Some(binary) = s3s_fs_binary() else {
            panic!(
                "{test}: the `s3s-fs` binary is not installed; run scripts/install-s3s-fs.sh \
                 (or set FERRY_SKIP_S3_TESTS=1 to skip the S3 tests)"
            );
        };
        let root = tempfile::tempdir().expect("temp root for s3s-fs");
        for b in buckets {
            std::fs::create_dir(root.path().join(b)).expect("bucket directory");
        }
        // s3s-fs has no "port 0": reserve a free ephemeral port, release it, hand it over.
        // Another process could grab it in between; then the readiness check fails loudly.
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("reserve a loopback port")
            .port();
        let mut child = Command::new(&binary)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", access_key, "--secret-key", secret_key])
            .arg(root.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("{test}: cannot start {}: {e}", binary.display()));
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        // Wait until it accepts connections (bounded by attempts, not a wall-clock assertion).
        let mut ready = false;
        for _ in 0..500 {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("{test}: s3s-fs exited during start-up: {status}");
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
                ready = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let server = Self {
            child,
            endpoint: format!("http://{addr}"),
            root,
        };
        assert!(ready, "{test}: s3s-fs did not start listening on {addr}");
        Some(server)
    }
}

fn s3s_fs_binary() -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    if let Some(path) = std::env::var_os("FERRY_S3S_FS") {
        return Some(PathBuf::from(path));
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("s3s-fs"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let cargo_home = std::env::var_os("CARGO_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
        Some(cargo_home.join("bin").join("s3s-fs")).filter(|p| p.is_file())
    })
}
