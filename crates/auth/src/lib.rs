//! Authentication for ferry, as Kafka clients and operators know it: SASL/PLAIN, SASL/SCRAM
//! (SHA-256 and SHA-512), the JAAS text that configures them, and the mapping of a TLS client
//! certificate's subject to a principal (`ssl.principal.mapping.rules`).
//!
//! Why a crate of its own, and why pure: every decision here is a function of bytes received and
//! credentials looked up, so it is tested here without sockets, tokio or a broker. The broker owns
//! the connection, the SaslHandshake/SaslAuthenticate requests and the credential store; it drives
//! a [`SaslServer`] one client message at a time and maps an [`AuthError`] to a wire error with
//! [`AuthError::kind`]. Authorization (ACLs) lives elsewhere: this crate only says *who* a
//! connection is ([`KafkaPrincipal`]), never what it may do.
//!
//! One SCRAM exchange, as the broker (server) and another broker (client) drive it:
//!
//! ```
//! use std::collections::HashMap;
//! use ferry_auth::{SaslServer, ScramClient, ScramCredential, ScramMechanism, ScramServer};
//! use ferry_auth::{Secret, ServerReply};
//!
//! let m = ScramMechanism::Sha256;
//! let mut credentials = HashMap::new();
//! let alice = ScramCredential::from_password(m, "alice-secret", 4096)?;
//! credentials.insert(("alice".to_owned(), m), alice);
//!
//! let mut server = ScramServer::new(m, credentials);
//! let mut client = ScramClient::new(m, "alice", Secret::new("alice-secret"));
//! let ServerReply::Challenge(server_first) = server.step(&client.client_first()?)? else {
//!     unreachable!("SCRAM's first reply is a challenge")
//! };
//! let client_final = client.handle_server_first(&server_first)?;
//! let ServerReply::Complete { response, principal } = server.step(&client_final)? else {
//!     unreachable!("a valid proof completes the exchange")
//! };
//! client.handle_server_final(&response)?;
//! assert_eq!(principal.to_string(), "User:alice");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! What must always hold:
//! - a secret (password, salted password, stored key) never appears in `Debug` output or in an
//!   error message ([`Secret`], the hand-written `Debug` of [`ScramCredential`]);
//! - a SCRAM exchange for an unknown user runs the same steps and computations as one with a wrong
//!   password and fails with the same error at the same step;
//! - nothing read from a client or from configuration text is `unwrap`ped: malformed input is an
//!   error value.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;
pub mod jaas;
mod mechanism;
pub mod oauthbearer;
pub mod plain;
mod principal;
pub mod scram;
mod secret;
pub mod ssl_mapping;

pub use error::{AuthError, AuthErrorKind};
pub use jaas::{JaasError, JaasLogin, PlainJaasConfig, ScramJaasConfig};
pub use mechanism::{Mechanism, ScramMechanism};
pub use oauthbearer::{JwkSet, JwksError, JwksSource, OAuthBearerServer, OAuthBearerValidator};
pub use plain::{PlainAuthenticator, PlainServer, PlainUsers};
pub use principal::{KafkaPrincipal, PrincipalParseError};
pub use scram::{
    ClientError, CredentialError, ScramClient, ScramCredential, ScramCredentialSource, ScramServer,
};
pub use secret::Secret;
pub use ssl_mapping::{distinguished_name, DnAttribute, DnValue, SslPrincipalMapper};

/// One SASL mechanism's server side of an exchange, driven by the broker one client message
/// (the `auth_bytes` of a SaslAuthenticate request) at a time.
pub trait SaslServer: Send {
    /// The mechanism this server speaks.
    fn mechanism(&self) -> Mechanism;

    /// Consumes the client's next message and says what to answer. After an error the exchange
    /// is over: every later call fails with [`AuthError::IllegalState`].
    fn step(&mut self, client_message: &[u8]) -> Result<ServerReply, AuthError>;

    /// Whether the exchange ended with the client authenticated.
    fn is_complete(&self) -> bool;

    /// When the credential the client proved itself with stops being valid (milliseconds since
    /// the epoch), for mechanisms whose credentials expire (an OAUTHBEARER token's `exp`).
    fn credential_expires_at_ms(&self) -> Option<i64> {
        None
    }
}

/// What a [`SaslServer`] answers to one client message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerReply {
    /// More is needed: send these bytes to the client and wait for its next message.
    Challenge(Vec<u8>),
    /// The client is authenticated as `principal`; send `response` (possibly empty) as the last
    /// SaslAuthenticate response.
    Complete {
        /// The final server message (SCRAM's `v=` signature; empty for PLAIN).
        response: Vec<u8>,
        /// Who the client is.
        principal: KafkaPrincipal,
    },
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use super::*;

    #[test]
    fn servers_of_every_mechanism_fit_behind_one_trait_object() {
        let mut users = PlainUsers::new();
        users.insert("alice", &Secret::new("pw"));
        let credentials: Arc<HashMap<(String, ScramMechanism), ScramCredential>> =
            Arc::new(HashMap::new());
        let servers: Vec<Box<dyn SaslServer>> = vec![
            Box::new(PlainServer::new(users)),
            Box::new(ScramServer::new(
                ScramMechanism::Sha256,
                credentials.clone(),
            )),
            Box::new(ScramServer::new(ScramMechanism::Sha512, credentials)),
            Box::new(OAuthBearerServer::new(
                Arc::new(OAuthBearerValidator {
                    jwks: JwksSource::Fixed(Arc::new(JwkSet::default())),
                    expected_audience: Vec::new(),
                    expected_issuer: None,
                    sub_claim: "sub".into(),
                    clock_skew_seconds: 30,
                }),
                0,
            )),
        ];
        let mechanisms: Vec<Mechanism> = servers.iter().map(|s| s.mechanism()).collect();
        assert_eq!(mechanisms, Mechanism::ALL);
    }
}
