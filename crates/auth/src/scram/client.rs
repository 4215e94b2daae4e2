//! [`ScramClient`]: the client's side of a SCRAM exchange, for ferry's own connections to other
//! brokers and for tests. No channel binding (GS2 header `n,,`), no authorization id.
//!
//! ```text
//!  Initial --client_first--> AwaitingServerFirst --handle_server_first--> AwaitingServerFinal
//!     --handle_server_final--> Complete        (any error: Failed)
//! ```
//!
//! The client refuses a server-first message whose iteration count is outside Kafka's bounds:
//! below 4096 it would weaken the password's protection, above 16384 a hostile server could make
//! the client spin.

use std::fmt;

use subtle::ConstantTimeEq;

use super::crypto::{auth_message, xor, Alg, KeyLengthFault};
use super::messages::{self, ServerFinal};
use super::random_nonce;
use crate::mechanism::ScramMechanism;
use crate::secret::Secret;

/// The GS2 header ferry's client sends: no channel binding, no authorization id.
const GS2_HEADER: &str = "n,,";

/// Why the client side of a SCRAM exchange failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The server's message does not follow RFC 5802's grammar.
    #[error("malformed SCRAM server message: {0}")]
    Malformed(&'static str),
    /// The server ended the exchange with `e=<value>`.
    #[error("SCRAM server error: {0}")]
    Server(String),
    /// The server's nonce does not extend the client's.
    #[error("SCRAM server nonce does not start with the client nonce")]
    NonceMismatch,
    /// The server asked for an iteration count outside Kafka's bounds.
    #[error("SCRAM server requested {iterations} iterations, outside [{min}, {max}]")]
    IterationsOutOfRange {
        /// What the server asked for.
        iterations: u32,
        /// Kafka's minimum.
        min: u32,
        /// Kafka's maximum.
        max: u32,
    },
    /// The server's signature is wrong: it does not know the password's keys.
    #[error("SCRAM server signature does not verify")]
    InvalidServerSignature,
    /// A method was called out of order.
    #[error("SCRAM client called out of order: {0}")]
    IllegalState(&'static str),
    /// The operating system gave no random bytes for the nonce.
    #[error("no secure random bytes for a nonce")]
    Random,
    /// HMAC refused a key (cannot happen).
    #[error("HMAC key setup failed")]
    Crypto,
}

impl From<KeyLengthFault> for ClientError {
    fn from(_: KeyLengthFault) -> Self {
        ClientError::Crypto
    }
}

enum State {
    Initial,
    AwaitingServerFirst {
        client_first_bare: String,
        nonce: String,
    },
    AwaitingServerFinal {
        server_signature: Vec<u8>,
    },
    Complete,
    Failed,
}

/// The client side of one SCRAM exchange.
pub struct ScramClient {
    mechanism: ScramMechanism,
    alg: Alg,
    username: String,
    password: Secret,
    fixed_nonce: Option<String>,
    state: State,
}

impl fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramClient")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .field("password", &self.password)
            .finish_non_exhaustive()
    }
}

impl ScramClient {
    /// A client that will authenticate as `username` with `password`, with a random nonce.
    pub fn new(mechanism: ScramMechanism, username: impl Into<String>, password: Secret) -> Self {
        ScramClient {
            mechanism,
            alg: Alg::from(mechanism),
            username: username.into(),
            password,
            fixed_nonce: None,
            state: State::Initial,
        }
    }

    /// A client whose nonce is `nonce` (printable ASCII without commas), for tests that replay a
    /// known exchange.
    pub fn with_nonce(
        mechanism: ScramMechanism,
        username: impl Into<String>,
        password: Secret,
        nonce: impl Into<String>,
    ) -> Self {
        ScramClient {
            fixed_nonce: Some(nonce.into()),
            ..Self::new(mechanism, username, password)
        }
    }

    /// Runs the exchange with another hash (RFC 5802's SHA-1 example).
    #[cfg(test)]
    pub(crate) fn with_alg(mut self, alg: Alg) -> Self {
        self.alg = alg;
        self
    }

