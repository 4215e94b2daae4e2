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
//! What must always hold:
//! - a secret (password, salted password, stored key) never appears in `Debug` output or in an
//!   error message ([`Secret`], the hand-written `Debug` of [`ScramCredential`]);
//! - a SCRAM exchange for an unknown user runs the same steps and computations as one with a wrong
//!   password and fails with the same error at the same step;
//! - nothing read from a client or from configuration text is `unwrap`ped: malformed input is an
//!   error value.

mod error;
pub mod jaas;
mod mechanism;
pub mod plain;
mod principal;
pub mod scram;
mod secret;
pub mod ssl_mapping;

pub use error::{AuthError, AuthErrorKind};
pub use mechanism::{Mechanism, ScramMechanism};
pub use plain::{PlainAuthenticator, PlainServer, PlainUsers};
pub use principal::{KafkaPrincipal, PrincipalParseError};
pub use scram::{
    ClientError, CredentialError, ScramClient, ScramCredential, ScramCredentialSource, ScramServer,
};
pub use secret::Secret;

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
