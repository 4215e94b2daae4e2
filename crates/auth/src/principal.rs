//! [`KafkaPrincipal`]: who a connection is, once authenticated, written `type:name` as in Kafka
//! ACLs and logs (`User:alice`). A connection that did not authenticate (PLAINTEXT, or TLS without
//! a client certificate) is [`KafkaPrincipal::ANONYMOUS`].

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

/// An authenticated identity: a principal type (`User` for everything this crate produces) and a
/// name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KafkaPrincipal {
    principal_type: Cow<'static, str>,
    name: Cow<'static, str>,
}

impl KafkaPrincipal {
    /// The principal type of users, `User`.
    pub const USER_TYPE: &'static str = "User";

    /// `User:ANONYMOUS`, the principal of a connection that did not authenticate.
    pub const ANONYMOUS: KafkaPrincipal = KafkaPrincipal {
        principal_type: Cow::Borrowed(Self::USER_TYPE),
        name: Cow::Borrowed("ANONYMOUS"),
    };

    /// A principal of any type.
    pub fn new(principal_type: impl Into<String>, name: impl Into<String>) -> Self {
        KafkaPrincipal {
            principal_type: Cow::Owned(principal_type.into()),
            name: Cow::Owned(name.into()),
        }
    }

    /// `User:<name>`.
    pub fn user(name: impl Into<String>) -> Self {
        KafkaPrincipal {
            principal_type: Cow::Borrowed(Self::USER_TYPE),
            name: Cow::Owned(name.into()),
        }
    }

    /// The principal type, e.g. `User`.
    pub fn principal_type(&self) -> &str {
        &self.principal_type
    }

    /// The name, e.g. `alice`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether this is `User:ANONYMOUS`.
    pub fn is_anonymous(&self) -> bool {
        *self == Self::ANONYMOUS
    }
}

impl fmt::Display for KafkaPrincipal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.principal_type, self.name)
    }
}

/// A principal string that is not `type:name`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected a string in format principalType:principalName but got '{input}'")]
pub struct PrincipalParseError {
    /// The text that did not parse.
    pub input: String,
}

impl FromStr for KafkaPrincipal {
    type Err = PrincipalParseError;

    /// Parses `type:name`, splitting at the first colon (the name may contain more), as Kafka's
    /// `SecurityUtils.parseKafkaPrincipal` does; the type must not be empty.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once(':') {
            Some((principal_type, name)) if !principal_type.is_empty() => {
                Ok(KafkaPrincipal::new(principal_type, name))
            }
            _ => Err(PrincipalParseError {
                input: s.to_owned(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_parse_round_trip() {
        let alice = KafkaPrincipal::user("alice");
        assert_eq!(alice.to_string(), "User:alice");
        assert_eq!("User:alice".parse::<KafkaPrincipal>().unwrap(), alice);
        let odd: KafkaPrincipal = "Group:a:b".parse().unwrap();
        assert_eq!(odd.principal_type(), "Group");
        assert_eq!(odd.name(), "a:b");
    }

    #[test]
    fn anonymous_is_user_anonymous() {
        assert_eq!(KafkaPrincipal::ANONYMOUS.to_string(), "User:ANONYMOUS");
        assert!(KafkaPrincipal::user("ANONYMOUS").is_anonymous());
        assert!(!KafkaPrincipal::user("alice").is_anonymous());
    }

    #[test]
    fn malformed_principals_are_errors() {
        for bad in ["", "alice", ":alice"] {
            let err = bad.parse::<KafkaPrincipal>().unwrap_err();
            assert!(
                err.to_string().contains("principalType:principalName"),
                "{err}"
            );
        }
    }
}
