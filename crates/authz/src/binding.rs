//! ACL bindings (a resource pattern plus an access control entry), the filters of DescribeAcls
//! and DeleteAcls, and the checks CreateAcls and DeleteAcls make before anything is stored.
//!
//! Matching follows Kafka's `ResourcePatternFilter.matches` and `AccessControlEntryFilter.matches`:
//! a `None` field and an `ANY` value match everything; `MATCH` as the filter's pattern type
//! matches every stored pattern that would apply to the filter's name taken as a resource name
//! (the equal literal, the literal wildcard `*`, and prefixed patterns that are a prefix of it);
//! any other filter value must equal the stored one. Filters never apply the operation
//! implications of authorization (a filter for DESCRIBE does not match a READ ACL).
//!
//! Two levels of validity: [`AclBinding::check_storable`] is what every stored binding must
//! satisfy (the controller's check; the index relies on it), [`validate_new_binding`] adds what
//! the broker checks on CreateAcls (principal format, the cluster's one name).

use serde::{Deserialize, Serialize};

use crate::error::AclError;
use crate::principal::split_principal;
use crate::types::{AclOperation, AclPermissionType, PatternType, ResourceType};

/// The name of the one CLUSTER resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// The literal resource name that matches every resource of its type.
pub const WILDCARD_RESOURCE: &str = "*";

/// Which resources an ACL covers: a type, a name and how the name is matched.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ResourcePattern {
    /// The resource type.
    pub resource_type: ResourceType,
    /// The resource name, `*` (literal) for all, or a prefix (prefixed).
    pub name: String,
    /// How `name` is matched.
    pub pattern_type: PatternType,
}

impl ResourcePattern {
    /// A pattern of the given type, name and pattern type.
    pub fn new(
        resource_type: ResourceType,
        name: impl Into<String>,
        pattern_type: PatternType,
    ) -> Self {
        ResourcePattern {
            resource_type,
            name: name.into(),
            pattern_type,
        }
    }

    /// A literal pattern (one resource, or all of the type when `name` is `*`).
    pub fn literal(resource_type: ResourceType, name: impl Into<String>) -> Self {
        Self::new(resource_type, name, PatternType::Literal)
    }

    /// A prefixed pattern.
    pub fn prefixed(resource_type: ResourceType, prefix: impl Into<String>) -> Self {
        Self::new(resource_type, prefix, PatternType::Prefixed)
    }

    /// True when this stored pattern applies to the resource `name` of `resource_type` (literal
    /// equal, literal `*`, or prefixed with a prefix of `name`).
    pub fn covers(&self, resource_type: ResourceType, name: &str) -> bool {
        self.resource_type == resource_type
            && match self.pattern_type {
                PatternType::Literal => self.name == name || self.name == WILDCARD_RESOURCE,
                PatternType::Prefixed => name.starts_with(self.name.as_str()),
                _ => false,
            }
    }

    /// The filter that matches exactly this pattern.
    pub fn to_filter(&self) -> ResourcePatternFilter {
        ResourcePatternFilter {
            resource_type: self.resource_type,
            name: Some(self.name.clone()),
            pattern_type: self.pattern_type,
        }
    }
}

/// Who may (or may not) do what from where.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AccessControlEntry {
    /// `Type:name`, or `User:*` for every principal.
    pub principal: String,
    /// The client's host address as Java writes it ([`crate::host_address`]), or `*`.
    pub host: String,
    /// The operation; `ALL` covers every operation.
    pub operation: AclOperation,
    /// Allow or deny.
    pub permission: AclPermissionType,
}

impl AccessControlEntry {
    /// An entry with the given fields.
    pub fn new(
        principal: impl Into<String>,
        host: impl Into<String>,
        operation: AclOperation,
        permission: AclPermissionType,
    ) -> Self {
        AccessControlEntry {
            principal: principal.into(),
            host: host.into(),
            operation,
            permission,
        }
    }

    /// The filter that matches exactly this entry.
    pub fn to_filter(&self) -> AccessControlEntryFilter {
        AccessControlEntryFilter {
            principal: Some(self.principal.clone()),
            host: Some(self.host.clone()),
            operation: self.operation,
            permission: self.permission,
        }
    }
}

