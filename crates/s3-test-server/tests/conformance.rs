//! The server against ferry's own S3 backend: the object-store conformance suite (put, ranged
//! get, conditional put, list, delete), concurrent conditional PUTs of one key, and wrong
//! credentials. Each test starts the server on 127.0.0.1 with an ephemeral port and stops it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use bytes::Bytes;
use ferry_objstore::{ObjectBody, ObjectStore, PutOutcome, S3Config, S3Store};

const ACCESS_KEY: &str = "ak-test";
const SECRET_KEY: &str = "sk-test-secret";
const BUCKET: &str = "wal-az1";

struct Server {
    child: Child,
    endpoint: String,
    _root: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start() -> Server {
    let root = tempfile::tempdir().expect("temp root");
    std::fs::create_dir(root.path().join(BUCKET)).expect("bucket directory");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferry-s3-test-server"))
        .arg(root.path())
        .args([
            "--port",
            "0",
            "--access-key",
            ACCESS_KEY,
            "--secret-key",
            SECRET_KEY,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start ferry-s3-test-server");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("the server's first line");
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    Server {
        child,
        endpoint: format!("http://{addr}"),
        _root: root,
    }
}

async fn store(server: &Server, secret: &str) -> S3Store {
    S3Store::connect(&S3Config {
        bucket: BUCKET.into(),
        region: "us-east-1".into(),
        endpoint: Some(server.endpoint.clone()),
        force_path_style: true,
        access_key: Some(ACCESS_KEY.into()),
        secret_key: Some(secret.into()),
        express_one_zone: false,
    })
    .await
    .expect("S3 client")
}

#[tokio::test]
async fn ferrys_s3_backend_passes_conformance() {
    let server = start();
    let s = store(&server, SECRET_KEY).await;
    ferry_objstore::testing::conformance(&s).await;
    ferry_objstore::testing::conformance_with_races(Arc::new(s), 4).await;
}

/// The CRC-32C a body in parts carries (combined by the WAL's object builder, not read from
/// the bytes) is what the server checks the bytes against: a wrong one stores nothing.
#[tokio::test]
async fn a_body_whose_crc_does_not_match_its_parts_is_refused() {
    let server = start();
    let s = store(&server, SECRET_KEY).await;
    let key = "wal/1/0000000000001-0000000002.wal";
    let parts = vec![Bytes::from_static(b"FWAL"), Bytes::from_static(b"slices")];
    let wrong = crc32c::crc32c(b"FWALslicez");
    let refused = s
        .put_body_if_absent(key, ObjectBody::from_parts(parts.clone(), wrong))
        .await;
    assert!(refused.is_err(), "stored despite a wrong CRC: {refused:?}");
    assert!(s.head(key).await.expect("head").is_none());
    let right = crc32c::crc32c(b"FWALslices");
    let stored = s
        .put_body_if_absent(key, ObjectBody::from_parts(parts, right))
        .await
        .expect("put with the right CRC");
    assert_eq!(stored, PutOutcome::Created);
    assert_eq!(&s.get(key).await.expect("get")[..], b"FWALslices");
}

#[tokio::test]
async fn a_conditional_put_of_an_existing_key_changes_nothing() {
    let server = start();
    let s = store(&server, SECRET_KEY).await;
    let key = "wal/1/0000000000001-0000000001.wal";
    let first = s
        .put_if_absent(key, bytes::Bytes::from_static(b"first"))
        .await;
    assert_eq!(first.expect("first put"), PutOutcome::Created);
    let second = s
        .put_if_absent(key, bytes::Bytes::from_static(b"other"))
        .await;
    assert_eq!(second.expect("second put"), PutOutcome::AlreadyExists);
    assert_eq!(
        s.get(key).await.expect("get"),
        bytes::Bytes::from_static(b"first")
    );
}

#[tokio::test]
async fn a_wrong_secret_is_refused() {
    let server = start();
    let s = store(&server, "not-the-secret").await;
    let put = s.put("k", bytes::Bytes::from_static(b"x")).await;
    assert!(put.is_err(), "{put:?}");
    assert!(!put.unwrap_err().is_retriable());
}
