//! What a connection knows about how its client reached the broker: the listener (whose
//! endpoints Metadata, FindCoordinator and DescribeCluster answer with), its security protocol,
//! and on TLS with a verified client certificate the certificate's subject.
//!
//! This is the seam for authentication: SASL (on `SASL_PLAINTEXT` / `SASL_SSL` listeners) and
//! `ssl.principal.mapping.rules` turn it into a principal; until then no principal is derived.

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
