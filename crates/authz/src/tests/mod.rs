//! Unit tests by area, each named after the Kafka rule it protects.

mod authorize_test;
mod by_resource_type_test;
mod filter_test;
mod index_test;
mod types_test;

use crate::*;

/// `User:<name>`.
pub(crate) fn user(name: &str) -> KafkaPrincipal {
    KafkaPrincipal::user(name)
}

/// A binding from its parts.
pub(crate) fn acl(
    resource_type: ResourceType,
    name: &str,
    pattern_type: PatternType,
    principal: &str,
    host: &str,
    operation: AclOperation,
    permission: AclPermissionType,
) -> AclBinding {
    AclBinding::new(
        ResourcePattern::new(resource_type, name, pattern_type),
        AccessControlEntry::new(principal, host, operation, permission),
    )
}

/// An ALLOW on a topic pattern for a principal from any host.
pub(crate) fn allow(
    name: &str,
    pattern_type: PatternType,
    principal: &str,
    operation: AclOperation,
) -> AclBinding {
    acl(
        ResourceType::Topic,
        name,
        pattern_type,
        principal,
        "*",
        operation,
        AclPermissionType::Allow,
    )
}

/// A DENY on a topic pattern for a principal from any host.
pub(crate) fn deny(
    name: &str,
    pattern_type: PatternType,
    principal: &str,
    operation: AclOperation,
) -> AclBinding {
    acl(
        ResourceType::Topic,
        name,
        pattern_type,
        principal,
        "*",
        operation,
        AclPermissionType::Deny,
    )
}

/// An authorizer with default settings holding `bindings`.
pub(crate) fn authorizer(bindings: Vec<AclBinding>) -> Authorizer {
    Authorizer::with_bindings(AuthorizerConfig::default(), bindings).unwrap()
}
