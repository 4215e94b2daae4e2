use super::*;

pub(crate) fn register(image: &mut Image, id: BrokerId, rack: &str) {
    image
        .apply(&MetadataRecord::RegisterBroker {
            id,
            rack: Some(rack.to_string()),
            host: "127.0.0.1".into(),
            port: 9092 + id as u16,
            endpoints: Vec::new(),
        })
        .unwrap();
    image.apply(&MetadataRecord::UnfenceBroker { id }).unwrap();
}

/// Three live brokers (1, 2, 3 on az1..az3) and topic `t` with one partition on [1, 2, 3].
pub(crate) fn three_brokers_one_topic() -> (Image, Uuid) {
    let mut image = Image::default();
    for id in 1..=3 {
        register(&mut image, id, &format!("az{id}"));
    }
    let id = Uuid::from_u128(7);
    image
        .apply(&MetadataRecord::CreateTopic {
            name: "t".into(),
            id,
            configs: BTreeMap::new(),
            assignments: vec![vec![1, 2, 3]],
        })
        .unwrap();
    (image, id)
}

fn alter(
    topic_id: Uuid,
    leader: BrokerId,
    leader_epoch: i32,
    isr: &[BrokerId],
    partition_epoch: i32,
) -> MetadataRecord {
    MetadataRecord::AlterPartition {
        topic_id,
        partition: 0,
        leader,
        leader_epoch,
        isr: isr.to_vec(),
        partition_epoch,
        unclean: false,
    }
}

#[test]
fn create_topic_starts_with_live_replicas_in_isr_and_first_as_leader() {
    let (image, id) = three_brokers_one_topic();
    let p = image.partition(id, 0).unwrap();
    assert_eq!(p.isr, vec![1, 2, 3]);
    assert_eq!(p.leader, 1);
    assert_eq!((p.leader_epoch, p.partition_epoch), (0, 0));
}

#[test]
fn fenced_replicas_start_outside_the_isr() {
    let mut image = Image::default();
    register(&mut image, 1, "az1");
    register(&mut image, 2, "az2");
    image.apply(&MetadataRecord::FenceBroker { id: 1 }).unwrap();
    image
        .apply(&MetadataRecord::CreateTopic {
            name: "t".into(),
            id: Uuid::from_u128(1),
            configs: BTreeMap::new(),
            assignments: vec![vec![1, 2]],
        })
        .unwrap();
    let p = &image.topic("t").unwrap().partitions[0];
    assert_eq!((p.leader, p.isr.clone()), (2, vec![2]));
}

#[test]
fn rejected_records_leave_the_image_unchanged() {
    let (base, id) = three_brokers_one_topic();
    let table: Vec<(&str, MetadataRecord)> = vec![
        (
            "duplicate name",
            MetadataRecord::CreateTopic {
                name: "t".into(),
                id: Uuid::from_u128(99),
                configs: BTreeMap::new(),
                assignments: vec![vec![1]],
            },
        ),
        (
            "duplicate id",
            MetadataRecord::CreateTopic {
                name: "u".into(),
                id,
                configs: BTreeMap::new(),
                assignments: vec![vec![1]],
            },
        ),
        (
            "nil id",
            MetadataRecord::CreateTopic {
                name: "u".into(),
                id: Uuid::nil(),
                configs: BTreeMap::new(),
                assignments: vec![vec![1]],
            },
        ),
        (
            "unknown replica",
            MetadataRecord::CreateTopic {
                name: "u".into(),
                id: Uuid::from_u128(5),
                configs: BTreeMap::new(),
                assignments: vec![vec![1, 9]],
            },
        ),
        (
            "replica twice",
            MetadataRecord::CreatePartitions {
                name: "t".into(),
                assignments: vec![vec![2, 2]],
            },
        ),
        (
            "no replicas",
            MetadataRecord::CreatePartitions {
                name: "t".into(),
                assignments: vec![vec![]],
            },
        ),
        (
            "delete unknown",
            MetadataRecord::DeleteTopic { name: "x".into() },
        ),
        (
            "configs of unknown",
            MetadataRecord::AlterConfigs {
                name: "x".into(),
                configs: BTreeMap::new(),
            },
        ),
        ("fence unknown", MetadataRecord::FenceBroker { id: 42 }),
        ("stale partition epoch", alter(id, 1, 0, &[1, 2], 0)),
        ("skipped partition epoch", alter(id, 1, 0, &[1, 2], 2)),
        ("leader epoch decreases", alter(id, 1, -1, &[1, 2], 1)),
        ("new leader, same leader epoch", alter(id, 2, 0, &[1, 2], 1)),
        ("isr not within replicas", alter(id, 1, 0, &[1, 4], 1)),
        ("leader outside isr", alter(id, 1, 0, &[2, 3], 1)),
        ("isr names a broker twice", alter(id, 1, 0, &[1, 1], 1)),
        (
            "unknown topic id",
            alter(Uuid::from_u128(1234), 1, 0, &[1], 1),
        ),
        (
            "producer ids for unknown broker",
            MetadataRecord::AllocateProducerIds {
                broker: 77,
                count: 10,
            },
        ),
        (
            "zero producer ids",
            MetadataRecord::AllocateProducerIds {
                broker: 1,
                count: 0,
            },
        ),
    ];
    for (case, record) in table {
        let mut image = base.clone();
        assert!(image.apply(&record).is_err(), "{case}: accepted");
        assert_eq!(image, base, "{case}: image changed");
    }
}

