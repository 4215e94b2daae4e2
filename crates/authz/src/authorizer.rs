//! [`Authorizer`]: Kafka's `StandardAuthorizer` decision over an in-memory ACL set, with no I/O.
//!
//! The broker owns one, keeps it in step with the ACLs of the metadata image
//! ([`Authorizer::add_binding`], [`Authorizer::remove_binding`], [`Authorizer::replace_all`]),
//! and asks it per request. The decision for (principal, host, operation, resource):
//! 1. a super user is allowed;
//! 2. the ACLs applying to the resource are those of its type whose pattern is the literal
//!    name, the literal wildcard `*`, or a prefix of the name;
//! 3. an ACL matches when its principal is the caller or `User:*`, its host is the caller's or
//!    `*`, and its operation is `ALL`, the operation itself, or (ALLOW only) one implying it:
//!    READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS.
//!    A DENY is never widened: DENY READ does not deny DESCRIBE, DENY DESCRIBE does not deny
//!    READ, and only DENY ALL denies every operation;
//! 4. any matching DENY denies; else any matching ALLOW allows; else, if some ACL applies to the
//!    resource (for anyone), deny; else `allow.everyone.if.no.acl.found` decides.
//!
//! Invariant: a check never mutates, so the broker may share one `Authorizer` between request
//! threads behind an `RwLock` or swap a rebuilt one in (it is `Clone`).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;

use crate::binding::{AccessControlEntry, AclBinding, AclBindingFilter, WILDCARD_RESOURCE};
use crate::error::AclError;
use crate::index::{for_each_prefix_of, AclIndex, Entries};
use crate::principal::{KafkaPrincipal, WILDCARD_HOST, WILDCARD_PRINCIPAL};
use crate::types::{AclOperation, AclPermissionType, AuthorizationResult, ResourceType};

/// The broker configuration key listing super users.
pub const SUPER_USERS_CONFIG: &str = "super.users";

/// The broker configuration key deciding what happens when no ACL applies to a resource.
pub const ALLOW_EVERYONE_IF_NO_ACL_FOUND_CONFIG: &str = "allow.everyone.if.no.acl.found";

/// The resource name `authorize_by_resource_type` checks first, as Kafka's default
/// implementation does, so super users and the no-ACL rule are honoured.
const HARDCODED_PROBE_NAME: &str = "hardcode";

/// The authorizer's settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthorizerConfig {
    /// Principals allowed everything, whatever the ACLs say (`super.users`).
    pub super_users: BTreeSet<KafkaPrincipal>,
    /// The answer when no ACL applies to a resource (`allow.everyone.if.no.acl.found`,
    /// default false).
    pub allow_everyone_if_no_acl_found: bool,
}

impl AuthorizerConfig {
    /// Reads the two settings from their string values as Kafka does: `super.users` is a
    /// semicolon-separated list of `Type:name` (blanks trimmed, empty items skipped), and the
    /// flag is true only for `true` in any case. `None` means unset.
    pub fn from_properties(
        super_users: Option<&str>,
        allow_everyone_if_no_acl_found: Option<&str>,
    ) -> Result<Self, AclError> {
        let super_users = match super_users {
            Some(value) => parse_super_users(value)?,
            None => BTreeSet::new(),
        };
        let allow =
            allow_everyone_if_no_acl_found.is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        Ok(AuthorizerConfig {
            super_users,
            allow_everyone_if_no_acl_found: allow,
        })
    }

    /// True when `principal` is a super user.
    pub fn is_super_user(&self, principal: &KafkaPrincipal) -> bool {
        self.super_users.contains(principal)
    }

    fn no_acl_result(&self) -> AuthorizationResult {
        if self.allow_everyone_if_no_acl_found {
            AuthorizationResult::Allowed
        } else {
            AuthorizationResult::Denied
        }
    }
}

/// Parses a `super.users` value: `User:admin;User:ops` (items trimmed, empty items skipped).
pub fn parse_super_users(value: &str) -> Result<BTreeSet<KafkaPrincipal>, AclError> {
    value
        .split(';')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| {
            crate::principal::parse_principal(item).map_err(|_| AclError::InvalidConfig {
                key: SUPER_USERS_CONFIG,
                value: value.to_owned(),
                reason: format!("{item:?} is not of the form principalType:principalName"),
            })
        })
        .collect()
}

/// Kafka's `StandardAuthorizer` over an in-memory set of ACLs (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct Authorizer {
    config: AuthorizerConfig,
    acls: AclIndex,
}

impl Authorizer {
    /// An authorizer with no ACLs.
    pub fn new(config: AuthorizerConfig) -> Self {
        Authorizer {
            config,
            acls: AclIndex::default(),
        }
    }

