use std::path::Path;

use super::*;

fn options(dir: &Path, node_id: i32) -> MetadataOptions {
    MetadataOptions {
        traffic: None,
        quorum_tls: None,
        node_id,
        dir: dir.join("__cluster_metadata"),
        legacy_dir: dir.to_path_buf(),
        voters: BTreeMap::new(),
        rack: Some("az1".into()),
        host: "127.0.0.1".into(),
        port: 9092,
        endpoints: Vec::new(),
        unclean_leader_election: false,
        space_reserve: std::sync::Arc::new(ferry_common::SpaceReserve::none()),
    }
}

#[test]
fn topics_and_producer_ids_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let store = MetadataStore::open(options(dir.path(), 1)).unwrap();
    let cluster = store.cluster_id();
    assert_eq!(cluster.len(), 22);
    let mut cfg = BTreeMap::new();
    cfg.insert("retention.ms".to_string(), "1000".to_string());
    let t = store.create_topic("orders", 3, 1, cfg.clone()).unwrap();
    assert_eq!(t.partitions, 3);
    assert_eq!(t.replication_factor, 1);
    assert!(matches!(
        store.create_topic("orders", 1, 1, BTreeMap::new()),
        Err(MetadataError::TopicExists(_))
    ));
    let p1 = store.allocate_producer_id().unwrap();
    let p2 = store.allocate_producer_id().unwrap();
    assert_ne!(p1, p2);
    store.set_partition_count("orders", 5, None).unwrap();
    assert!(matches!(
        store.set_partition_count("orders", 2, None),
        Err(MetadataError::InvalidPartitions(_))
    ));
    drop(store);

    let store = MetadataStore::open(options(dir.path(), 1)).unwrap();
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
    assert!(matches!(
        store.delete_topic("orders"),
        Err(MetadataError::UnknownTopic(_))
    ));
}

#[test]
fn this_broker_is_registered_live_with_its_rack_and_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let store = MetadataStore::open(options(dir.path(), 7)).unwrap();
    let image = store.image();
    let me = &image.brokers[&7];
    assert_eq!(me.rack.as_deref(), Some("az1"));
    assert_eq!((me.host.as_str(), me.port), ("127.0.0.1", 9092));
    assert!(!me.fenced);
    assert_eq!(store.live_broker_count(), 1);
    let t = store.create_topic("t", 2, 1, BTreeMap::new()).unwrap();
    let image = store.image();
    let placed = &image.topic_by_id(t.id).unwrap().partitions;
    assert!(placed.iter().all(|p| p.replicas == [7] && p.leader == 7));
    assert!(matches!(
        store.create_topic("t3", 1, 3, BTreeMap::new()),
        Err(MetadataError::Placement(_))
    ));
}

#[tokio::test]
async fn works_from_a_current_thread_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let store = MetadataStore::open(options(dir.path(), 1)).unwrap();
    store.create_topic("x", 1, 1, BTreeMap::new()).unwrap();
    assert!(store.topic("x").is_some());
    drop(store);
    let store = MetadataStore::open(options(dir.path(), 1)).unwrap();
    assert!(store.topic("x").is_some());
}

const OLD_JSON: &str = r#"{
  "cluster_id": "AAAAAAAAAAAAAAAAAAAAAA",
  "node_id": 1,
  "topics": {
    "orders": {
      "name": "orders",
      "id": "5f0c7a3e-2f43-4d0a-9d1e-3c2a1b0f9e8d",
      "partitions": 3,
      "replication_factor": 1,
      "configs": { "retention.ms": "123456" }
    },
    "__consumer_offsets": {
      "name": "__consumer_offsets",
      "id": "0b9a8c7d-6e5f-4a3b-8c1d-0e9f8a7b6c5d",
      "partitions": 2,
      "replication_factor": 1,
      "configs": { "cleanup.policy": "compact" }
    }
  },
  "producer_id_block_end": 2000
}"#;

#[test]
fn an_old_json_metadata_file_is_imported_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(LEGACY_FILE_NAME), OLD_JSON).unwrap();
    let store = MetadataStore::open(options(dir.path(), 1)).unwrap();
    assert_eq!(store.cluster_id(), "AAAAAAAAAAAAAAAAAAAAAA");
    let orders = store.topic("orders").unwrap();
    assert_eq!(
        orders.id,
        "5f0c7a3e-2f43-4d0a-9d1e-3c2a1b0f9e8d"
            .parse::<Uuid>()
            .unwrap()
    );
    assert_eq!(orders.partitions, 3);
    assert_eq!(
        orders.configs.get("retention.ms").map(String::as_str),
        Some("123456")
    );
    let offsets = store.topic("__consumer_offsets").unwrap();
    assert_eq!(offsets.partitions, 2);
    assert_eq!(
        offsets.configs.get("cleanup.policy").map(String::as_str),
        Some("compact")
    );
    let pid = store.allocate_producer_id().unwrap();
    assert!(
        pid >= 2000,
        "producer ids of the old file are not reused: {pid}"
    );
    assert!(!dir.path().join(LEGACY_FILE_NAME).exists());
    assert!(dir.path().join(LEGACY_IMPORTED_NAME).exists());

    // Deleting an imported topic sticks: the renamed file is not imported again.
    store.delete_topic("orders").unwrap();
    drop(store);
    let store = MetadataStore::open(options(dir.path(), 1)).unwrap();
    assert!(store.topic("orders").is_none());
    assert!(store.topic("__consumer_offsets").is_some());
    assert_eq!(store.cluster_id(), "AAAAAAAAAAAAAAAAAAAAAA");
}

#[test]
fn an_old_file_of_another_node_id_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(LEGACY_FILE_NAME), OLD_JSON).unwrap();
    assert!(matches!(
        MetadataStore::open(options(dir.path(), 2)),
        Err(MetadataError::NodeIdMismatch {
            found: 1,
            configured: 2
        })
    ));
}

#[test]
fn corrupt_file_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(LEGACY_FILE_NAME), b"{not json").unwrap();
    assert!(matches!(
        MetadataStore::open(options(dir.path(), 1)),
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

/// The local quorum runs the same start-up and the same checks as the controller, without Raft
/// and without writing anything (what handler tests build a broker on).
#[test]
fn a_local_quorum_applies_records_at_once_and_refuses_what_the_image_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let store = MetadataStore::local(&options(dir.path(), 1)).unwrap();
    assert_eq!(store.cluster_id().len(), 22);
    assert!(store.image().is_live(1), "registered and unfenced at start");
    assert!(store.is_active_controller());
    let t = store.create_topic("orders", 3, 1, BTreeMap::new()).unwrap();
    assert_eq!(store.topic("orders").unwrap().id, t.id);
    let index = store.image().applied_index;
    assert!(matches!(
        store.create_topic("orders", 1, 1, BTreeMap::new()),
        Err(MetadataError::TopicExists(_))
    ));
    // Refused by the image itself (no such topic): an error, and no new image.
    assert!(matches!(
        store.propose(MetadataRecord::DeleteTopic {
            name: "missing".into()
        }),
        Err(MetadataError::Controller(ClusterError::Rejected(
            ImageError::UnknownTopic(_)
        )))
    ));
    assert_eq!(store.image().applied_index, index);
    let p1 = store.allocate_producer_id().unwrap();
    assert!(store.allocate_producer_id().unwrap() > p1);
    assert!(
        !dir.path().join("__cluster_metadata").exists(),
        "a local quorum writes nothing"
    );
}
