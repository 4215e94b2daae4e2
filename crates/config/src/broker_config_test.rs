use super::*;
use crate::reference::reference_markdown;

#[test]
fn defaults_need_no_file() {
    let c = BrokerConfig::default();
    assert_eq!(
        c.listeners().unwrap().listeners[0].bind,
        "127.0.0.1:9092".parse().unwrap()
    );
    assert_eq!(c.log_dirs(), vec![PathBuf::from("./data")]);
    assert_eq!(c.node_id(), 1);
    assert!(c.auto_create_topics());
    assert_eq!(c.num_partitions(), 1);
}

#[test]
fn every_default_parses_as_its_type() {
    for d in BROKER_CONFIGS {
        let mut c = BrokerConfig::default();
        c.set(d.name, d.default)
            .unwrap_or_else(|e| panic!("default of {} invalid: {e}", d.name));
    }
}

#[test]
fn quoted_and_dotted_keys_are_the_same_key() {
    let a = BrokerConfig::parse("\"log.dirs\" = \"/a\"\n\"num.partitions\" = 3").unwrap();
    let b = BrokerConfig::parse("log.dirs = \"/a\"\nnum.partitions = 3").unwrap();
    assert_eq!(a.log_dirs(), b.log_dirs());
    assert_eq!(b.num_partitions(), 3);
    let c = BrokerConfig::parse("[log]\ndirs = [\"/x\", \"/y\"]").unwrap();
    assert_eq!(c.log_dirs(), vec![PathBuf::from("/x"), PathBuf::from("/y")]);
}

#[test]
fn unknown_key_is_named_in_the_error() {
    let e = BrokerConfig::parse("\"log.dirz\" = \"/a\"").unwrap_err();
    assert!(e.to_string().contains("log.dirz"), "{e}");
}

#[test]
fn ill_typed_key_is_named_in_the_error() {
    let e = BrokerConfig::parse("\"num.partitions\" = \"three\"").unwrap_err();
    assert!(e.to_string().contains("num.partitions"), "{e}");
    assert!(e.to_string().contains("must be of type int"), "{e}");
    let e = BrokerConfig::parse("\"auto.create.topics.enable\" = 1").unwrap_err();
    assert!(e.to_string().contains("auto.create.topics.enable"), "{e}");
    let e = BrokerConfig::parse("\"num.partitions\" = 0").unwrap_err();
    assert!(e.to_string().contains("num.partitions"), "{e}");
    let e = BrokerConfig::parse("\"log.message.timestamp.type\" = \"Now\"").unwrap_err();
    assert!(e.to_string().contains("log.message.timestamp.type"), "{e}");
}

#[test]
fn every_key_is_documented() {
    let doc_path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/configuration.md");
    let doc = std::fs::read_to_string(doc_path).expect("docs/configuration.md exists");
    for d in BROKER_CONFIGS {
        assert!(
            doc.contains(&format!("`{}`", d.name)),
            "{} is not in docs/configuration.md",
            d.name
        );
    }
    for t in crate::topic_config::TOPIC_CONFIGS {
        assert!(
            doc.contains(&format!("`{}`", t.name)),
            "{} is not in docs/configuration.md",
            t.name
        );
    }
}

#[test]
fn docs_hold_the_generated_reference() {
    let doc_path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/configuration.md");
    let doc = std::fs::read_to_string(doc_path).expect("docs/configuration.md exists");
    assert!(
        doc.contains(&reference_markdown()),
        "docs/configuration.md is stale: regenerate its tables with `ferry config-reference`"
    );
}

#[test]
fn controller_quorum_keys() {
    let c = BrokerConfig::default();
    assert_eq!(c.process_roles(), vec!["broker", "controller"]);
    assert!(c.controller_quorum_voters().unwrap().is_empty());
    assert_eq!(
        c.metadata_log_dir().unwrap(),
        std::path::Path::new("./data/__cluster_metadata")
    );
    let c = BrokerConfig::parse(
        "\"controller.quorum.voters\" = \"1@127.0.0.1:9093, 2@[::1]:9094\"\n\"metadata.log.dir\" = \"/m\"",
    )
    .unwrap();
    let voters = c.controller_quorum_voters().unwrap();
    assert_eq!(voters[&1], "127.0.0.1:9093");
    assert_eq!(voters[&2], "[::1]:9094");
    assert_eq!(c.metadata_log_dir().unwrap(), std::path::Path::new("/m"));
    for bad in [
        "\"controller.quorum.voters\" = \"127.0.0.1:9093\"",
        "\"controller.quorum.voters\" = \"x@127.0.0.1:9093\"",
        "\"controller.quorum.voters\" = \"1@127.0.0.1\"",
        "\"process.roles\" = \"broker,zookeeper\"",
        "\"process.roles\" = \"\"",
    ] {
        assert!(BrokerConfig::parse(bad).is_err(), "{bad}");
    }
    let dup = BrokerConfig::parse("\"controller.quorum.voters\" = \"1@a:1,1@b:2\"").unwrap();
    assert!(dup.controller_quorum_voters().is_err());
}