    /// An authorizer holding `bindings` (duplicates stored once). Fails on the first binding
    /// that is not storable (see [`AclBinding::check_storable`]).
    pub fn with_bindings(
        config: AuthorizerConfig,
        bindings: impl IntoIterator<Item = AclBinding>,
    ) -> Result<Self, AclError> {
        let mut authorizer = Self::new(config);
        authorizer.replace_all(bindings)?;
        Ok(authorizer)
    }

    /// The settings.
    pub fn config(&self) -> &AuthorizerConfig {
        &self.config
    }

    /// Replaces the settings (a dynamic `super.users` change), keeping the ACLs.
    pub fn set_config(&mut self, config: AuthorizerConfig) {
        self.config = config;
    }

    /// The number of stored ACLs.
    pub fn len(&self) -> usize {
        self.acls.len()
    }

    /// True when no ACL is stored.
    pub fn is_empty(&self) -> bool {
        self.acls.len() == 0
    }

    /// Stores one ACL; `Ok(false)` if it was already stored. Rejects a binding that is not
    /// storable (an UNKNOWN/ANY/MATCH part or an empty name) without changing anything.
    pub fn add_binding(&mut self, binding: AclBinding) -> Result<bool, AclError> {
        self.acls.add(binding)
    }

    /// Removes one ACL; false if it was not stored.
    pub fn remove_binding(&mut self, binding: &AclBinding) -> bool {
        self.acls.remove(binding)
    }

    /// Replaces every ACL with `bindings` (a metadata snapshot). On error the old ACLs stay.
    pub fn replace_all(
        &mut self,
        bindings: impl IntoIterator<Item = AclBinding>,
    ) -> Result<(), AclError> {
        let mut fresh = AclIndex::default();
        for binding in bindings {
            fresh.add(binding)?;
        }
        self.acls = fresh;
        Ok(())
    }

    /// The stored ACLs `filter` selects (DescribeAcls), in a deterministic order.
    pub fn describe(&self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        self.acls.matching(filter)
    }

    /// Removes and returns the stored ACLs `filter` selects (DeleteAcls applied locally; in a
    /// cluster the controller decides and the broker then calls [`Self::remove_binding`]).
    pub fn delete(&mut self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        let matched = self.acls.matching(filter);
        for binding in &matched {
            self.acls.remove(binding);
        }
        matched
    }

    /// Every stored ACL, in a deterministic order.
    pub fn bindings(&self) -> Vec<AclBinding> {
        self.acls.matching(&AclBindingFilter::ANY)
    }

    /// May `principal`, connecting from `host` (as [`crate::host_address`] writes it), perform
    /// `operation` on the resource `resource_name` of `resource_type`? See the module docs.
    pub fn authorize(
        &self,
        principal: &KafkaPrincipal,
        host: &str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: &str,
    ) -> AuthorizationResult {
        if self.config.is_super_user(principal) {
            return AuthorizationResult::Allowed;
        }
        let Some(type_acls) = self.acls.of_type(resource_type) else {
            return self.config.no_acl_result();
        };
        let mut applies = false;
        let mut allowed = false;
        let denied = type_acls
            .for_each_covering(resource_name, |_, _, entries| {
                applies = true;
                for entry in entries {
                    match entry_result(entry, principal, host, operation) {
                        Some(AuthorizationResult::Denied) => return ControlFlow::Break(()),
                        Some(AuthorizationResult::Allowed) => allowed = true,
                        None => {}
                    }
                }
                ControlFlow::Continue(())
            })
            .is_break();
        if denied {
            AuthorizationResult::Denied
        } else if allowed {
            AuthorizationResult::Allowed
        } else if applies {
            AuthorizationResult::Denied
        } else {
            self.config.no_acl_result()
        }
    }

    /// The authorized-operations mask of Metadata (topics), DescribeGroups and DescribeCluster:
    /// bit `1 << code` for each operation of [`ResourceType::supported_operations`] that
    /// [`Self::authorize`] allows on this resource. 0 for `UNKNOWN`/`ANY` types.
    pub fn authorized_operations(
        &self,
        principal: &KafkaPrincipal,
        host: &str,
        resource_type: ResourceType,
        resource_name: &str,
    ) -> i32 {
        resource_type
            .supported_operations()
            .iter()
            .filter(|&&op| {
                self.authorize(principal, host, op, resource_type, resource_name)
                    .is_allowed()
            })
            .fold(0, |mask, op| mask | op.bit())
    }

