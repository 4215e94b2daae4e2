//! [`Stores::open`] against two real S3 API servers on loopback, one per rack, as
//! `remote.wal.s3.endpoints` sets them up: what one rack's uploader PUTs, any broker reads back
//! through the resolver by the bucket name that metadata carries.
//!
//! Each server is an `s3s-fs` (scripts/install-s3s-fs.sh) on 127.0.0.1 with an ephemeral port
//! and a temp root. A missing binary FAILS the test with the install hint, unless
//! `FERRY_SKIP_S3_TESTS=1`; `FERRY_S3S_FS` overrides where the binary is looked up.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use ferry_objstore::ObjStoreMetrics;

use super::Stores;
use crate::config::BrokerConfig;
use crate::remote_wal::config::RemoteWalConfig;

const ACCESS_KEY: &str = "ferry-test-access";
const SECRET_KEY: &str = "ferry-test-secret-key";

/// A running `s3s-fs`; killed on drop (also when the test panics).
struct S3sFs {
    child: Child,
    endpoint: String,
    root: tempfile::TempDir,
}

impl Drop for S3sFs {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("FERRY_S3S_FS") {
        return Some(PathBuf::from(path));
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("s3s-fs"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let home = std::env::var_os("CARGO_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
        Some(home.join("bin").join("s3s-fs")).filter(|p| p.is_file())
    })
}

/// Starts an `s3s-fs` holding `bucket` (a directory of its root is a bucket to s3s-fs).
fn start(bucket: &str) -> S3sFs {
    let Some(binary) = binary() else {
        panic!(
            "the `s3s-fs` binary is not installed; run scripts/install-s3s-fs.sh \
             (or set FERRY_SKIP_S3_TESTS=1 to skip the S3 tests)"
        );
    };
    let root = tempfile::tempdir().expect("temp root for s3s-fs");
    std::fs::create_dir(root.path().join(bucket)).expect("bucket directory");
    // s3s-fs has no "port 0": reserve a free port and hand it over; a race with another
    // process fails the readiness check below loudly.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("reserve a loopback port")
        .port();
    let mut child = Command::new(&binary)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
        .arg(root.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut ready = false;
    for _ in 0..500 {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("s3s-fs exited during start-up: {status}");
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
            ready = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let server = S3sFs {
        child,
        endpoint: format!("http://{addr}"),
        root,
    };
    assert!(ready, "s3s-fs did not start listening on {addr}");
    server
}

fn broker_config(rack: &str, az1: &S3sFs, az2: &S3sFs) -> RemoteWalConfig {
    let mut c = BrokerConfig::default();
    c.set("broker.rack", rack).unwrap();
    c.set("remote.wal.store", "s3").unwrap();
    c.set("remote.wal.buckets", "az1=wal-az1,az2=wal-az2")
        .unwrap();
    c.set(
        "remote.wal.s3.endpoints",
        &format!("az1={},az2={}", az1.endpoint, az2.endpoint),
    )
    .unwrap();
    c.set("remote.wal.s3.path.style", "true").unwrap();
    c.set("remote.wal.s3.access.key.id", ACCESS_KEY).unwrap();
    c.set("remote.wal.s3.secret.access.key", SECRET_KEY)
        .unwrap();
    RemoteWalConfig::from_broker(&c).unwrap()
}

#[tokio::test]
async fn each_racks_bucket_lives_on_its_own_server_and_resolves_by_name() {
    if std::env::var("FERRY_SKIP_S3_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("skipped (FERRY_SKIP_S3_TESTS=1)");
        return;
    }
    let (az1, az2) = (start("wal-az1"), start("wal-az2"));
    let metrics = ObjStoreMetrics::new();
    let in_az1 = Stores::open(&broker_config("az1", &az1, &az2), &metrics)
        .await
        .unwrap();
    let in_az2 = Stores::open(&broker_config("az2", &az1, &az2), &metrics)
        .await
        .unwrap();

    let key = "wal/1/0000000000001-0000000001.wal";
    let own = in_az1.own().expect("az1 has a bucket");
    assert_eq!(own.bucket(), "wal-az1");
    own.put(key, Bytes::from_static(b"from az1")).await.unwrap();
    let other = in_az2.own().expect("az2 has a bucket");
    other
        .put(key, Bytes::from_static(b"from az2"))
        .await
        .unwrap();

    // Each PUT reached its own rack's server, and only that one.
    assert!(az1.root.path().join("wal-az1").join(key).is_file());
    assert!(az2.root.path().join("wal-az2").join(key).is_file());
    assert!(!az1.root.path().join("wal-az2").exists());
    assert!(!az2.root.path().join("wal-az1").exists());

    // Any broker reads either bucket by the name metadata carries.
    for stores in [&in_az1, &in_az2] {
        let resolve = stores.resolver();
        let a = resolve("wal-az1").expect("bucket of az1");
        assert_eq!(a.get(key).await.unwrap().as_ref(), b"from az1");
        assert_eq!(a.get_range(key, 5..8).await.unwrap().as_ref(), b"az1");
        let b = resolve("wal-az2").expect("bucket of az2");
        assert_eq!(b.get(key).await.unwrap().as_ref(), b"from az2");
        assert!(resolve("wal-az3").is_none());
    }
}