#[test]
fn secrets_are_typed_password_and_never_shown() {
    let c = BrokerConfig::parse(
        "\"remote.wal.s3.secret.access.key\" = \"s3cr3t-value\"\n\"log.dirs\" = \"/a\"",
    )
    .unwrap();
    let def = lookup_def("remote.wal.s3.secret.access.key").unwrap();
    assert!(def.ty.is_sensitive());
    let shown = format!("{c:?}");
    assert!(!shown.contains("s3cr3t-value"), "{shown}");
    assert!(
        shown.contains("/a"),
        "other values are still shown: {shown}"
    );
    // A secret of the wrong type is named in the error without its value.
    let e = BrokerConfig::parse("\"remote.wal.s3.secret.access.key\" = 424242").unwrap_err();
    assert!(!e.to_string().contains("424242"), "{e}");
    assert!(
        e.to_string().contains("remote.wal.s3.secret.access.key"),
        "{e}"
    );
}

#[test]
fn authorizer_is_off_by_default_and_standard_when_named() {
    assert!(BrokerConfig::default().authorizer_config().is_none());
    for class in STANDARD_AUTHORIZER_CLASSES {
        let c = BrokerConfig::parse(&format!(
            "\"authorizer.class.name\" = \"{class}\"\n\"super.users\" = \"User:admin; User:ops\"\n\"allow.everyone.if.no.acl.found\" = true"
        ))
        .unwrap();
        let a = c.authorizer_config().unwrap();
        assert!(a.allow_everyone_if_no_acl_found);
        assert_eq!(a.super_users.len(), 2);
    }
}

#[test]
fn unknown_authorizer_class_and_bad_super_users_are_named_at_start_up() {
    let e = BrokerConfig::parse("\"authorizer.class.name\" = \"com.example.MyAuthorizer\"")
        .unwrap_err();
    assert!(e.to_string().contains("authorizer.class.name"), "{e}");
    assert!(e.to_string().contains("com.example.MyAuthorizer"), "{e}");
    let e = BrokerConfig::parse("\"super.users\" = \"admin\"").unwrap_err();
    assert!(e.to_string().contains("super.users"), "{e}");
}

/// Kafka refuses to start when a consumer-protocol group default is outside its min and max, or
/// the heartbeat is not shorter than the session; each refusal names the key.
#[test]
fn group_consumer_timeouts_are_checked_against_their_bounds() {
    assert!(BrokerConfig::default()
        .check_group_consumer_timeouts()
        .is_ok());
    for (file, key, why) in [
        (
            "\"group.consumer.session.timeout.ms\" = 30000",
            "group.consumer.session.timeout.ms",
            "greater than or equal to group.consumer.min.session.timeout.ms",
        ),
        (
            "\"group.consumer.session.timeout.ms\" = 70000",
            "group.consumer.session.timeout.ms",
            "less than or equal to group.consumer.max.session.timeout.ms",
        ),
        (
            "\"group.consumer.max.heartbeat.interval.ms\" = 4000",
            "group.consumer.max.heartbeat.interval.ms",
            "greater than or equal to group.consumer.min.heartbeat.interval.ms",
        ),
        (
            "\"group.consumer.heartbeat.interval.ms\" = 15000\n\"group.consumer.min.session.timeout.ms\" = 10000\n\"group.consumer.session.timeout.ms\" = 12000",
            "group.consumer.heartbeat.interval.ms",
            "less than group.consumer.session.timeout.ms",
        ),
    ] {
        let e = BrokerConfig::parse(file)
            .unwrap()
            .check_group_consumer_timeouts()
            .unwrap_err()
            .to_string();
        assert!(e.contains(key) && e.contains(why), "{file}: {e}");
    }
}