    /// Could `principal` from `host` perform `operation` on *some* resource of `resource_type`?
    /// (Kafka's `Authorizer.authorizeByResourceType`, used for idempotent producers without
    /// IDEMPOTENT_WRITE on the cluster.) Allowed when a probe resource name is allowed (so super
    /// users and the no-ACL rule count), or when the caller's ALLOW ACLs for `operation` (or
    /// ALL; no implications) include a literal not denied by an equal literal DENY or a covering
    /// prefixed DENY, or a prefix not covered by a prefixed DENY. A literal `*` DENY denies;
    /// otherwise a literal `*` ALLOW allows. False for `UNKNOWN`/`ANY` type or operation.
    pub fn authorize_by_resource_type(
        &self,
        principal: &KafkaPrincipal,
        host: &str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool {
        if !resource_type.is_concrete() || !operation.is_concrete() {
            return false;
        }
        if self
            .authorize(
                principal,
                host,
                operation,
                resource_type,
                HARDCODED_PROBE_NAME,
            )
            .is_allowed()
        {
            return true;
        }
        let Some(type_acls) = self.acls.of_type(resource_type) else {
            return false;
        };
        let relevant = |entry: &AccessControlEntry| {
            (entry.host == host || entry.host == WILDCARD_HOST)
                && (crate::principal::names(principal, &entry.principal)
                    || entry.principal == WILDCARD_PRINCIPAL)
                && (entry.operation == operation || entry.operation == AclOperation::All)
        };
        // name -> (allowed, denied) for the caller and this operation.
        let collect = |map: &'_ BTreeMap<String, Entries>| -> Vec<(String, bool, bool)> {
            map.iter()
                .filter_map(|(name, entries)| {
                    let mut allow = false;
                    let mut deny = false;
                    for entry in entries.iter().filter(|e| relevant(e)) {
                        match entry.permission {
                            AclPermissionType::Allow => allow = true,
                            AclPermissionType::Deny => deny = true,
                            _ => {}
                        }
                    }
                    (allow || deny).then(|| (name.clone(), allow, deny))
                })
                .collect()
        };
        let literal = collect(&type_acls.literal);
        let prefixed = collect(&type_acls.prefixed);
        let wildcard = literal
            .iter()
            .find(|(name, _, _)| name == WILDCARD_RESOURCE);
        if let Some(&(_, allow, deny)) = wildcard {
            if deny {
                return false;
            }
            if allow {
                return true;
            }
        }
        let denied_prefixes: BTreeMap<String, ()> = prefixed
            .iter()
            .filter(|(_, _, deny)| *deny)
            .map(|(name, _, _)| (name.clone(), ()))
            .collect();
        let covered_by_prefix_deny = |name: &str| {
            for_each_prefix_of(&denied_prefixes, name, |_, _| ControlFlow::Break(())).is_break()
        };
        let literal_ok = literal
            .iter()
            .filter(|(name, allow, deny)| *allow && !*deny && name != WILDCARD_RESOURCE)
            .any(|(name, _, _)| !covered_by_prefix_deny(name));
        let prefixed_ok = prefixed
            .iter()
            .filter(|(_, allow, _)| *allow)
            .any(|(name, _, _)| !covered_by_prefix_deny(name));
        literal_ok || prefixed_ok
    }
}

/// What one ACL says about (principal, host, operation), its resource already known to apply:
/// `None` when it does not match (Kafka's `StandardAuthorizerData.findResult`).
fn entry_result(
    entry: &AccessControlEntry,
    principal: &KafkaPrincipal,
    host: &str,
    operation: AclOperation,
) -> Option<AuthorizationResult> {
    if entry.principal != WILDCARD_PRINCIPAL
        && !crate::principal::names(principal, &entry.principal)
    {
        return None;
    }
    if entry.host != WILDCARD_HOST && entry.host != host {
        return None;
    }
    let allow = entry.permission == AclPermissionType::Allow;
    if entry.operation != AclOperation::All {
        let matches = if allow {
            match operation {
                AclOperation::Describe => implies_describe(entry.operation),
                AclOperation::DescribeConfigs => implies_describe_configs(entry.operation),
                op => op == entry.operation,
            }
        } else {
            operation == entry.operation
        };
        if !matches {
            return None;
        }
    }
    match entry.permission {
        AclPermissionType::Allow => Some(AuthorizationResult::Allowed),
        AclPermissionType::Deny => Some(AuthorizationResult::Denied),
        // Not storable; a stored ACL is never of these.
        AclPermissionType::Any | AclPermissionType::Unknown => None,
    }
}

/// Operations whose ALLOW also allows DESCRIBE.
fn implies_describe(op: AclOperation) -> bool {
    matches!(
        op,
        AclOperation::Describe
            | AclOperation::Read
            | AclOperation::Write
            | AclOperation::Delete
            | AclOperation::Alter
    )
}

/// Operations whose ALLOW also allows DESCRIBE_CONFIGS.
fn implies_describe_configs(op: AclOperation) -> bool {
    matches!(
        op,
        AclOperation::DescribeConfigs | AclOperation::AlterConfigs
    )
}
