//! What a connection knows about how its client reached the broker: the listener (whose
//! endpoints Metadata, FindCoordinator and DescribeCluster answer with), its security protocol,
//! and on TLS with a verified client certificate the certificate's subject.
//!
//! Authentication (server::authentication) turns it into a principal: SASL's on `SASL_PLAINTEXT`
//! / `SASL_SSL` listeners, else the certificate's subject mapped by `ssl.principal.mapping.rules`,
//! else `User:ANONYMOUS`.

use std::sync::Arc;

pub use ferry_config::listeners::SecurityProtocol;

/// The security facts of one connection, fixed once its TLS handshake (if any) is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionSecurity {
    /// The listener name the client connected on (`PLAINTEXT`, `CLIENT`, ...).
    pub listener: Arc<str>,
    pub protocol: SecurityProtocol,
    /// The RFC 2253 subject of the client's verified certificate (`CN=app,O=Example`), on TLS
    /// listeners with `ssl.client.auth` requested or required.
    pub peer_cert_subject: Option<String>,
}

impl ConnectionSecurity {
    /// A plaintext connection on listener `listener`.
    pub fn plaintext(listener: &str) -> Self {
        Self {
            listener: listener.into(),
            protocol: SecurityProtocol::Plaintext,
            peer_cert_subject: None,
        }
    }
}
