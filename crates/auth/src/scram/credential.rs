//! [`ScramCredential`]: what a broker keeps to verify a SCRAM user (RFC 5802 section 2.2's
//! "authentication information"), and its derivations.
//!
//! Kafka's admin clients send AlterUserScramCredentials with a salt and a *salted password*
//! (Hi() already applied), never the password; the broker turns the salted password into
//! StoredKey and ServerKey and forgets it ([`ScramCredential::from_salted_password`]). Kafka's
//! bounds apply to every credential: at least 4096 and at most 16384 iterations.

use std::fmt;

use super::crypto::{Alg, KeyLengthFault};
use crate::mechanism::ScramMechanism;

/// A SCRAM credential: salt, StoredKey, ServerKey and iteration count for one user and mechanism.
/// Its `Debug` hides every field, as Kafka's `toString` does.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    /// The salt given to Hi().
    pub salt: Vec<u8>,
    /// H(ClientKey): checks a client's proof without being able to produce one.
    pub stored_key: Vec<u8>,
    /// HMAC(SaltedPassword, "Server Key"): signs the server's final message.
    pub server_key: Vec<u8>,
    /// Hi()'s iteration count.
    pub iterations: u32,
}

impl fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "ScramCredential(salt=[hidden], stored_key=[hidden], server_key=[hidden], iterations=[hidden])",
        )
    }
}

/// Why a credential could not be made. The broker answers AlterUserScramCredentials with
/// `UNACCEPTABLE_CREDENTIAL` (66) and this text (whose first words are Kafka's).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CredentialError {
    /// Fewer iterations than Kafka's minimum.
    #[error("Too few iterations: {iterations} is below the minimum {min} for {mechanism}")]
    TooFewIterations {
        /// The mechanism.
        mechanism: ScramMechanism,
        /// The iterations asked for.
        iterations: i64,
        /// The minimum.
        min: u32,
    },
    /// More iterations than Kafka's maximum.
    #[error("Too many iterations: {iterations} is above the maximum {max} for {mechanism}")]
    TooManyIterations {
        /// The mechanism.
        mechanism: ScramMechanism,
        /// The iterations asked for.
        iterations: i64,
        /// The maximum.
        max: u32,
    },
    /// An empty salt.
    #[error("The salt of a {mechanism} credential must not be empty")]
    EmptySalt {
        /// The mechanism.
        mechanism: ScramMechanism,
    },
    /// A salted password whose length is not the mechanism's hash length.
    #[error("A {mechanism} salted password must be {expected} bytes, got {actual}")]
    SaltedPasswordLength {
        /// The mechanism.
        mechanism: ScramMechanism,
        /// The hash length.
        expected: usize,
        /// The length received.
        actual: usize,
    },
    /// The operating system gave no random bytes for a salt.
    #[error("No secure random bytes available for a salt")]
    Random,
    /// HMAC refused a key (cannot happen; kept so that nothing here panics).
    #[error("HMAC key setup failed")]
    Crypto,
}

impl From<KeyLengthFault> for CredentialError {
    fn from(_: KeyLengthFault) -> Self {
        CredentialError::Crypto
    }
}

/// Checks an iteration count against Kafka's bounds and returns it as `u32`. Takes `i64` so that
/// a wire `int32` (possibly negative) can be passed as is.
pub(crate) fn check_iterations(
    mechanism: ScramMechanism,
    iterations: i64,
) -> Result<u32, CredentialError> {
    if iterations < i64::from(ScramMechanism::MIN_ITERATIONS) {
        return Err(CredentialError::TooFewIterations {
            mechanism,
            iterations,
            min: ScramMechanism::MIN_ITERATIONS,
        });
    }
    if iterations > i64::from(ScramMechanism::MAX_ITERATIONS) {
        return Err(CredentialError::TooManyIterations {
            mechanism,
            iterations,
            max: ScramMechanism::MAX_ITERATIONS,
        });
    }
    u32::try_from(iterations).map_err(|_| CredentialError::TooManyIterations {
        mechanism,
        iterations,
        max: ScramMechanism::MAX_ITERATIONS,
    })
}

/// Hi(password, salt, iterations): what an admin client computes before sending
/// AlterUserScramCredentials, and what a SCRAM client computes during an exchange.
pub fn salted_password(
    mechanism: ScramMechanism,
    password: &str,
    salt: &[u8],
    iterations: i64,
) -> Result<Vec<u8>, CredentialError> {
    let iterations = check_iterations(mechanism, iterations)?;
    if salt.is_empty() {
        return Err(CredentialError::EmptySalt { mechanism });
    }
    Ok(Alg::from(mechanism).hi(password.as_bytes(), salt, iterations)?)
}

impl ScramCredential {
    /// A credential for `password` with a fresh random salt in Kafka's format (e.g. for a user
    /// configured in a file, or in tests).
    pub fn from_password(
        mechanism: ScramMechanism,
        password: &str,
        iterations: i64,
    ) -> Result<Self, CredentialError> {
        let mut seed = [0u8; super::SALT_SEED_LEN];
        super::os_random(&mut seed).map_err(|_| CredentialError::Random)?;
        let salt = super::kafka_style_salt(&seed);
        Self::from_password_and_salt(mechanism, password, &salt, iterations)
    }

    /// A credential for `password` with the given salt.
    pub fn from_password_and_salt(
        mechanism: ScramMechanism,
        password: &str,
        salt: &[u8],
        iterations: i64,
    ) -> Result<Self, CredentialError> {
        let salted = salted_password(mechanism, password, salt, iterations)?;
        Self::from_salted_password(mechanism, salt, &salted, iterations)
    }

    /// The credential an AlterUserScramCredentials upsertion describes: its `salt`,
    /// `salted_password` and `iterations` (the wire `int32`).
    pub fn from_salted_password(
        mechanism: ScramMechanism,
        salt: &[u8],
        salted_password: &[u8],
        iterations: i64,
    ) -> Result<Self, CredentialError> {
        let iterations = check_iterations(mechanism, iterations)?;
        if salt.is_empty() {
            return Err(CredentialError::EmptySalt { mechanism });
        }
        if salted_password.len() != mechanism.hash_len() {
            return Err(CredentialError::SaltedPasswordLength {
                mechanism,
                expected: mechanism.hash_len(),
                actual: salted_password.len(),
            });
        }
        let alg = Alg::from(mechanism);
        Ok(ScramCredential {
            salt: salt.to_vec(),
            stored_key: alg.stored_key(&alg.client_key(salted_password)?),
            server_key: alg.server_key(salted_password)?,
            iterations,
        })
    }
}
