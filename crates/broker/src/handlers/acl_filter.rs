//! Kafka's ACL binding filters (`AclBindingFilter`: `ResourcePatternFilter` plus
//! `AccessControlEntryFilter`), as DescribeAcls and DeleteAcls use them to select stored
//! bindings. Kept in one file: it is to merge with the authorizer's matching (ferry-authz).
//!
//! Rules (Kafka's `matches`):
//! - a resource type, operation or permission of ANY matches every value, else only its own;
//! - a `None` name, principal or host matches every value;
//! - pattern type ANY matches bindings of any pattern type with the exact name;
//! - pattern type MATCH matches a LITERAL binding with the same name or the wildcard `*`, and a
//!   PREFIXED binding whose name is a prefix of the filter's name;
//! - LITERAL or PREFIXED match only bindings of that pattern type with the exact name.
//!
//! A filter with an UNKNOWN code (0, or a code Kafka does not define) matches nothing and is
//! refused by the APIs (INVALID_REQUEST).

use ferry_cluster::security::acl_codes::{
    ANY, OPERATION_LAST, PATTERN_LITERAL, PATTERN_MATCH, PATTERN_PREFIXED, PERMISSION_ALLOW,
    RESOURCE_USER, WILDCARD,
};
use ferry_cluster::security::AclBinding;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    pub resource_type: i8,
    pub resource_name: Option<String>,
    pub pattern_type: i8,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: i8,
    pub permission_type: i8,
}

impl AclFilter {
    /// Whether any code is UNKNOWN (Kafka's `isUnknown`): such a filter is refused.
    pub fn is_unknown(&self) -> bool {
        !(ANY..=RESOURCE_USER).contains(&self.resource_type)
            || !(ANY..=PATTERN_PREFIXED).contains(&self.pattern_type)
            || !(ANY..=OPERATION_LAST).contains(&self.operation)
            || !(ANY..=PERMISSION_ALLOW).contains(&self.permission_type)
    }

    pub fn matches(&self, binding: &AclBinding) -> bool {
        !self.is_unknown() && self.matches_resource(binding) && self.matches_entry(binding)
    }

    fn matches_resource(&self, b: &AclBinding) -> bool {
        if self.resource_type != ANY && self.resource_type != b.resource_type {
            return false;
        }
        if !matches!(self.pattern_type, ANY | PATTERN_MATCH) && self.pattern_type != b.pattern_type
        {
            return false;
        }
        let Some(name) = &self.resource_name else {
            return true;
        };
        if self.pattern_type == ANY || self.pattern_type == b.pattern_type {
            return *name == b.resource_name;
        }
        match b.pattern_type {
            PATTERN_LITERAL => *name == b.resource_name || b.resource_name == WILDCARD,
            PATTERN_PREFIXED => name.starts_with(&b.resource_name),
            _ => false,
        }
    }

