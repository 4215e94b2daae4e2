//! The crate's one error type, [`AclError`]. Every variant is a caller's mistake that a retry
//! cannot fix; the broker answers it per ACL (CreateAcls) or per filter (DeleteAcls) with the
//! Kafka error [`AclError::kind`] names, and the [`Display`](std::fmt::Display) text as the
//! error message (the wording follows Kafka's where Kafka has one).

use crate::types::{AclOperation, AclPermissionType, PatternType, ResourceType};

/// What the broker should answer for an [`AclError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AclErrorKind {
    /// Kafka's INVALID_REQUEST (code 42): a binding or filter the broker cannot accept.
    InvalidRequest,
    /// A broker configuration value (`super.users`, `allow.everyone.if.no.acl.found`) is
    /// malformed: a start-up error, never sent to a client.
    InvalidConfig,
}

/// Why a binding, filter or authorizer setting was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AclError {
    /// A binding's resource type is `UNKNOWN` or `ANY`.
    #[error("Invalid resourceType {0}")]
    InvalidResourceType(ResourceType),
    /// A binding's pattern type is not `LITERAL` or `PREFIXED`.
    #[error("Invalid patternType {0}")]
    InvalidPatternType(PatternType),
    /// A binding's operation is `UNKNOWN` or `ANY`.
    #[error("Invalid operation {0}")]
    InvalidOperation(AclOperation),
    /// A binding's permission is not `ALLOW` or `DENY`.
    #[error("Invalid permissionType {0}")]
    InvalidPermissionType(AclPermissionType),
    /// A binding's resource name is empty.
    #[error("Invalid empty resource name")]
    EmptyResourceName,
    /// A CLUSTER binding whose name is not `kafka-cluster`.
    #[error("The only valid name for the CLUSTER resource is kafka-cluster")]
    InvalidClusterName,
    /// A principal that is not `Type:name`.
    #[error("expected a string in format principalType:principalName but got {0}")]
    InvalidPrincipal(String),
    /// A filter with an `UNKNOWN` resource type or pattern type.
    #[error("Unknown patternFilter.")]
    UnknownPatternFilter,
    /// A filter with an `UNKNOWN` operation or permission.
    #[error("Unknown entryFilter.")]
    UnknownEntryFilter,
    /// A malformed authorizer configuration value.
    #[error("invalid value {value:?} for {key}: {reason}")]
    InvalidConfig {
        /// The configuration key.
        key: &'static str,
        /// The value given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl AclError {
    /// What the broker should answer (or, for configuration, that start-up must fail).
    pub fn kind(&self) -> AclErrorKind {
        match self {
            AclError::InvalidConfig { .. } => AclErrorKind::InvalidConfig,
            _ => AclErrorKind::InvalidRequest,
        }
    }
}
