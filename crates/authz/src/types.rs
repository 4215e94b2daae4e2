//! The four enums of Kafka's ACL model with their wire codes (the `i8` fields of CreateAcls,
//! DescribeAcls, DeleteAcls and the `AccessControlEntryRecord`) and Kafka's names (what
//! `kafka-acls.sh` prints and parses), plus the answer of an authorization check.
//!
//! Codes and names are Kafka's own and must never change: clients send the codes, and the
//! serialized form of an [`crate::AclBinding`] uses the names. A code or name this crate does not
//! know decodes to `Unknown`, as in Kafka, so a newer client's value is rejected by validation
//! rather than by a decoding failure.

use serde::{Deserialize, Serialize};

/// Defines a Kafka ACL enum: its variants with code and name, `code`, `from_code`, `name`,
/// `from_name` (case-insensitive), `Display` and the list of all variants.
macro_rules! kafka_enum {
    (
        $(#[$meta:meta])*
        $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $code:literal, $kname:literal; )+ }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "SCREAMING_SNAKE_CASE")]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every variant, in code order.
            pub const ALL_VALUES: &'static [$name] = &[ $( $name::$variant, )+ ];

            /// The wire code.
            pub const fn code(self) -> i8 {
                match self { $( $name::$variant => $code, )+ }
            }

            /// The variant for a wire code; codes this crate does not know give `Unknown`.
            pub const fn from_code(code: i8) -> Self {
                match code { $( $code => $name::$variant, )+ _ => $name::Unknown }
            }

            /// Kafka's name (upper case with underscores).
            pub const fn name(self) -> &'static str {
                match self { $( $name::$variant => $kname, )+ }
            }

            /// The variant for a name, ignoring case as Kafka's `fromString` does; names this
            /// crate does not know give `Unknown`.
            pub fn from_name(name: &str) -> Self {
                $( if name.eq_ignore_ascii_case($kname) { return $name::$variant; } )+
                $name::Unknown
            }

            /// True for `Unknown`: a value this crate (or the sender) could not interpret.
            pub const fn is_unknown(self) -> bool {
                matches!(self, $name::Unknown)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

kafka_enum! {
    /// The kind of resource an ACL protects (Kafka's `ResourceType`).
    ResourceType {
        /// A code or name this crate does not know.
        Unknown = 0, "UNKNOWN";
        /// Filters only: any resource type.
        Any = 1, "ANY";
        /// A topic.
        Topic = 2, "TOPIC";
        /// A consumer group.
        Group = 3, "GROUP";
        /// The cluster; its only name is [`crate::CLUSTER_NAME`].
        Cluster = 4, "CLUSTER";
        /// A transactional id.
        TransactionalId = 5, "TRANSACTIONAL_ID";
        /// A delegation token.
        DelegationToken = 6, "DELEGATION_TOKEN";
        /// A user (for creating and describing delegation tokens on its behalf).
        User = 7, "USER";
    }
}

kafka_enum! {
    /// How an ACL's resource name is matched (Kafka's `PatternType`).
    PatternType {
        /// A code or name this crate does not know.
        Unknown = 0, "UNKNOWN";
        /// Filters only: any pattern type, the name compared exactly.
        Any = 1, "ANY";
        /// Filters only: every pattern that would match the filter's name as a resource name
        /// (equal literal, the literal wildcard `*`, prefixes of it).
        Match = 2, "MATCH";
        /// The name is the resource name, or `*` for every resource of the type.
        Literal = 3, "LITERAL";
        /// The name is a prefix of the resource names it covers.
        Prefixed = 4, "PREFIXED";
    }
}

kafka_enum! {
    /// What an ACL allows or denies (Kafka's `AclOperation`).
    AclOperation {
        /// A code or name this crate does not know.
        Unknown = 0, "UNKNOWN";
        /// Filters only: any operation.
        Any = 1, "ANY";
        /// Every operation.
        All = 2, "ALL";
        /// Read.
        Read = 3, "READ";
        /// Write.
        Write = 4, "WRITE";
        /// Create.
        Create = 5, "CREATE";
        /// Delete.
        Delete = 6, "DELETE";
        /// Alter.
        Alter = 7, "ALTER";
        /// Describe.
        Describe = 8, "DESCRIBE";
        /// Cluster actions (inter-broker requests).
        ClusterAction = 9, "CLUSTER_ACTION";
        /// Describe configs.
        DescribeConfigs = 10, "DESCRIBE_CONFIGS";
        /// Alter configs.
        AlterConfigs = 11, "ALTER_CONFIGS";
        /// Idempotent produce.
        IdempotentWrite = 12, "IDEMPOTENT_WRITE";
        /// Create delegation tokens.
        CreateTokens = 13, "CREATE_TOKENS";
        /// Describe delegation tokens.
        DescribeTokens = 14, "DESCRIBE_TOKENS";
    }
}

kafka_enum! {
    /// Whether an ACL allows or denies (Kafka's `AclPermissionType`).
    AclPermissionType {
        /// A code or name this crate does not know.
        Unknown = 0, "UNKNOWN";
        /// Filters only: either permission.
        Any = 1, "ANY";
        /// The ACL denies; a matching DENY always beats a matching ALLOW.
        Deny = 2, "DENY";
        /// The ACL allows.
        Allow = 3, "ALLOW";
    }
}

impl ResourceType {
    /// True for a type a stored ACL may have (not `Unknown` or `Any`).
    pub const fn is_concrete(self) -> bool {
        !matches!(self, ResourceType::Unknown | ResourceType::Any)
    }

    /// The operations Kafka defines for this resource type (`AclEntry.supportedOperations`), in
    /// code order: the bits of an authorized-operations mask. Empty for `Unknown` and `Any`.
    pub const fn supported_operations(self) -> &'static [AclOperation] {
        use AclOperation as Op;
        match self {
            ResourceType::Topic => &[
                Op::Read,
                Op::Write,
                Op::Create,
                Op::Delete,
                Op::Alter,
                Op::Describe,
                Op::DescribeConfigs,
                Op::AlterConfigs,
            ],
            ResourceType::Group => &[
                Op::Read,
                Op::Delete,
                Op::Describe,
                Op::DescribeConfigs,
                Op::AlterConfigs,
            ],
            ResourceType::Cluster => &[
                Op::Create,
                Op::Alter,
                Op::Describe,
                Op::ClusterAction,
                Op::DescribeConfigs,
                Op::AlterConfigs,
                Op::IdempotentWrite,
            ],
            ResourceType::TransactionalId => &[Op::Write, Op::Describe],
            ResourceType::DelegationToken => &[Op::Describe],
            ResourceType::User => &[Op::CreateTokens, Op::DescribeTokens],
            ResourceType::Unknown | ResourceType::Any => &[],
        }
    }

    /// The authorized-operations mask of every [`Self::supported_operations`]: what Kafka
    /// answers when no authorizer is configured (`AuthHelper.authorizedOperations`).
    pub fn all_operations_mask(self) -> i32 {
        self.supported_operations()
            .iter()
            .fold(0, |mask, op| mask | op.bit())
    }
}

