//! The functions of RFC 5802 section 3, over the hash of a mechanism:
//!
//! ```text
//! SaltedPassword  := Hi(Normalize(password), salt, i)
//! ClientKey       := HMAC(SaltedPassword, "Client Key")
//! StoredKey       := H(ClientKey)
//! AuthMessage     := client-first-message-bare + "," + server-first-message + "," +
//!                    client-final-message-without-proof
//! ClientSignature := HMAC(StoredKey, AuthMessage)
//! ClientProof     := ClientKey XOR ClientSignature
//! ServerKey       := HMAC(SaltedPassword, "Server Key")
//! ServerSignature := HMAC(ServerKey, AuthMessage)
//! ```
//!
//! Hi() is PBKDF2 with HMAC as the PRF and one block of output, written out here because it is
//! six lines. SHA-1 exists only in tests, to check this core against RFC 5802's own example.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256, Sha512};

use crate::mechanism::ScramMechanism;

/// `Hmac::new_from_slice` cannot fail (HMAC takes keys of any length), but its signature says it
/// may; this is that impossible failure, carried instead of a panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyLengthFault;

/// The hash function under a SCRAM mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Alg {
    #[cfg(test)]
    Sha1,
    Sha256,
    Sha512,
}

impl From<ScramMechanism> for Alg {
    fn from(m: ScramMechanism) -> Self {
        match m {
            ScramMechanism::Sha256 => Alg::Sha256,
            ScramMechanism::Sha512 => Alg::Sha512,
        }
    }
}

fn hmac_with<M: Mac + KeyInit>(key: &[u8], data: &[u8]) -> Result<Vec<u8>, KeyLengthFault> {
    let mut mac = <M as KeyInit>::new_from_slice(key).map_err(|_| KeyLengthFault)?;
    mac.update(data);
    Ok(mac.finalize().into_bytes().to_vec())
}

fn hi_with<M: Mac + KeyInit + Clone>(
    password: &[u8],
    salt: &[u8],
    iterations: u32,
) -> Result<Vec<u8>, KeyLengthFault> {
    // The key schedule of HMAC(password, .) is computed once and cloned for every round.
    let keyed = <M as KeyInit>::new_from_slice(password).map_err(|_| KeyLengthFault)?;
    let mut mac = keyed.clone();
    mac.update(salt);
    mac.update(&1u32.to_be_bytes());
    let mut u = mac.finalize().into_bytes();
    let mut out = u.clone();
    for _ in 1..iterations {
        let mut mac = keyed.clone();
        mac.update(&u);
        u = mac.finalize().into_bytes();
        out.iter_mut().zip(u.iter()).for_each(|(o, x)| *o ^= x);
    }
    Ok(out.to_vec())
}

impl Alg {
    /// HMAC(key, data).
    pub(crate) fn hmac(self, key: &[u8], data: &[u8]) -> Result<Vec<u8>, KeyLengthFault> {
        match self {
            #[cfg(test)]
            Alg::Sha1 => hmac_with::<Hmac<sha1::Sha1>>(key, data),
            Alg::Sha256 => hmac_with::<Hmac<Sha256>>(key, data),
            Alg::Sha512 => hmac_with::<Hmac<Sha512>>(key, data),
        }
    }

    /// H(data).
    pub(crate) fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            #[cfg(test)]
            Alg::Sha1 => sha1::Sha1::digest(data).to_vec(),
            Alg::Sha256 => Sha256::digest(data).to_vec(),
            Alg::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// Hi(password, salt, iterations), i.e. the SaltedPassword.
    pub(crate) fn hi(
        self,
        password: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> Result<Vec<u8>, KeyLengthFault> {
        match self {
            #[cfg(test)]
            Alg::Sha1 => hi_with::<Hmac<sha1::Sha1>>(password, salt, iterations),
            Alg::Sha256 => hi_with::<Hmac<Sha256>>(password, salt, iterations),
            Alg::Sha512 => hi_with::<Hmac<Sha512>>(password, salt, iterations),
        }
    }

    /// ClientKey from SaltedPassword.
    pub(crate) fn client_key(self, salted_password: &[u8]) -> Result<Vec<u8>, KeyLengthFault> {
        self.hmac(salted_password, b"Client Key")
    }

    /// ServerKey from SaltedPassword.
    pub(crate) fn server_key(self, salted_password: &[u8]) -> Result<Vec<u8>, KeyLengthFault> {
        self.hmac(salted_password, b"Server Key")
    }

    /// StoredKey from ClientKey.
    pub(crate) fn stored_key(self, client_key: &[u8]) -> Vec<u8> {
        self.hash(client_key)
    }
}

/// `a XOR b`, over the shorter of the two (callers check lengths first).
pub(crate) fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x ^ y).collect()
}

/// The AuthMessage both sides sign.
pub(crate) fn auth_message(
    client_first_bare: &str,
    server_first: &str,
    client_final_without_proof: &str,
) -> String {
    format!("{client_first_bare},{server_first},{client_final_without_proof}")
}
