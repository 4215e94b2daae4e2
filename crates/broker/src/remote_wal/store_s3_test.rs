//! [`Stores::open`] against two real S3 API servers on loopback, one per rack, as
//! `remote.wal.s3.endpoints` sets them up: what one rack's uploader PUTs, any broker reads back
//! through the resolver by the bucket name that metadata carries.
//!
//! Each server is an `s3s-fs` (`ferry_objstore::testing::S3sFs`) on 127.0.0.1 with an ephemeral port
//! and a temp root. A missing binary FAILS the test with the install hint, unless
//! `FERRY_SKIP_S3_TESTS=1`; `FERRY_S3S_FS` overrides where the binary is looked up.

use bytes::Bytes;
use ferry_objstore::testing::S3sFs;
use ferry_objstore::ObjStoreMetrics;

use super::Stores;
use ferry_config::broker_config::BrokerConfig;
use ferry_config::remote_wal_config::RemoteWalConfig;

const ACCESS_KEY: &str = "ferry-test-access";
const SECRET_KEY: &str = "ferry-test-secret-key";

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
    let test = "each_racks_bucket_lives_on_its_own_server_and_resolves_by_name";
    let Some(az1) = S3sFs::start(test, &["wal-az1"], ACCESS_KEY, SECRET_KEY) else {
        return;
    };
    let Some(az2) = S3sFs::start(test, &["wal-az2"], ACCESS_KEY, SECRET_KEY) else {
        return;
    };
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