/// One ACL: a resource pattern and an entry. This is the unit CreateAcls creates, DescribeAcls
/// and DeleteAcls return, and the controller stores as a record (serialized with serde under
/// the field names `pattern` {`resource_type`, `name`, `pattern_type`} and `entry`
/// {`principal`, `host`, `operation`, `permission`}, enums by Kafka name).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AclBinding {
    /// The resources covered.
    pub pattern: ResourcePattern,
    /// Who, from where, what, allow or deny.
    pub entry: AccessControlEntry,
}

impl AclBinding {
    /// A binding of a pattern and an entry.
    pub fn new(pattern: ResourcePattern, entry: AccessControlEntry) -> Self {
        AclBinding { pattern, entry }
    }

    /// The filter that matches exactly this binding.
    pub fn to_filter(&self) -> AclBindingFilter {
        AclBindingFilter {
            pattern: self.pattern.to_filter(),
            entry: self.entry.to_filter(),
        }
    }

    /// What every stored binding satisfies (Kafka's controller check, `validateNewAcl`): a
    /// concrete resource type, a LITERAL or PREFIXED pattern, a concrete operation, ALLOW or
    /// DENY, and a non-empty name.
    pub fn check_storable(&self) -> Result<(), AclError> {
        if !self.pattern.resource_type.is_concrete() {
            return Err(AclError::InvalidResourceType(self.pattern.resource_type));
        }
        if !self.pattern.pattern_type.is_concrete() {
            return Err(AclError::InvalidPatternType(self.pattern.pattern_type));
        }
        if !self.entry.operation.is_concrete() {
            return Err(AclError::InvalidOperation(self.entry.operation));
        }
        if !self.entry.permission.is_concrete() {
            return Err(AclError::InvalidPermissionType(self.entry.permission));
        }
        if self.pattern.name.is_empty() {
            return Err(AclError::EmptyResourceName);
        }
        Ok(())
    }
}

/// The full CreateAcls check for one binding, as Kafka's broker and controller make it
/// together: the cluster resource must be named `kafka-cluster`, the name must not be empty,
/// the principal must be `Type:name`, and [`AclBinding::check_storable`] must hold. Each
/// failing binding is answered with its own error; the others are still created.
pub fn validate_new_binding(binding: &AclBinding) -> Result<(), AclError> {
    if binding.pattern.resource_type == ResourceType::Cluster
        && binding.pattern.name != CLUSTER_NAME
    {
        return Err(AclError::InvalidClusterName);
    }
    if binding.pattern.name.is_empty() {
        return Err(AclError::EmptyResourceName);
    }
    if split_principal(&binding.entry.principal).is_none() {
        return Err(AclError::InvalidPrincipal(binding.entry.principal.clone()));
    }
    binding.check_storable()
}

/// Selects resource patterns (the resource half of a DescribeAcls/DeleteAcls filter).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ResourcePatternFilter {
    /// `ANY`, or the one type to match.
    pub resource_type: ResourceType,
    /// `None` for any name; otherwise compared as the pattern type says.
    pub name: Option<String>,
    /// `ANY` (name equal, any pattern type), `MATCH` (patterns applying to the name), or the
    /// one pattern type to match (name equal).
    pub pattern_type: PatternType,
}

impl ResourcePatternFilter {
    /// Matches every pattern.
    pub const ANY: ResourcePatternFilter = ResourcePatternFilter {
        resource_type: ResourceType::Any,
        name: None,
        pattern_type: PatternType::Any,
    };

    /// A filter with the given fields.
    pub fn new(
        resource_type: ResourceType,
        name: Option<String>,
        pattern_type: PatternType,
    ) -> Self {
        ResourcePatternFilter {
            resource_type,
            name,
            pattern_type,
        }
    }

    /// True if the resource type or pattern type is `UNKNOWN`.
    pub fn is_unknown(&self) -> bool {
        self.resource_type.is_unknown() || self.pattern_type.is_unknown()
    }

