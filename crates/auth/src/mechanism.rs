//! The SASL mechanisms ferry serves, under the names Kafka clients send in SaslHandshake
//! (`sasl.mechanism`). GSSAPI (Kerberos) is not offered.

use std::fmt;
use std::str::FromStr;

use crate::error::AuthError;

/// A SASL mechanism ferry can authenticate with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mechanism {
    /// `PLAIN` (RFC 4616): username and password in the clear (use it over TLS).
    Plain,
    /// `SCRAM-SHA-256` (RFC 7677).
    ScramSha256,
    /// `SCRAM-SHA-512`.
    ScramSha512,
    /// `OAUTHBEARER` (RFC 7628) with signed JWTs checked against a JWKS (KIP-768).
    OAuthBearer,
}

impl Mechanism {
    /// Every mechanism, in the order ferry lists them in a SaslHandshake response.
    pub const ALL: [Mechanism; 4] = [
        Mechanism::Plain,
        Mechanism::ScramSha256,
        Mechanism::ScramSha512,
        Mechanism::OAuthBearer,
    ];

    /// Kafka's name for the mechanism, e.g. `SCRAM-SHA-256`.
    pub const fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
            Mechanism::OAuthBearer => "OAUTHBEARER",
        }
    }

    /// The mechanism with Kafka's name `name` (case-sensitive, as Kafka compares them).
    pub fn from_name(name: &str) -> Option<Mechanism> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The SCRAM variant, if this is a SCRAM mechanism.
    pub const fn scram(self) -> Option<ScramMechanism> {
        match self {
            Mechanism::Plain | Mechanism::OAuthBearer => None,
            Mechanism::ScramSha256 => Some(ScramMechanism::Sha256),
            Mechanism::ScramSha512 => Some(ScramMechanism::Sha512),
        }
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mechanism {
    type Err = AuthError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Mechanism::from_name(s).ok_or_else(|| AuthError::UnsupportedMechanism {
            requested: s.to_owned(),
        })
    }
}

/// One of Kafka's two SCRAM mechanisms, with the limits Kafka puts on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScramMechanism {
    /// SCRAM-SHA-256.
    Sha256,
    /// SCRAM-SHA-512.
    Sha512,
}

impl ScramMechanism {
    /// Both SCRAM mechanisms.
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha256, ScramMechanism::Sha512];

    /// Fewest iterations Kafka accepts for a credential (and a client accepts from a server).
    pub const MIN_ITERATIONS: u32 = 4096;
    /// Most iterations Kafka accepts for a credential.
    pub const MAX_ITERATIONS: u32 = 16384;

    /// The SASL mechanism.
    pub const fn mechanism(self) -> Mechanism {
        match self {
            ScramMechanism::Sha256 => Mechanism::ScramSha256,
            ScramMechanism::Sha512 => Mechanism::ScramSha512,
        }
    }

    /// Kafka's name, e.g. `SCRAM-SHA-512`.
    pub const fn name(self) -> &'static str {
        self.mechanism().name()
    }

    /// The mechanism's number on the wire (AlterUserScramCredentials, DescribeUserScramCredentials
    /// and the metadata log's UserScramCredentialRecord): 1 for SHA-256, 2 for SHA-512.
    pub const fn wire_type(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    /// The mechanism with wire number `value` (0, Kafka's UNKNOWN, and anything else give `None`).
    pub const fn from_wire_type(value: i8) -> Option<ScramMechanism> {
        match value {
            1 => Some(ScramMechanism::Sha256),
            2 => Some(ScramMechanism::Sha512),
            _ => None,
        }
    }

    /// Length in bytes of the hash, hence of a salted password, StoredKey, ServerKey and proof.
    pub const fn hash_len(self) -> usize {
        match self {
            ScramMechanism::Sha256 => 32,
            ScramMechanism::Sha512 => 64,
        }
    }
}

impl From<ScramMechanism> for Mechanism {
    fn from(value: ScramMechanism) -> Self {
        value.mechanism()
    }
}

impl fmt::Display for ScramMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in Mechanism::ALL {
            assert_eq!(Mechanism::from_name(m.name()), Some(m));
            assert_eq!(m.name().parse::<Mechanism>().unwrap(), m);
        }
        assert_eq!(Mechanism::from_name("scram-sha-256"), None);
        let err = "GSSAPI".parse::<Mechanism>().unwrap_err();
        assert_eq!(err.to_string(), "Unsupported SASL mechanism GSSAPI");
        assert_eq!(err.kind(), crate::AuthErrorKind::UnsupportedSaslMechanism);
    }

    #[test]
    fn scram_wire_types_match_kafka() {
        assert_eq!(ScramMechanism::Sha256.wire_type(), 1);
        assert_eq!(ScramMechanism::Sha512.wire_type(), 2);
        for m in ScramMechanism::ALL {
            assert_eq!(ScramMechanism::from_wire_type(m.wire_type()), Some(m));
            assert_eq!(m.mechanism().scram(), Some(m));
        }
        assert_eq!(ScramMechanism::from_wire_type(0), None);
        assert_eq!(Mechanism::Plain.scram(), None);
    }
}
