//! SASL/SCRAM (RFC 5802, RFC 7677) as Kafka runs it: SCRAM-SHA-256 and SCRAM-SHA-512, no channel
//! binding, usernames as SASL names (`=2C`, `=3D`), passwords used as their UTF-8 bytes (Kafka
//! does not apply SASLprep).
//!
//! - [`ScramCredential`] is what a broker stores per user and mechanism (salt, StoredKey,
//!   ServerKey, iterations), never the password; it is derived from a password or from the salted
//!   password an AlterUserScramCredentials upsertion carries.
//! - [`ScramServer`] is the broker's side of one exchange, [`ScramClient`] the client's side (for
//!   inter-broker connections and tests). Both are step-by-step state machines with no I/O.
//! - `crypto` holds the RFC's functions (Hi, HMAC, H and the keys and signatures built from them),
//!   `messages` the four messages' grammar.
//!
//! Randomness (nonces, salts) comes from the operating system's secure generator, not from a
//! seeded one: a predictable nonce or salt would be a vulnerability, and tests that need fixed
//! values pass them in ([`ScramServer::with_nonce`], [`ScramClient::with_nonce`]).

mod client;
mod credential;
mod crypto;
mod messages;
mod server;
#[cfg(test)]
mod tests;

pub use client::{ClientError, ScramClient};
pub use credential::{salted_password, CredentialError, ScramCredential};
pub use server::{ScramCredentialSource, ScramServer};

use base64::Engine as _;
use rand::TryRngCore as _;

/// Standard base64 with padding, the encoding of every binary SCRAM attribute.
pub(crate) fn b64_encode(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Decodes standard base64 with padding.
pub(crate) fn b64_decode(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

/// Fills `buf` from the operating system's secure generator.
pub(crate) fn os_random(buf: &mut [u8]) -> Result<(), ()> {
    rand::rngs::OsRng.try_fill_bytes(buf).map_err(|_| ())
}

/// A fresh nonce: 18 random bytes as 24 base64 characters (printable, no comma, as RFC 5802
/// requires).
pub(crate) fn random_nonce() -> Result<String, ()> {
    let mut bytes = [0u8; 18];
    os_random(&mut bytes)?;
    Ok(b64_encode(&bytes))
}

/// Random bytes a salt is made from: 130 bits are kept, as Kafka draws them.
pub(crate) const SALT_SEED_LEN: usize = 17;

/// A salt in Kafka's format: 130 random bits written in base 36 (`0-9a-z`, no leading zeros), as
/// UTF-8 bytes, usually 25 or 26 of them (Kafka's `ScramFormatter.secureRandomBytes`). Salts made
/// here, real or fake, thus look like those Kafka's tools make.
pub(crate) fn kafka_style_salt(seed: &[u8; SALT_SEED_LEN]) -> Vec<u8> {
    let mut number = *seed;
    number[0] &= 0x03; // 2 + 16 * 8 = 130 bits
    let mut digits = Vec::with_capacity(26);
    while number.iter().any(|&b| b != 0) {
        // Long division of the big-endian number by 36, keeping the remainder.
        let mut remainder = 0u32;
        for byte in number.iter_mut() {
            let value = (remainder << 8) | u32::from(*byte);
            *byte = (value / 36) as u8;
            remainder = value % 36;
        }
        digits.push(b"0123456789abcdefghijklmnopqrstuvwxyz"[remainder as usize]);
    }
    if digits.is_empty() {
        digits.push(b'0');
    }
    digits.reverse();
    digits
}
