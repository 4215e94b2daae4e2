//! [`ScramServer`]: the broker's side of one SCRAM exchange, a state machine fed one client
//! message at a time.
//!
//! ```text
//!  AwaitingClientFirst --client-first--> AwaitingClientFinal --client-final--> Complete
//!          |                                    |
//!          +------------- any error ------------+--------------------------> Failed
//! ```
//!
//! An unknown user gets a fake credential (a salt in Kafka's format derived from a per-process
//! secret and the user name, so it is stable across attempts, and 4096 iterations, the default
//! of Kafka's tools) and the exchange goes on
//! exactly as for a wrong password: same server-first shape, same proof computation, same error at
//! the same step. A requested authorization id different from the user name is refused *before*
//! the credential lookup, so that answer does not depend on whether the user exists either.
//! (Kafka itself fails an unknown user at the first message; ferry does not, on purpose.)

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use subtle::ConstantTimeEq;

use super::credential::ScramCredential;
use super::crypto::{auth_message, xor, Alg, KeyLengthFault};
use super::messages::{self, ClientFirst, ServerFirst};
use super::{kafka_style_salt, os_random, random_nonce, SALT_SEED_LEN};
use crate::error::AuthError;
use crate::mechanism::{Mechanism, ScramMechanism};
use crate::principal::KafkaPrincipal;
use crate::{SaslServer, ServerReply};

/// Where a [`ScramServer`] finds a user's credential (the broker's SCRAM credential cache, built
/// from the metadata log's UserScramCredentialRecords).
pub trait ScramCredentialSource: Send + Sync {
    /// `username`'s credential for `mechanism`, or `None` if the user has none.
    fn scram_credential(
        &self,
        username: &str,
        mechanism: ScramMechanism,
    ) -> Option<ScramCredential>;
}

impl<T: ScramCredentialSource + ?Sized> ScramCredentialSource for Arc<T> {
    fn scram_credential(
        &self,
        username: &str,
        mechanism: ScramMechanism,
    ) -> Option<ScramCredential> {
        (**self).scram_credential(username, mechanism)
    }
}

impl<T: ScramCredentialSource + ?Sized> ScramCredentialSource for &T {
    fn scram_credential(
        &self,
        username: &str,
        mechanism: ScramMechanism,
    ) -> Option<ScramCredential> {
        (**self).scram_credential(username, mechanism)
    }
}

/// A map keyed by user name and mechanism is a credential source (handy for tests and small
/// static set-ups).
impl ScramCredentialSource for HashMap<(String, ScramMechanism), ScramCredential> {
    fn scram_credential(
        &self,
        username: &str,
        mechanism: ScramMechanism,
    ) -> Option<ScramCredential> {
        self.get(&(username.to_owned(), mechanism)).cloned()
    }
}

/// What the server remembers between the first and the final client message.
struct Exchange {
    username: String,
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
    /// Client nonce followed by server nonce.
    nonce: String,
    credential: ScramCredential,
    /// False when `credential` is the fake one of an unknown user.
    known_user: bool,
}

enum State {
    AwaitingClientFirst,
    AwaitingClientFinal(Box<Exchange>),
    Complete,
    Failed,
}

/// The server side of one SCRAM-SHA-256 or SCRAM-SHA-512 exchange.
pub struct ScramServer<S> {
    mechanism: ScramMechanism,
    alg: Alg,
    source: S,
    /// A server nonce given by the caller instead of a random one.
    fixed_nonce: Option<String>,
    state: State,
}

impl<S> fmt::Debug for ScramServer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::AwaitingClientFirst => "awaiting client-first",
            State::AwaitingClientFinal(_) => "awaiting client-final",
            State::Complete => "complete",
            State::Failed => "failed",
        };
        f.debug_struct("ScramServer")
            .field("mechanism", &self.mechanism)
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

impl<S: ScramCredentialSource> ScramServer<S> {
    /// A server for `mechanism` that looks credentials up in `source` and makes a random nonce.
    pub fn new(mechanism: ScramMechanism, source: S) -> Self {
        ScramServer {
            mechanism,
            alg: Alg::from(mechanism),
            source,
            fixed_nonce: None,
            state: State::AwaitingClientFirst,
        }
    }

    /// A server whose nonce is `server_nonce` (printable ASCII without commas), for tests that
    /// replay a known exchange. Never use a fixed nonce on a real connection.
    pub fn with_nonce(
        mechanism: ScramMechanism,
        source: S,
        server_nonce: impl Into<String>,
    ) -> Self {
        ScramServer {
            fixed_nonce: Some(server_nonce.into()),
            ..Self::new(mechanism, source)
        }
    }

    /// Runs the exchange with another hash (RFC 5802's SHA-1 example).
    #[cfg(test)]
    pub(crate) fn with_alg(mut self, alg: Alg) -> Self {
        self.alg = alg;
        self
    }

    fn invalid(&self, reason: &'static str) -> AuthError {
        AuthError::invalid(self.mechanism, reason)
    }

