//! The store and Kafka's order of precedence (ClientQuotaManager's doc: the most specific of the
//! eight levels that is set applies), the usage bucket of each level, and AlterClientQuotas'
//! validation rules.

use super::*;
use crate::entity::EntityName::{Default as Dflt, Named};

const USER: &str = "alice";
const CLIENT: &str = "app";

fn named(s: &str) -> EntityName {
    Named(s.to_owned())
}

/// The entity of each level for (alice, app), in `QuotaLevel::PRECEDENCE` order.
fn entities() -> [QuotaEntity; 8] {
    [
        QuotaEntity::user_client(named(USER), named(CLIENT)),
        QuotaEntity::user_client(named(USER), Dflt),
        QuotaEntity::user(USER),
        QuotaEntity::user_client(Dflt, named(CLIENT)),
        QuotaEntity::user_client(Dflt, Dflt),
        QuotaEntity::default_user(),
        QuotaEntity::client(CLIENT),
        QuotaEntity::default_client(),
    ]
}

/// A distinct, valid byte rate per level.
fn value_of(level_index: usize) -> f64 {
    1000.0 * (level_index as f64 + 1.0)
}

#[test]
fn each_entity_sits_at_its_level() {
    for (entity, level) in entities().iter().zip(QuotaLevel::PRECEDENCE) {
        assert_eq!(entity.level(), Some(level), "{entity}");
    }
    assert_eq!(QuotaEntity::new(None, None).level(), None);
}

#[test]
fn each_level_beats_the_next() {
    let es = entities();
    for i in 0..7 {
        let mut config = QuotaConfig::new();
        config
            .set(&es[i], QuotaKey::ProducerByteRate, value_of(i))
            .unwrap();
        config
            .set(&es[i + 1], QuotaKey::ProducerByteRate, value_of(i + 1))
            .unwrap();
        let r = config
            .resolve(QuotaKey::ProducerByteRate, USER, CLIENT)
            .unwrap();
        assert_eq!(
            r.level,
            QuotaLevel::PRECEDENCE[i],
            "levels {i} and {}",
            i + 1
        );
        assert_eq!(r.bound, value_of(i));
    }
}

#[test]
fn most_specific_of_all_set_levels_applies() {
    // Set levels i..8 at once; level i must win every time, and removing it hands over to i+1.
    let es = entities();
    let mut config = QuotaConfig::new();
    for i in (0..8).rev() {
        config
            .set(&es[i], QuotaKey::ConsumerByteRate, value_of(i))
            .unwrap();
        let r = config
            .resolve(QuotaKey::ConsumerByteRate, USER, CLIENT)
            .unwrap();
        assert_eq!((r.level, r.bound), (QuotaLevel::PRECEDENCE[i], value_of(i)));
    }
    for (i, entity) in es.iter().enumerate() {
        config.remove(entity, QuotaKey::ConsumerByteRate);
        let r = config.resolve(QuotaKey::ConsumerByteRate, USER, CLIENT);
        match QuotaLevel::PRECEDENCE.get(i + 1) {
            Some(&next) => assert_eq!(r.map(|r| r.level), Some(next)),
            None => assert_eq!(r, None),
        }
    }
    assert!(config.is_empty());
}

#[test]
fn each_level_alone_applies() {
    for (i, entity) in entities().iter().enumerate() {
        let mut config = QuotaConfig::new();
        config
            .set(entity, QuotaKey::RequestPercentage, 12.5)
            .unwrap();
        let r = config
            .resolve(QuotaKey::RequestPercentage, USER, CLIENT)
            .unwrap();
        assert_eq!(r.level, QuotaLevel::PRECEDENCE[i]);
        assert_eq!(r.bound, 12.5);
    }
}

#[test]
fn quotas_of_other_users_clients_and_keys_do_not_apply() {
    let mut config = QuotaConfig::new();
    config
        .set(&QuotaEntity::user("bob"), QuotaKey::ProducerByteRate, 1.0)
        .unwrap();
    config
        .set(
            &QuotaEntity::client("other"),
            QuotaKey::ProducerByteRate,
            2.0,
        )
        .unwrap();
    config
        .set(
            &QuotaEntity::user_client(named(USER), named("other")),
            QuotaKey::ProducerByteRate,
            3.0,
        )
        .unwrap();
    config
        .set(
            &QuotaEntity::user_client(Dflt, named("other")),
            QuotaKey::ProducerByteRate,
            4.0,
        )
        .unwrap();
    config
        .set(&QuotaEntity::user(USER), QuotaKey::ConsumerByteRate, 5.0)
        .unwrap();
    assert_eq!(
        config.quota_for(QuotaKey::ProducerByteRate, USER, CLIENT),
        None
    );
    // The consumer quota of alice is hers whatever the client id.
    assert_eq!(
        config.quota_for(QuotaKey::ConsumerByteRate, USER, "anything"),
        Some((5.0, MetricKey::new(USER, "")))
    );
    // A named user with only a client-level table of its own still falls through to defaults.
    config
        .set(
            &QuotaEntity::default_client(),
            QuotaKey::ProducerByteRate,
            6.0,
        )
        .unwrap();
    let r = config
        .resolve(QuotaKey::ProducerByteRate, USER, CLIENT)
        .unwrap();
    assert_eq!((r.level, r.bound), (QuotaLevel::DefaultClient, 6.0));
}