    /// The mechanism of the exchange.
    pub fn mechanism(&self) -> ScramMechanism {
        self.mechanism
    }

    /// The client-first message (`n,,n=<user>,r=<nonce>`), the first SaslAuthenticate payload.
    pub fn client_first(&mut self) -> Result<Vec<u8>, ClientError> {
        if !matches!(self.state, State::Initial) {
            self.state = State::Failed;
            return Err(ClientError::IllegalState("client_first called twice"));
        }
        let nonce = match self.fixed_nonce.take() {
            Some(nonce) => nonce,
            None => random_nonce().map_err(|_| {
                self.state = State::Failed;
                ClientError::Random
            })?,
        };
        let client_first_bare = messages::format_client_first_bare(&self.username, &nonce);
        let message = format!("{GS2_HEADER}{client_first_bare}");
        self.state = State::AwaitingServerFirst {
            client_first_bare,
            nonce,
        };
        Ok(message.into_bytes())
    }

    /// Reads the server-first message and returns the client-final message (with the proof).
    pub fn handle_server_first(&mut self, server_first: &[u8]) -> Result<Vec<u8>, ClientError> {
        let State::AwaitingServerFirst {
            client_first_bare,
            nonce,
        } = std::mem::replace(&mut self.state, State::Failed)
        else {
            return Err(ClientError::IllegalState(
                "handle_server_first called before client_first or twice",
            ));
        };
        let text = std::str::from_utf8(server_first)
            .map_err(|_| ClientError::Malformed("server-first message is not UTF-8"))?;
        let first = messages::parse_server_first(text).map_err(ClientError::Malformed)?;
        if !first.nonce.starts_with(&nonce) || first.nonce.len() == nonce.len() {
            return Err(ClientError::NonceMismatch);
        }
        let (min, max) = (
            ScramMechanism::MIN_ITERATIONS,
            ScramMechanism::MAX_ITERATIONS,
        );
        if !(min..=max).contains(&first.iterations) {
            return Err(ClientError::IterationsOutOfRange {
                iterations: first.iterations,
                min,
                max,
            });
        }
        let alg = self.alg;
        let salted = alg.hi(
            self.password.expose().as_bytes(),
            &first.salt,
            first.iterations,
        )?;
        let client_key = alg.client_key(&salted)?;
        let stored_key = alg.stored_key(&client_key);
        let without_proof = messages::format_client_final_without_proof(GS2_HEADER, &first.nonce);
        let auth = auth_message(&client_first_bare, text, &without_proof);
        let client_signature = alg.hmac(&stored_key, auth.as_bytes())?;
        let proof = xor(&client_key, &client_signature);
        let server_signature = alg.hmac(&alg.server_key(&salted)?, auth.as_bytes())?;
        self.state = State::AwaitingServerFinal { server_signature };
        Ok(format!("{without_proof},p={}", super::b64_encode(&proof)).into_bytes())
    }

    /// Reads the server-final message and checks the server's signature: only a server that
    /// holds the user's ServerKey can produce it.
    pub fn handle_server_final(&mut self, server_final: &[u8]) -> Result<(), ClientError> {
        let State::AwaitingServerFinal { server_signature } =
            std::mem::replace(&mut self.state, State::Failed)
        else {
            return Err(ClientError::IllegalState(
                "handle_server_final called before handle_server_first or twice",
            ));
        };
        let text = std::str::from_utf8(server_final)
            .map_err(|_| ClientError::Malformed("server-final message is not UTF-8"))?;
        match messages::parse_server_final(text).map_err(ClientError::Malformed)? {
            ServerFinal::Error(error) => Err(ClientError::Server(error)),
            ServerFinal::Verifier(signature) => {
                let ok: bool = signature.ct_eq(&server_signature).into();
                if !ok {
                    return Err(ClientError::InvalidServerSignature);
                }
                self.state = State::Complete;
                Ok(())
            }
        }
    }

    /// Whether the server has proven itself and the exchange is over.
    pub fn is_complete(&self) -> bool {
        matches!(self.state, State::Complete)
    }
}