#[test]
fn leader_epoch_only_increases_and_partition_epoch_steps_by_one() {
    let (mut image, id) = three_brokers_one_topic();
    image.apply(&alter(id, 2, 1, &[2, 3], 1)).unwrap();
    image.apply(&alter(id, 2, 1, &[2, 3, 1], 2)).unwrap();
    let p = image.partition(id, 0).unwrap();
    assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (2, 1, 2));
    assert!(image.apply(&alter(id, 1, 1, &[1, 2, 3], 3)).is_err());
    image.apply(&alter(id, 1, 2, &[1, 2, 3], 3)).unwrap();
}

#[test]
fn new_leader_must_be_live_and_come_from_the_isr_unless_unclean() {
    let (mut image, id) = three_brokers_one_topic();
    // ISR shrinks to [1].
    image.apply(&alter(id, 1, 0, &[1], 1)).unwrap();
    image.apply(&MetadataRecord::FenceBroker { id: 1 }).unwrap();
    // Broker 2 was not in the ISR: a clean election cannot pick it.
    let mut clean = alter(id, 2, 1, &[2], 2);
    assert!(matches!(
        image.clone().apply(&clean),
        Err(ImageError::InvalidLeader { .. })
    ));
    if let MetadataRecord::AlterPartition { unclean, .. } = &mut clean {
        *unclean = true;
    }
    image.clone().apply(&clean).unwrap();
    // An unclean election still needs a live leader and an ISR of the leader alone.
    let mut to_fenced = alter(id, 1, 1, &[1], 2);
    if let MetadataRecord::AlterPartition { unclean, .. } = &mut to_fenced {
        *unclean = true;
    }
    // Leader 1 is unchanged here (same leader), so liveness is not checked; epochs must still move.
    image.clone().apply(&to_fenced).unwrap();
    let mut wide = alter(id, 3, 1, &[3, 2], 2);
    if let MetadataRecord::AlterPartition { unclean, .. } = &mut wide {
        *unclean = true;
    }
    assert!(image.apply(&wide).is_err());
}

#[test]
fn cluster_id_is_set_once() {
    let mut image = Image::default();
    let init = |id: &str| MetadataRecord::InitCluster {
        cluster_id: id.into(),
    };
    image.apply(&init("a")).unwrap();
    image.apply(&init("a")).unwrap();
    assert_eq!(
        image.apply(&init("b")),
        Err(ImageError::ClusterIdSet("a".into()))
    );
    assert_eq!(image.cluster_id.as_deref(), Some("a"));
}

#[test]
fn producer_id_blocks_never_overlap() {
    let (mut image, _) = three_brokers_one_topic();
    let a = image
        .apply(&MetadataRecord::AllocateProducerIds {
            broker: 1,
            count: 1000,
        })
        .unwrap();
    let b = image
        .apply(&MetadataRecord::AllocateProducerIds {
            broker: 2,
            count: 1000,
        })
        .unwrap();
    assert_eq!(
        (a, b),
        (
            Applied::ProducerIds {
                first: 0,
                count: 1000
            },
            Applied::ProducerIds {
                first: 1000,
                count: 1000
            }
        )
    );
}

#[test]
fn broker_epoch_grows_with_every_registration() {
    let mut image = Image::default();
    let reg = MetadataRecord::RegisterBroker {
        id: 1,
        rack: None,
        host: "h".into(),
        port: 1,
        endpoints: Vec::new(),
    };
    assert_eq!(image.apply(&reg), Ok(Applied::BrokerEpoch(1)));
    assert_eq!(image.apply(&reg), Ok(Applied::BrokerEpoch(2)));
    assert!(image.brokers[&1].fenced, "brokers register fenced");
}

#[test]
fn topic_lifecycle_configs_partitions_delete() {
    let (mut image, _) = three_brokers_one_topic();
    let configs = BTreeMap::from([("cleanup.policy".to_string(), "compact".to_string())]);
    image
        .apply(&MetadataRecord::AlterConfigs {
            name: "t".into(),
            configs: configs.clone(),
        })
        .unwrap();
    image
        .apply(&MetadataRecord::CreatePartitions {
            name: "t".into(),
            assignments: vec![vec![2, 3, 1], vec![3, 1, 2]],
        })
        .unwrap();
    let t = image.topic("t").unwrap();
    assert_eq!(t.configs, configs);
    assert_eq!(t.partitions.len(), 3);
    assert_eq!(t.partitions[2].leader, 3);
    image
        .apply(&MetadataRecord::DeleteTopic { name: "t".into() })
        .unwrap();
    assert!(image.topics.is_empty());
}