    fn matches_entry(&self, b: &AclBinding) -> bool {
        self.principal.as_ref().is_none_or(|p| *p == b.principal)
            && self.host.as_ref().is_none_or(|h| *h == b.host)
            && (self.operation == ANY || self.operation == b.operation)
            && (self.permission_type == ANY || self.permission_type == b.permission_type)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_cluster::security::acl_codes::{
        PERMISSION_DENY, RESOURCE_CLUSTER, RESOURCE_TOPIC, UNKNOWN,
    };

    const READ: i8 = 3;
    const WRITE: i8 = 4;
    const GROUP: i8 = 3;

    fn binding(name: &str, pattern_type: i8) -> AclBinding {
        AclBinding {
            resource_type: RESOURCE_TOPIC,
            resource_name: name.into(),
            pattern_type,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: READ,
            permission_type: PERMISSION_ALLOW,
        }
    }

    fn any() -> AclFilter {
        AclFilter {
            resource_type: ANY,
            resource_name: None,
            pattern_type: ANY,
            principal: None,
            host: None,
            operation: ANY,
            permission_type: ANY,
        }
    }

    fn named(name: &str, pattern_type: i8) -> AclFilter {
        AclFilter {
            resource_name: Some(name.into()),
            pattern_type,
            ..any()
        }
    }

    #[test]
    fn the_any_filter_matches_every_binding() {
        for b in [
            binding("t", PATTERN_LITERAL),
            binding("*", PATTERN_LITERAL),
            binding("pre", PATTERN_PREFIXED),
        ] {
            assert!(any().matches(&b), "{b:?}");
        }
    }

    /// (filter name, filter pattern type, binding name, binding pattern type, matches)
    const NAME_TABLE: &[(&str, i8, &str, i8, bool)] = &[
        // ANY: exact name, any pattern type.
        ("orders", ANY, "orders", PATTERN_LITERAL, true),
        ("orders", ANY, "orders", PATTERN_PREFIXED, true),
        ("orders", ANY, "*", PATTERN_LITERAL, false),
        ("orders", ANY, "ord", PATTERN_PREFIXED, false),
        // MATCH: literal equal, the wildcard, prefixes.
        ("orders", PATTERN_MATCH, "orders", PATTERN_LITERAL, true),
        ("orders", PATTERN_MATCH, "*", PATTERN_LITERAL, true),
        ("orders", PATTERN_MATCH, "ord", PATTERN_PREFIXED, true),
        ("orders", PATTERN_MATCH, "orders", PATTERN_PREFIXED, true),
        (
            "orders",
            PATTERN_MATCH,
            "orders-eu",
            PATTERN_PREFIXED,
            false,
        ),
        ("orders", PATTERN_MATCH, "other", PATTERN_LITERAL, false),
        ("orders", PATTERN_MATCH, "order", PATTERN_LITERAL, false),
        // LITERAL and PREFIXED: that pattern type, exact name.
        ("orders", PATTERN_LITERAL, "orders", PATTERN_LITERAL, true),
        ("orders", PATTERN_LITERAL, "*", PATTERN_LITERAL, false),
        ("orders", PATTERN_LITERAL, "orders", PATTERN_PREFIXED, false),
        ("ord", PATTERN_PREFIXED, "ord", PATTERN_PREFIXED, true),
        ("orders", PATTERN_PREFIXED, "ord", PATTERN_PREFIXED, false),
        ("ord", PATTERN_PREFIXED, "ord", PATTERN_LITERAL, false),
    ];

    #[test]
    fn names_match_by_the_filters_pattern_type() {
        for &(name, pattern, b_name, b_pattern, expected) in NAME_TABLE {
            let got = named(name, pattern).matches(&binding(b_name, b_pattern));
            assert_eq!(got, expected, "{name}/{pattern} vs {b_name}/{b_pattern}");
        }
    }

    #[test]
    fn no_name_matches_every_name_of_the_pattern_type() {
        let filter = AclFilter {
            pattern_type: PATTERN_PREFIXED,
            ..any()
        };
        assert!(filter.matches(&binding("x", PATTERN_PREFIXED)));
        assert!(!filter.matches(&binding("x", PATTERN_LITERAL)));
    }

    #[test]
    fn entry_fields_match_exactly_unless_any_or_absent() {
        let b = binding("t", PATTERN_LITERAL);
        let cases = [
            (
                AclFilter {
                    resource_type: RESOURCE_TOPIC,
                    ..any()
                },
                true,
            ),
            (
                AclFilter {
                    resource_type: GROUP,
                    ..any()
                },
                false,
            ),
            (
                AclFilter {
                    resource_type: RESOURCE_CLUSTER,
                    ..any()
                },
                false,
            ),
            (
                AclFilter {
                    principal: Some("User:alice".into()),
                    ..any()
                },
                true,
            ),
            (
                AclFilter {
                    principal: Some("User:bob".into()),
                    ..any()
                },
                false,
            ),
            (
                AclFilter {
                    host: Some("*".into()),
                    ..any()
                },
                true,
            ),
            (
                AclFilter {
                    host: Some("10.0.0.1".into()),
                    ..any()
                },
                false,
            ),
            (
                AclFilter {
                    operation: READ,
                    ..any()
                },
                true,
            ),
            (
                AclFilter {
                    operation: WRITE,
                    ..any()
                },
                false,
            ),
            (
                AclFilter {
                    permission_type: PERMISSION_ALLOW,
                    ..any()
                },
                true,
            ),
            (
                AclFilter {
                    permission_type: PERMISSION_DENY,
                    ..any()
                },
                false,
            ),
        ];
        for (filter, expected) in cases {
            assert_eq!(filter.matches(&b), expected, "{filter:?}");
        }
    }

    #[test]
    fn unknown_codes_make_a_filter_unknown_and_match_nothing() {
        let b = binding("t", PATTERN_LITERAL);
        for filter in [
            AclFilter {
                resource_type: UNKNOWN,
                ..any()
            },
            AclFilter {
                pattern_type: UNKNOWN,
                ..any()
            },
            AclFilter {
                operation: UNKNOWN,
                ..any()
            },
            AclFilter {
                permission_type: UNKNOWN,
                ..any()
            },
            AclFilter {
                operation: 42,
                ..any()
            },
            AclFilter {
                resource_type: -3,
                ..any()
            },
        ] {
            assert!(filter.is_unknown(), "{filter:?}");
            assert!(!filter.matches(&b));
        }
        assert!(!any().is_unknown());
    }
}