#[test]
fn usage_bucket_of_each_level() {
    // Kafka's DefaultQuotaCallback.quotaMetricTags: levels naming a user part keep the user,
    // levels naming a client part keep the client id.
    let expected = [
        (USER, CLIENT),
        (USER, CLIENT),
        (USER, ""),
        (USER, CLIENT),
        (USER, CLIENT),
        (USER, ""),
        ("", CLIENT),
        ("", CLIENT),
    ];
    for (i, entity) in entities().iter().enumerate() {
        let mut config = QuotaConfig::new();
        config
            .set(entity, QuotaKey::ProducerByteRate, 1000.0)
            .unwrap();
        let (_, key) = config
            .quota_for(QuotaKey::ProducerByteRate, USER, CLIENT)
            .unwrap();
        let (u, c) = expected[i];
        assert_eq!(
            key,
            MetricKey::new(u, c),
            "level {:?}",
            QuotaLevel::PRECEDENCE[i]
        );
    }
}

#[test]
fn default_entities_apply_to_each_name_separately() {
    let mut config = QuotaConfig::new();
    config
        .set(
            &QuotaEntity::default_user(),
            QuotaKey::ProducerByteRate,
            100.0,
        )
        .unwrap();
    config
        .set(
            &QuotaEntity::default_client(),
            QuotaKey::ConsumerByteRate,
            200.0,
        )
        .unwrap();
    // Every user gets the default user quota in a bucket of its own.
    assert_eq!(
        config.quota_for(QuotaKey::ProducerByteRate, "alice", "x"),
        Some((100.0, MetricKey::new("alice", "")))
    );
    assert_eq!(
        config.quota_for(QuotaKey::ProducerByteRate, "bob", "y"),
        Some((100.0, MetricKey::new("bob", "")))
    );
    // Every client id gets the default client quota in a bucket of its own, shared by users.
    assert_eq!(
        config.quota_for(QuotaKey::ConsumerByteRate, "alice", "x"),
        Some((200.0, MetricKey::new("", "x")))
    );
    assert_eq!(
        config.quota_for(QuotaKey::ConsumerByteRate, "bob", "x"),
        Some((200.0, MetricKey::new("", "x")))
    );
    // A specific user overrides the default user.
    config
        .set(&QuotaEntity::user("bob"), QuotaKey::ProducerByteRate, 50.0)
        .unwrap();
    assert_eq!(
        config
            .quota_for(QuotaKey::ProducerByteRate, "bob", "y")
            .unwrap()
            .0,
        50.0
    );
    assert_eq!(
        config
            .quota_for(QuotaKey::ProducerByteRate, "alice", "y")
            .unwrap()
            .0,
        100.0
    );
}

#[test]
fn set_get_remove_and_entries() {
    let mut config = QuotaConfig::new();
    let e = QuotaEntity::user_client(named(USER), named(CLIENT));
    assert_eq!(config.set(&e, QuotaKey::ProducerByteRate, 10.0), Ok(None));
    assert_eq!(
        config.set(&e, QuotaKey::ProducerByteRate, 20.0),
        Ok(Some(10.0))
    );
    config.set(&e, QuotaKey::RequestPercentage, 5.5).unwrap();
    config
        .set(
            &QuotaEntity::default_client(),
            QuotaKey::ConsumerByteRate,
            7.0,
        )
        .unwrap();
    assert_eq!(config.get(&e, QuotaKey::ProducerByteRate), Some(20.0));
    assert_eq!(
        config.get(&QuotaEntity::user(USER), QuotaKey::ProducerByteRate),
        None
    );
    assert!(config.has_quotas(QuotaKey::ProducerByteRate));
    assert!(!config.has_quotas(QuotaKey::ControllerMutationRate));
    assert_eq!(
        config.entries(),
        // Sorted by entity (an absent user part first), then key.
        vec![
            (
                QuotaEntity::default_client(),
                QuotaKey::ConsumerByteRate,
                7.0
            ),
            (e.clone(), QuotaKey::ProducerByteRate, 20.0),
            (e.clone(), QuotaKey::RequestPercentage, 5.5),
        ]
    );
    assert_eq!(config.remove(&e, QuotaKey::ProducerByteRate), Some(20.0));
    assert_eq!(config.remove(&e, QuotaKey::ProducerByteRate), None);
    assert_eq!(
        config.remove(&QuotaEntity::user("nobody"), QuotaKey::ProducerByteRate),
        None
    );
    assert!(!config.has_quotas(QuotaKey::ProducerByteRate));
    config.remove(&e, QuotaKey::RequestPercentage);
    config.remove(&QuotaEntity::default_client(), QuotaKey::ConsumerByteRate);
    assert!(config.is_empty());
    // Empty tables are dropped, not kept: memory follows what is configured.
    assert!(config.users.is_empty());
}

