use super::*;
use crate::MetadataRecord;

fn credential(iterations: i32) -> ScramCredential {
    ScramCredential {
        salt: vec![1, 2, 3],
        stored_key: vec![4; 32],
        server_key: vec![5; 32],
        iterations,
    }
}

fn upsert(user: &str, mechanism: ScramMechanism, iterations: i32) -> MetadataRecord {
    MetadataRecord::UpsertScramCredential {
        user: user.into(),
        mechanism,
        credential: credential(iterations),
    }
}

fn binding(name: &str) -> AclBinding {
    AclBinding {
        resource_type: acl_codes::RESOURCE_TOPIC,
        resource_name: name.into(),
        pattern_type: acl_codes::PATTERN_LITERAL,
        principal: "User:alice".into(),
        host: "*".into(),
        operation: 3,
        permission_type: acl_codes::PERMISSION_ALLOW,
    }
}

fn quota(entity: &QuotaEntity, key: &str, value: Option<f64>) -> MetadataRecord {
    MetadataRecord::AlterClientQuota {
        entity: entity.clone(),
        key: key.into(),
        value: value.map(QuotaValue),
    }
}

#[test]
fn scram_upsert_replaces_and_delete_removes_the_last_mechanism_with_the_user() {
    let mut image = Image::default();
    image
        .apply(&upsert("alice", ScramMechanism::ScramSha256, 4096))
        .unwrap();
    image
        .apply(&upsert("alice", ScramMechanism::ScramSha256, 8192))
        .unwrap();
    image
        .apply(&upsert("alice", ScramMechanism::ScramSha512, 4096))
        .unwrap();
    let c = image
        .scram_credential("alice", ScramMechanism::ScramSha256)
        .unwrap();
    assert_eq!(c.iterations, 8192);
    assert_eq!(image.scram_credentials_of("alice").unwrap().len(), 2);

    let delete = |m| MetadataRecord::DeleteScramCredential {
        user: "alice".into(),
        mechanism: m,
    };
    image.apply(&delete(ScramMechanism::ScramSha256)).unwrap();
    assert!(image
        .scram_credential("alice", ScramMechanism::ScramSha256)
        .is_none());
    image.apply(&delete(ScramMechanism::ScramSha512)).unwrap();
    assert!(image.scram_credentials_of("alice").is_none());
    assert_eq!(
        image.apply(&delete(ScramMechanism::ScramSha512)),
        Err(ImageError::UnknownCredential(
            "alice".into(),
            ScramMechanism::ScramSha512
        ))
    );
}

#[test]
fn scram_credentials_outside_kafkas_iteration_bounds_or_without_user_are_rejected() {
    let mut image = Image::default();
    for record in [
        upsert("alice", ScramMechanism::ScramSha256, 4095),
        upsert("alice", ScramMechanism::ScramSha256, 16385),
        upsert("", ScramMechanism::ScramSha256, 4096),
    ] {
        assert!(matches!(
            image.apply(&record),
            Err(ImageError::InvalidCredential(_))
        ));
    }
    assert_eq!(image, Image::default());
}

#[test]
fn acl_create_is_idempotent_per_binding_and_delete_needs_a_known_id() {
    let mut image = Image::default();
    let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
    image
        .apply(&MetadataRecord::CreateAcl {
            id: a,
            binding: binding("t"),
        })
        .unwrap();
    // The same binding again, under another id: kept once.
    image
        .apply(&MetadataRecord::CreateAcl {
            id: b,
            binding: binding("t"),
        })
        .unwrap();
    assert_eq!(image.acl_bindings().len(), 1);
    assert_eq!(
        image.apply(&MetadataRecord::CreateAcl {
            id: a,
            binding: binding("u"),
        }),
        Err(ImageError::InvalidAclId(a))
    );
    image.apply(&MetadataRecord::DeleteAcl { id: a }).unwrap();
    assert!(image.acl_bindings().is_empty());
    assert_eq!(
        image.apply(&MetadataRecord::DeleteAcl { id: a }),
        Err(ImageError::UnknownAcl(a))
    );
}

