//! The one error of a server-side SASL exchange and the coarse kind the broker maps to a wire
//! error code. The message a client sees is the `Display` text; what the broker logs may add
//! [`AuthError::reason`], which never holds a secret and never says whether a user exists.

use crate::mechanism::Mechanism;

/// How the broker should answer a failed exchange (each kind names the Kafka error it maps to).
/// None of them is retriable with the same credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AuthErrorKind {
    /// `SASL_AUTHENTICATION_FAILED` (58): the client did not prove who it is. The broker answers,
    /// then closes the connection.
    AuthenticationFailed,
    /// `ILLEGAL_SASL_STATE` (34): a message arrived when the exchange expected none.
    IllegalSaslState,
    /// `UNSUPPORTED_SASL_MECHANISM` (33): the client asked for a mechanism ferry does not offer.
    UnsupportedSaslMechanism,
    /// `UNKNOWN_SERVER_ERROR` (-1): the broker itself failed (e.g. no secure randomness).
    Internal,
}

/// Why a server-side SASL exchange failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// Bad credentials or a malformed message: Kafka answers every such failure with one fixed
    /// text so that nothing (not even whether the user exists) leaks to the client. `reason` is
    /// for the broker's log only.
    #[error(
        "Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"
    )]
    InvalidCredentials {
        /// The mechanism of the exchange.
        mechanism: Mechanism,
        /// What went wrong, for logs; never a secret, never "unknown user".
        reason: &'static str,
    },
    /// A failure whose message Kafka deliberately sends to the client as is (its
    /// `SaslAuthenticationException`), e.g. PLAIN's "Invalid username or password".
    #[error("{message}")]
    Rejected {
        /// The text for the client.
        message: String,
    },
    /// A message arrived after the exchange had completed or failed.
    #[error("Unexpected SASL message: the {mechanism} exchange is already {state}")]
    IllegalState {
        /// The mechanism of the exchange.
        mechanism: Mechanism,
        /// "complete" or "failed".
        state: &'static str,
    },
    /// The client named a mechanism ferry does not support.
    #[error("Unsupported SASL mechanism {requested}")]
    UnsupportedMechanism {
        /// The name the client sent.
        requested: String,
    },
    /// An OAUTHBEARER token that is not valid: the client is told only RFC 7628's
    /// `invalid_token` status, the broker logs `reason`.
    #[error("{{\"status\":\"invalid_token\"}}")]
    InvalidToken {
        /// Why the token was refused (signature, expiry, issuer, ...), for logs.
        reason: String,
    },
    /// The broker could not complete the exchange for a reason of its own.
    #[error("Authentication failed: {reason}")]
    Internal {
        /// What failed, for logs and for the client.
        reason: &'static str,
    },
}

impl AuthError {
    /// The wire error this failure maps to.
    pub fn kind(&self) -> AuthErrorKind {
        match self {
            AuthError::InvalidCredentials { .. }
            | AuthError::Rejected { .. }
            | AuthError::InvalidToken { .. } => AuthErrorKind::AuthenticationFailed,
            AuthError::IllegalState { .. } => AuthErrorKind::IllegalSaslState,
            AuthError::UnsupportedMechanism { .. } => AuthErrorKind::UnsupportedSaslMechanism,
            AuthError::Internal { .. } => AuthErrorKind::Internal,
        }
    }

    /// The detail to log next to the client's message, if there is more than the message says.
    pub fn reason(&self) -> Option<&str> {
        match self {
            AuthError::InvalidCredentials { reason, .. } | AuthError::Internal { reason } => {
                Some(reason)
            }
            AuthError::InvalidToken { reason } => Some(reason),
            _ => None,
        }
    }

    /// The client's message as Kafka words it during re-authentication (KIP-368) when
    /// `reauthenticating` is true, else the same as `Display`.
    pub fn client_message(&self, reauthenticating: bool) -> String {
        match self {
            AuthError::InvalidCredentials { mechanism, .. } if reauthenticating => format!(
                "Authentication failed during re-authentication due to invalid credentials with SASL mechanism {mechanism}"
            ),
            other => other.to_string(),
        }
    }

    pub(crate) fn invalid(mechanism: impl Into<Mechanism>, reason: &'static str) -> Self {
        AuthError::InvalidCredentials {
            mechanism: mechanism.into(),
            reason,
        }
    }

    pub(crate) fn rejected(message: impl Into<String>) -> Self {
        AuthError::Rejected {
            message: message.into(),
        }
    }
}
