//! Kafka's authorization model for ferry: ACLs and the decisions of Kafka's
//! `StandardAuthorizer`, as pure code (no I/O, no clock, no locks).
//!
//! Why a crate of its own: the rules are Kafka's and must match it exactly (clients, admin
//! tools and operators' existing ACLs depend on them), they are easiest to test as plain
//! functions, and three parties use them without depending on each other: the broker's request
//! handlers (authorize, authorized operations, DescribeAcls), the CreateAcls/DeleteAcls path
//! (validation, filter matching), and the controller, which stores [`AclBinding`]s as records
//! (serde) and replays them into every broker's [`Authorizer`].
//!
//! What it holds:
//! - [`types`]: `ResourceType`, `PatternType`, `AclOperation`, `AclPermissionType` with Kafka's
//!   wire codes and names;
//! - [`binding`]: `ResourcePattern`, `AccessControlEntry`, `AclBinding`, the Describe/Delete
//!   filters and their matching, CreateAcls validation;
//! - [`principal`]: `KafkaPrincipal` and the host string ACLs compare with;
//! - [`authorizer`]: the `Authorizer` (super users, deny-over-allow, literal/wildcard/prefixed
//!   patterns, implied operations, `allow.everyone.if.no.acl.found`, authorized-operation
//!   masks, authorize-by-resource-type) and its incremental ACL updates.
//!
//! Not here: authentication (who the principal is), storing ACLs in the quorum, and mapping
//! [`AclErrorKind`] to wire error codes (the broker's one error-mapping module does that).

// Tests may read the real clock (clippy.toml's clock seam binds the code under test).
#![cfg_attr(test, allow(clippy::disallowed_methods))]
#![deny(missing_docs)]

pub mod authorizer;
pub mod binding;
pub mod error;
mod index;
pub mod principal;
pub mod types;

pub use authorizer::{
    parse_super_users, Authorizer, AuthorizerConfig, ALLOW_EVERYONE_IF_NO_ACL_FOUND_CONFIG,
    SUPER_USERS_CONFIG,
};
pub use binding::{
    validate_filter, validate_new_binding, AccessControlEntry, AccessControlEntryFilter,
    AclBinding, AclBindingFilter, ResourcePattern, ResourcePatternFilter, CLUSTER_NAME,
    WILDCARD_RESOURCE,
};
pub use error::{AclError, AclErrorKind};
pub use principal::{host_address, KafkaPrincipal, USER_TYPE, WILDCARD_HOST, WILDCARD_PRINCIPAL};
pub use types::{
    operations_bitmask, AclOperation, AclPermissionType, AuthorizationResult, PatternType,
    ResourceType,
};

#[cfg(test)]
mod tests;