#[test]
fn acl_bindings_with_filter_codes_or_bad_principals_are_rejected() {
    let mut image = Image::default();
    let bad = [
        AclBinding {
            resource_type: acl_codes::ANY,
            ..binding("t")
        },
        AclBinding {
            pattern_type: acl_codes::PATTERN_MATCH,
            ..binding("t")
        },
        AclBinding {
            operation: acl_codes::ANY,
            ..binding("t")
        },
        AclBinding {
            permission_type: acl_codes::UNKNOWN,
            ..binding("t")
        },
        AclBinding {
            principal: "alice".into(),
            ..binding("t")
        },
        binding(""),
    ];
    for (i, binding) in bad.into_iter().enumerate() {
        let id = Uuid::from_u128(i as u128 + 1);
        assert!(matches!(
            image.apply(&MetadataRecord::CreateAcl { id, binding }),
            Err(ImageError::InvalidAcl(_))
        ));
    }
    assert!(image.acl_bindings().is_empty());
}

#[test]
fn quotas_are_set_replaced_and_removed_and_an_empty_entity_disappears() {
    let mut image = Image::default();
    let alice = QuotaEntity::new([(ENTITY_USER, Some("alice")), (ENTITY_CLIENT_ID, None)]);
    image
        .apply(&quota(&alice, "producer_byte_rate", Some(1024.0)))
        .unwrap();
    image
        .apply(&quota(&alice, "producer_byte_rate", Some(2048.0)))
        .unwrap();
    image
        .apply(&quota(&alice, "request_percentage", Some(50.5)))
        .unwrap();
    // The same entity built in another order is the same key.
    let same = QuotaEntity::new([(ENTITY_CLIENT_ID, None), (ENTITY_USER, Some("alice"))]);
    let values = image.client_quota(&same).unwrap();
    assert_eq!(values["producer_byte_rate"], QuotaValue(2048.0));
    assert_eq!(values["request_percentage"], QuotaValue(50.5));

    image
        .apply(&quota(&alice, "producer_byte_rate", None))
        .unwrap();
    image
        .apply(&quota(&alice, "request_percentage", None))
        .unwrap();
    assert!(image.client_quota(&alice).is_none());
    // Removing what is not set is a no-op.
    image
        .apply(&quota(&alice, "request_percentage", None))
        .unwrap();

    for bad in [Some(-1.0), Some(f64::NAN), Some(f64::INFINITY)] {
        assert!(matches!(
            image.apply(&quota(&alice, "producer_byte_rate", bad)),
            Err(ImageError::InvalidQuota(_))
        ));
    }
    assert!(image
        .apply(&quota(
            &QuotaEntity::default(),
            "producer_byte_rate",
            Some(1.0)
        ))
        .is_err());
}

#[test]
fn a_snapshot_keeps_the_security_records() {
    let mut image = Image::default();
    image
        .apply(&upsert("alice", ScramMechanism::ScramSha512, 4096))
        .unwrap();
    image
        .apply(&MetadataRecord::CreateAcl {
            id: Uuid::from_u128(9),
            binding: binding("t"),
        })
        .unwrap();
    let ip = QuotaEntity::new([(ENTITY_IP, Some("10.0.0.1"))]);
    image
        .apply(&quota(&ip, "connection_creation_rate", Some(10.0)))
        .unwrap();
    let bytes = serde_json::to_vec(&image).unwrap();
    let reloaded: Image = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(reloaded, image);
}

#[test]
fn an_image_written_before_security_records_still_loads() {
    let old = r#"{"cluster_id":"abc","brokers":{},"topics":{},"next_producer_id":1000,
        "last_broker_epoch":3,"applied_index":42}"#;
    let image: Image = serde_json::from_str(old).unwrap();
    assert_eq!(image.applied_index, 42);
    assert!(image.scram_credentials.is_empty());
    assert!(image.acls.is_empty());
    assert!(image.client_quotas().is_empty());
}

#[test]
fn records_round_trip_through_the_log_encoding() {
    let records = [
        upsert("alice", ScramMechanism::ScramSha256, 4096),
        MetadataRecord::DeleteScramCredential {
            user: "alice".into(),
            mechanism: ScramMechanism::ScramSha512,
        },
        MetadataRecord::CreateAcl {
            id: Uuid::from_u128(3),
            binding: binding("t"),
        },
        MetadataRecord::DeleteAcl {
            id: Uuid::from_u128(3),
        },
        quota(
            &QuotaEntity::new([(ENTITY_USER, None)]),
            "consumer_byte_rate",
            Some(1.5),
        ),
    ];
    for record in records {
        let bytes = serde_json::to_vec(&record).unwrap();
        let back: MetadataRecord = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back, record);
    }
}