#[test]
fn records_round_trip_through_json() {
    let record = MetadataRecord::AlterPartition {
        topic_id: Uuid::from_u128(3),
        partition: 2,
        leader: 1,
        leader_epoch: 4,
        isr: vec![1, 2],
        partition_epoch: 9,
        unclean: false,
    };
    let json = serde_json::to_string(&record).unwrap();
    assert_eq!(
        serde_json::from_str::<MetadataRecord>(&json).unwrap(),
        record
    );
}

/// Registrations written before named listeners (no `endpoints`) still load, and give their one
/// endpoint on every listener; new ones give each listener its own.
#[test]
fn registrations_without_endpoints_still_load() {
    let old = r#"{"type":"RegisterBroker","id":1,"rack":null,"host":"h","port":9092}"#;
    let record: MetadataRecord = serde_json::from_str(old).unwrap();
    let mut image = Image::default();
    image.apply(&record).unwrap();
    let reg = &image.brokers[&1];
    assert_eq!(reg.endpoint("ANY"), Some(("h", 9092)));
    let snapshot = r#"{"id":1,"rack":null,"host":"h","port":9092,"epoch":3,"fenced":false}"#;
    let reg: crate::image::BrokerRegistration = serde_json::from_str(snapshot).unwrap();
    assert!(reg.endpoints.is_empty());

    let new = MetadataRecord::RegisterBroker {
        id: 2,
        rack: None,
        host: "10.0.0.2".into(),
        port: 9093,
        endpoints: vec![
            crate::image::Endpoint {
                name: "CLIENT".into(),
                host: "kafka.example.com".into(),
                port: 9092,
                security_protocol: "SSL".into(),
            },
            crate::image::Endpoint {
                name: "INTERNAL".into(),
                host: "10.0.0.2".into(),
                port: 9093,
                security_protocol: "PLAINTEXT".into(),
            },
        ],
    };
    let json = serde_json::to_string(&new).unwrap();
    assert_eq!(serde_json::from_str::<MetadataRecord>(&json).unwrap(), new);
    image.apply(&new).unwrap();
    let reg = &image.brokers[&2];
    assert_eq!(reg.endpoint("CLIENT"), Some(("kafka.example.com", 9092)));
    assert_eq!(reg.endpoint("INTERNAL"), Some(("10.0.0.2", 9093)));
    assert_eq!(reg.endpoint("OTHER"), None);
}

#[test]
fn broker_configs_are_replaced_per_resource_and_survive_a_snapshot() {
    let mut image = Image::default();
    let set = |resource: &str, pairs: &[(&str, &str)]| MetadataRecord::AlterBrokerConfigs {
        resource: resource.to_string(),
        configs: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };
    image
        .apply(&set("", &[("log.retention.ms", "1000")]))
        .unwrap();
    image
        .apply(&set("2", &[("log.retention.bytes", "5")]))
        .unwrap();
    assert_eq!(image.broker_configs[""]["log.retention.ms"], "1000");
    assert_eq!(image.broker_configs["2"].len(), 1);
    // A snapshot written and read back keeps them; an older snapshot without them reads as none.
    let json = serde_json::to_string(&image).unwrap();
    assert_eq!(serde_json::from_str::<Image>(&json).unwrap(), image);
    // The whole set is replaced; an empty set removes the resource.
    image.apply(&set("", &[])).unwrap();
    assert!(!image.broker_configs.contains_key(""));
    let before = image.clone();
    assert_eq!(
        image.apply(&set("broker-2", &[("a", "b")])),
        Err(ImageError::InvalidBrokerResource("broker-2".into()))
    );
    assert_eq!(image, before);
}

#[test]
fn group_configs_are_replaced_per_group_and_survive_a_snapshot() {
    let mut image = Image::default();
    let set = |group: &str, pairs: &[(&str, &str)]| MetadataRecord::AlterGroupConfigs {
        group: group.to_string(),
        configs: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };
    image
        .apply(&set("orders", &[("consumer.session.timeout.ms", "50000")]))
        .unwrap();
    assert_eq!(
        image.group_configs["orders"]["consumer.session.timeout.ms"],
        "50000"
    );
    let json = serde_json::to_string(&image).unwrap();
    assert_eq!(serde_json::from_str::<Image>(&json).unwrap(), image);
    image.apply(&set("orders", &[])).unwrap();
    assert!(image.group_configs.is_empty());
}