    fn on_client_first(&mut self, message: &[u8]) -> Result<(Box<Exchange>, Vec<u8>), AuthError> {
        let text = std::str::from_utf8(message)
            .map_err(|_| self.invalid("client-first message is not UTF-8"))?;
        let first: ClientFirst =
            messages::parse_client_first(text).map_err(|reason| self.invalid(reason))?;
        let token_auth = first
            .extensions
            .iter()
            .any(|(k, v)| k == "tokenauth" && v.eq_ignore_ascii_case("true"));
        if token_auth {
            return Err(
                self.invalid("delegation-token authentication (tokenauth) is not supported")
            );
        }
        if first.authzid.as_ref().is_some_and(|a| *a != first.username) {
            return Err(AuthError::rejected(
                "Authentication failed: Client requested an authorization id that is different from username",
            ));
        }
        let (credential, known_user) = match self
            .source
            .scram_credential(&first.username, self.mechanism)
        {
            Some(credential) => (credential, true),
            None => (self.fake_credential(&first.username)?, false),
        };
        if credential.iterations < ScramMechanism::MIN_ITERATIONS {
            return Err(self.invalid("stored credential has fewer iterations than the minimum"));
        }
        let server_nonce = match self.fixed_nonce.take() {
            Some(nonce) => nonce,
            None => random_nonce().map_err(|_| AuthError::Internal {
                reason: "no secure random bytes for a nonce",
            })?,
        };
        let nonce = format!("{}{}", first.nonce, server_nonce);
        let server_first = messages::format_server_first(&ServerFirst {
            nonce: nonce.clone(),
            salt: credential.salt.clone(),
            iterations: credential.iterations,
        });
        let exchange = Exchange {
            nonce,
            username: first.username,
            gs2_header: first.gs2_header,
            client_first_bare: first.bare,
            server_first: server_first.clone(),
            credential,
            known_user,
        };
        Ok((Box::new(exchange), server_first.into_bytes()))
    }

    fn on_client_final(&self, ex: &Exchange, message: &[u8]) -> Result<ServerReply, AuthError> {
        let text = std::str::from_utf8(message)
            .map_err(|_| self.invalid("client-final message is not UTF-8"))?;
        let last = messages::parse_client_final(text).map_err(|reason| self.invalid(reason))?;
        if last.channel_binding != ex.gs2_header.as_bytes() {
            return Err(self.invalid("channel binding (c=) does not match the GS2 header"));
        }
        if last.nonce != ex.nonce {
            return Err(self.invalid("nonce of the client-final message does not match"));
        }
        let alg = self.alg;
        let stored_key = &ex.credential.stored_key;
        let auth = auth_message(&ex.client_first_bare, &ex.server_first, &last.without_proof);
        let client_signature = alg
            .hmac(stored_key, auth.as_bytes())
            .map_err(crypto_fault)?;
        if last.proof.len() != client_signature.len() {
            return Err(self.invalid("client proof has the wrong length"));
        }
        let client_key = xor(&last.proof, &client_signature);
        let computed = alg.stored_key(&client_key);
        let matches: bool = computed.ct_eq(stored_key).into();
        if !(matches && ex.known_user) {
            return Err(self.invalid("invalid client proof"));
        }
        let server_signature = alg
            .hmac(&ex.credential.server_key, auth.as_bytes())
            .map_err(crypto_fault)?;
        Ok(ServerReply::Complete {
            response: messages::format_server_final(&server_signature).into_bytes(),
            principal: KafkaPrincipal::user(ex.username.clone()),
        })
    }

    /// The stand-in credential of an unknown user.
    fn fake_credential(&self, username: &str) -> Result<ScramCredential, AuthError> {
        let key = fake_credential_key().ok_or(AuthError::Internal {
            reason: "no secure random bytes for a fake credential",
        })?;
        let derive = |label: &str| {
            let data = format!("{label}\0{}\0{username}", self.mechanism);
            self.alg.hmac(key, data.as_bytes())
        };
        let mut seed = [0u8; SALT_SEED_LEN];
        let derived = derive("salt").map_err(crypto_fault)?;
        seed.iter_mut().zip(&derived).for_each(|(s, d)| *s = *d);
        Ok(ScramCredential {
            salt: kafka_style_salt(&seed),
            stored_key: derive("stored key").map_err(crypto_fault)?,
            server_key: derive("server key").map_err(crypto_fault)?,
            iterations: ScramMechanism::MIN_ITERATIONS,
        })
    }
}

/// The impossible HMAC key failure, as an error rather than a panic.
fn crypto_fault(_: KeyLengthFault) -> AuthError {
    AuthError::Internal {
        reason: "HMAC key setup failed",
    }
}

/// A secret drawn once per process from which unknown users' fake salts are derived: the same
/// name gets the same salt on every attempt, as a real user would, yet nobody can predict it.
fn fake_credential_key() -> Option<&'static [u8; 32]> {
    static KEY: OnceLock<[u8; 32]> = OnceLock::new();
    if let Some(key) = KEY.get() {
        return Some(key);
    }
    let mut fresh = [0u8; 32];
    os_random(&mut fresh).ok()?;
    Some(KEY.get_or_init(|| fresh))
}

impl<S: ScramCredentialSource> SaslServer for ScramServer<S> {
    fn mechanism(&self) -> Mechanism {
        self.mechanism.mechanism()
    }

    fn step(&mut self, client_message: &[u8]) -> Result<ServerReply, AuthError> {
        // Failed unless a branch below says otherwise: an error ends the exchange.
        match std::mem::replace(&mut self.state, State::Failed) {
            State::AwaitingClientFirst => {
                let (exchange, reply) = self.on_client_first(client_message)?;
                self.state = State::AwaitingClientFinal(exchange);
                Ok(ServerReply::Challenge(reply))
            }
            State::AwaitingClientFinal(exchange) => {
                let reply = self.on_client_final(&exchange, client_message)?;
                self.state = State::Complete;
                Ok(reply)
            }
            State::Complete => {
                self.state = State::Complete;
                Err(AuthError::IllegalState {
                    mechanism: self.mechanism.mechanism(),
                    state: "complete",
                })
            }
            State::Failed => Err(AuthError::IllegalState {
                mechanism: self.mechanism.mechanism(),
                state: "failed",
            }),
        }
    }

    fn is_complete(&self) -> bool {
        matches!(self.state, State::Complete)
    }
}