#[test]
fn replace_all_is_all_or_nothing() {
    let mut config = QuotaConfig::new();
    config
        .set(&QuotaEntity::user("old"), QuotaKey::ProducerByteRate, 1.0)
        .unwrap();
    let bad = vec![
        (QuotaEntity::user("new"), QuotaKey::ProducerByteRate, 2.0),
        (QuotaEntity::user("new"), QuotaKey::ConsumerByteRate, -1.0),
    ];
    assert!(config.replace_all(bad).is_err());
    assert_eq!(
        config.entries(),
        vec![(QuotaEntity::user("old"), QuotaKey::ProducerByteRate, 1.0)]
    );
    let good = vec![
        (QuotaEntity::user("new"), QuotaKey::ProducerByteRate, 2.0),
        (
            QuotaEntity::default_user(),
            QuotaKey::RequestPercentage,
            200.0,
        ),
    ];
    config.replace_all(good.clone()).unwrap();
    let mut expected = good;
    expected.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    assert_eq!(config.entries(), expected);
    assert_eq!(
        config.quota_for(QuotaKey::ProducerByteRate, "old", "c"),
        None
    );
}

#[test]
fn keys_parse_by_kafka_name() {
    for key in QuotaKey::ALL {
        assert_eq!(QuotaKey::parse(key.name()), Ok(key));
    }
    assert_eq!(
        QuotaKey::parse("producer-byte-rate"),
        Err(QuotaError::UnknownKey("producer-byte-rate".to_owned()))
    );
    assert_eq!(
        QuotaKey::parse("controller_mutation_rate"),
        Ok(QuotaKey::ControllerMutationRate)
    );
    assert_eq!(
        QuotaKey::parse("connection_creation_rate"),
        Ok(QuotaKey::ConnectionCreationRate)
    );
}

#[test]
fn validation_follows_kafkas_controller() {
    let user = QuotaEntity::user(USER);
    let ok = |k, v| validate_quota(&user, k, v);
    assert_eq!(ok(QuotaKey::ProducerByteRate, 1024.0), Ok(()));
    assert_eq!(ok(QuotaKey::RequestPercentage, 0.5), Ok(()));
    assert_eq!(ok(QuotaKey::ControllerMutationRate, 2.5), Ok(()));
    // Within Kafka's 1e-6 tolerance for integral keys.
    assert_eq!(ok(QuotaKey::ProducerByteRate, 1024.0000000001), Ok(()));
    assert!(matches!(
        ok(QuotaKey::ProducerByteRate, 0.0),
        Err(QuotaError::NotPositive { .. })
    ));
    assert!(matches!(
        ok(QuotaKey::ConsumerByteRate, -5.0),
        Err(QuotaError::NotPositive { .. })
    ));
    assert!(matches!(
        ok(QuotaKey::RequestPercentage, f64::NAN),
        Err(QuotaError::NotPositive { .. })
    ));
    assert!(matches!(
        ok(QuotaKey::RequestPercentage, f64::INFINITY),
        Err(QuotaError::TooLarge { .. })
    ));
    assert!(matches!(
        ok(QuotaKey::ProducerByteRate, 1e30),
        Err(QuotaError::TooLarge { .. })
    ));
    assert!(matches!(
        ok(QuotaKey::ProducerByteRate, 10.5),
        Err(QuotaError::Fractional { .. })
    ));
    assert!(matches!(
        ok(QuotaKey::ConnectionCreationRate, 10.0),
        Err(QuotaError::KeyNotForEntity { .. })
    ));
    assert!(matches!(
        validate_quota(
            &QuotaEntity::new(None, None),
            QuotaKey::ProducerByteRate,
            1.0
        ),
        Err(QuotaError::InvalidEntity(_))
    ));
    assert!(matches!(
        validate_quota(&QuotaEntity::user(""), QuotaKey::ProducerByteRate, 1.0),
        Err(QuotaError::InvalidEntity(_))
    ));
    assert!(matches!(
        validate_quota(&QuotaEntity::client(""), QuotaKey::ProducerByteRate, 1.0),
        Err(QuotaError::InvalidEntity(_))
    ));
    // A rejected set leaves nothing behind.
    let mut config = QuotaConfig::new();
    assert!(config.set(&user, QuotaKey::ProducerByteRate, 0.0).is_err());
    assert!(config.is_empty() && config.users.is_empty());
    assert!(!QuotaError::UnknownKey("x".into()).is_retriable());
}

#[test]
fn entity_names_in_wire_form() {
    assert_eq!(EntityName::from_wire(None), Dflt);
    assert_eq!(EntityName::from_wire(Some("a")), named("a"));
    assert_eq!(named("a").as_wire(), Some("a"));
    assert_eq!(Dflt.as_wire(), None);
    assert_eq!(
        QuotaEntity::user_client(Dflt, named("c")).to_string(),
        "user <default> client-id c"
    );
}
