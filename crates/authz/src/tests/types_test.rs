//! Wire codes, names, principals, host strings and the serialized form of a binding: values
//! other Kafka components depend on, pinned here.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::*;

#[test]
fn wire_codes_are_kafkas() {
    let rt: Vec<(i8, &str)> = ResourceType::ALL_VALUES
        .iter()
        .map(|v| (v.code(), v.name()))
        .collect();
    assert_eq!(
        rt,
        [
            (0, "UNKNOWN"),
            (1, "ANY"),
            (2, "TOPIC"),
            (3, "GROUP"),
            (4, "CLUSTER"),
            (5, "TRANSACTIONAL_ID"),
            (6, "DELEGATION_TOKEN"),
            (7, "USER")
        ]
    );
    let pt: Vec<(i8, &str)> = PatternType::ALL_VALUES
        .iter()
        .map(|v| (v.code(), v.name()))
        .collect();
    assert_eq!(
        pt,
        [
            (0, "UNKNOWN"),
            (1, "ANY"),
            (2, "MATCH"),
            (3, "LITERAL"),
            (4, "PREFIXED")
        ]
    );
    let ops: Vec<(i8, &str)> = AclOperation::ALL_VALUES
        .iter()
        .map(|v| (v.code(), v.name()))
        .collect();
    assert_eq!(
        ops,
        [
            (0, "UNKNOWN"),
            (1, "ANY"),
            (2, "ALL"),
            (3, "READ"),
            (4, "WRITE"),
            (5, "CREATE"),
            (6, "DELETE"),
            (7, "ALTER"),
            (8, "DESCRIBE"),
            (9, "CLUSTER_ACTION"),
            (10, "DESCRIBE_CONFIGS"),
            (11, "ALTER_CONFIGS"),
            (12, "IDEMPOTENT_WRITE"),
            (13, "CREATE_TOKENS"),
            (14, "DESCRIBE_TOKENS")
        ]
    );
    let perm: Vec<(i8, &str)> = AclPermissionType::ALL_VALUES
        .iter()
        .map(|v| (v.code(), v.name()))
        .collect();
    assert_eq!(
        perm,
        [(0, "UNKNOWN"), (1, "ANY"), (2, "DENY"), (3, "ALLOW")]
    );
}

#[test]
fn codes_and_names_round_trip_and_unknowns_decode_to_unknown() {
    for &op in AclOperation::ALL_VALUES {
        assert_eq!(AclOperation::from_code(op.code()), op);
        assert_eq!(AclOperation::from_name(op.name()), op);
        assert_eq!(AclOperation::from_name(&op.name().to_lowercase()), op);
    }
    for &rt in ResourceType::ALL_VALUES {
        assert_eq!(ResourceType::from_code(rt.code()), rt);
        assert_eq!(ResourceType::from_name(rt.name()), rt);
    }
    for &pt in PatternType::ALL_VALUES {
        assert_eq!(PatternType::from_code(pt.code()), pt);
    }
    for &p in AclPermissionType::ALL_VALUES {
        assert_eq!(AclPermissionType::from_code(p.code()), p);
    }
    assert_eq!(AclOperation::from_code(15), AclOperation::Unknown);
    assert_eq!(AclOperation::from_code(-1), AclOperation::Unknown);
    assert_eq!(ResourceType::from_code(8), ResourceType::Unknown);
    assert_eq!(PatternType::from_name("regex"), PatternType::Unknown);
    assert_eq!(AclPermissionType::from_code(4), AclPermissionType::Unknown);
    assert_eq!(
        ResourceType::TransactionalId.to_string(),
        "TRANSACTIONAL_ID"
    );
}

#[test]
fn supported_operations_are_kafkas() {
    use AclOperation::*;
    let sorted = |rt: ResourceType| {
        let mut v = rt.supported_operations().to_vec();
        v.sort();
        v
    };
    assert_eq!(
        sorted(ResourceType::Topic),
        [
            Read,
            Write,
            Create,
            Delete,
            Alter,
            Describe,
            DescribeConfigs,
            AlterConfigs
        ]
    );
    assert_eq!(
        sorted(ResourceType::Group),
        [Read, Delete, Describe, DescribeConfigs, AlterConfigs]
    );
    assert_eq!(
        sorted(ResourceType::Cluster),
        [
            Create,
            Alter,
            Describe,
            ClusterAction,
            DescribeConfigs,
            AlterConfigs,
            IdempotentWrite
        ]
    );
    assert_eq!(sorted(ResourceType::TransactionalId), [Write, Describe]);
    assert_eq!(sorted(ResourceType::DelegationToken), [Describe]);
    assert_eq!(sorted(ResourceType::User), [CreateTokens, DescribeTokens]);
    assert!(ResourceType::Any.supported_operations().is_empty());
}

#[test]
fn principals_parse_at_the_first_colon() {
    assert_eq!(
        crate::principal::parse_principal("User:alice").unwrap(),
        user("alice")
    );
    assert_eq!(
        crate::principal::parse_principal("User:CN=a,O=b:c").unwrap(),
        KafkaPrincipal::new("User", "CN=a,O=b:c")
    );
    assert_eq!(
        crate::principal::parse_principal("User:").unwrap(),
        user("")
    );
    assert!(crate::principal::parse_principal("alice").is_err());
    assert!(crate::principal::parse_principal("").is_err());
    assert_eq!(user("alice").to_string(), "User:alice");
    assert_eq!(KafkaPrincipal::ANONYMOUS.to_string(), "User:ANONYMOUS");
}

#[test]
fn host_address_is_written_as_java_does() {
    assert_eq!(
        host_address(IpAddr::V4(Ipv4Addr::new(192, 168, 1, 1))),
        "192.168.1.1"
    );
    assert_eq!(
        host_address(IpAddr::V6(Ipv6Addr::LOCALHOST)),
        "0:0:0:0:0:0:0:1"
    );
    let v6: Ipv6Addr = "2001:db8::ff00:42:8329".parse().unwrap();
    assert_eq!(host_address(IpAddr::V6(v6)), "2001:db8:0:0:0:ff00:42:8329");
    let mapped: Ipv6Addr = "::ffff:10.1.2.3".parse().unwrap();
    assert_eq!(host_address(IpAddr::V6(mapped)), "10.1.2.3");
}

#[test]
fn binding_serializes_with_stable_field_names() {
    let b = AclBinding::new(
        ResourcePattern::prefixed(ResourceType::TransactionalId, "tx-"),
        AccessControlEntry::new(
            "User:bob",
            "*",
            AclOperation::DescribeConfigs,
            AclPermissionType::Deny,
        ),
    );
    let json = serde_json::to_string(&b).unwrap();
    assert_eq!(
        json,
        r#"{"pattern":{"resource_type":"TRANSACTIONAL_ID","name":"tx-","pattern_type":"PREFIXED"},"entry":{"principal":"User:bob","host":"*","operation":"DESCRIBE_CONFIGS","permission":"DENY"}}"#
    );
    let back: AclBinding = serde_json::from_str(&json).unwrap();
    assert_eq!(back, b);
    assert!(serde_json::from_str::<AclBinding>(&json.replace("DENY", "MAYBE")).is_err());
}

#[test]
fn operation_bits_are_one_shifted_by_code() {
    assert_eq!(AclOperation::Read.bit(), 8);
    assert_eq!(AclOperation::DescribeTokens.bit(), 1 << 14);
    assert_eq!(operations_bitmask([]), 0);
}