    /// True when this filter selects `pattern` (Kafka's `ResourcePatternFilter.matches`).
    pub fn matches(&self, pattern: &ResourcePattern) -> bool {
        if self.resource_type != ResourceType::Any && self.resource_type != pattern.resource_type {
            return false;
        }
        let any_or_match = matches!(self.pattern_type, PatternType::Any | PatternType::Match);
        if !any_or_match && self.pattern_type != pattern.pattern_type {
            return false;
        }
        let Some(name) = self.name.as_deref() else {
            return true;
        };
        if self.pattern_type == PatternType::Any || self.pattern_type == pattern.pattern_type {
            return name == pattern.name;
        }
        // MATCH: would `pattern` apply to a resource called `name`?
        pattern.covers(pattern.resource_type, name)
    }
}

/// Selects access control entries (the entry half of a DescribeAcls/DeleteAcls filter).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AccessControlEntryFilter {
    /// `None` for any principal; otherwise the exact principal string.
    pub principal: Option<String>,
    /// `None` for any host; otherwise the exact host string (`*` matches only `*` entries).
    pub host: Option<String>,
    /// `ANY`, or the one operation to match (no implications).
    pub operation: AclOperation,
    /// `ANY`, or the one permission to match.
    pub permission: AclPermissionType,
}

impl AccessControlEntryFilter {
    /// Matches every entry.
    pub const ANY: AccessControlEntryFilter = AccessControlEntryFilter {
        principal: None,
        host: None,
        operation: AclOperation::Any,
        permission: AclPermissionType::Any,
    };

    /// A filter with the given fields.
    pub fn new(
        principal: Option<String>,
        host: Option<String>,
        operation: AclOperation,
        permission: AclPermissionType,
    ) -> Self {
        AccessControlEntryFilter {
            principal,
            host,
            operation,
            permission,
        }
    }

    /// True if the operation or permission is `UNKNOWN`.
    pub fn is_unknown(&self) -> bool {
        self.operation.is_unknown() || self.permission.is_unknown()
    }

    /// True when this filter selects `entry` (Kafka's `AccessControlEntryFilter.matches`).
    pub fn matches(&self, entry: &AccessControlEntry) -> bool {
        self.principal
            .as_deref()
            .is_none_or(|p| p == entry.principal)
            && self.host.as_deref().is_none_or(|h| h == entry.host)
            && (self.operation == AclOperation::Any || self.operation == entry.operation)
            && (self.permission == AclPermissionType::Any || self.permission == entry.permission)
    }
}

/// A DescribeAcls or DeleteAcls filter: both halves must match.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AclBindingFilter {
    /// Selects the resource pattern.
    pub pattern: ResourcePatternFilter,
    /// Selects the entry.
    pub entry: AccessControlEntryFilter,
}

impl AclBindingFilter {
    /// Matches every binding.
    pub const ANY: AclBindingFilter = AclBindingFilter {
        pattern: ResourcePatternFilter::ANY,
        entry: AccessControlEntryFilter::ANY,
    };

    /// A filter of the two halves.
    pub fn new(pattern: ResourcePatternFilter, entry: AccessControlEntryFilter) -> Self {
        AclBindingFilter { pattern, entry }
    }

    /// True if any part is `UNKNOWN`.
    pub fn is_unknown(&self) -> bool {
        self.pattern.is_unknown() || self.entry.is_unknown()
    }

    /// True when this filter selects `binding`.
    pub fn matches(&self, binding: &AclBinding) -> bool {
        self.pattern.matches(&binding.pattern) && self.entry.matches(&binding.entry)
    }
}

/// The DescribeAcls/DeleteAcls check of a filter (Kafka's `validateFilter` and the requests'
/// rejection of UNKNOWN fields): no part may be `UNKNOWN`.
pub fn validate_filter(filter: &AclBindingFilter) -> Result<(), AclError> {
    if filter.pattern.is_unknown() {
        return Err(AclError::UnknownPatternFilter);
    }
    if filter.entry.is_unknown() {
        return Err(AclError::UnknownEntryFilter);
    }
    Ok(())
}