impl AclOperation {
    /// True for an operation a stored ACL may have (not `Unknown` or `Any`).
    pub const fn is_concrete(self) -> bool {
        !matches!(self, AclOperation::Unknown | AclOperation::Any)
    }

    /// This operation's bit in an authorized-operations mask (`1 << code`).
    pub const fn bit(self) -> i32 {
        1i32 << (self.code() as u32)
    }
}

impl PatternType {
    /// True for a pattern type a stored ACL may have (`Literal` or `Prefixed`).
    pub const fn is_concrete(self) -> bool {
        matches!(self, PatternType::Literal | PatternType::Prefixed)
    }
}

impl AclPermissionType {
    /// True for a permission a stored ACL may have (`Allow` or `Deny`).
    pub const fn is_concrete(self) -> bool {
        matches!(self, AclPermissionType::Allow | AclPermissionType::Deny)
    }
}

/// The answer to one authorization check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AuthorizationResult {
    /// The principal may perform the operation.
    Allowed,
    /// The principal may not perform the operation.
    Denied,
}

impl AuthorizationResult {
    /// True for `Allowed`.
    pub const fn is_allowed(self) -> bool {
        matches!(self, AuthorizationResult::Allowed)
    }
}

/// The mask of Kafka's `Utils.to32BitField`: bit `1 << code` set for each operation.
pub fn operations_bitmask(ops: impl IntoIterator<Item = AclOperation>) -> i32 {
    ops.into_iter().fold(0, |mask, op| mask | op.bit())
}
