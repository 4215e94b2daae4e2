//! SASL/OAUTHBEARER (RFC 7628) as Kafka's `OAuthBearerValidatorCallbackHandler` serves it
//! (KIP-768): the client sends a signed JWT; the broker checks its signature against the keys of
//! a JWKS, its time claims (with a clock skew), and, when configured, its issuer and audience;
//! the principal is `User:<sub>` (the claim named by `sasl.oauthbearer.sub.claim.name`).
//!
//! Signatures: RS256/RS384/RS512 (RSA PKCS#1 v1.5) and ES256/ES384 (ECDSA, fixed-length
//! `r||s`), verified with aws-lc-rs. Unsigned tokens (`alg: none`, what Kafka's *unsecured*
//! validator accepts for testing) are always refused.
//!
//! The exchange: the client's first message carries `auth=Bearer <token>`; a valid token
//! completes at once. An invalid one is answered, as RFC 7628 section 3.2.2 says, with a JSON
//! error challenge; the client acknowledges it with `0x01` and the exchange then fails.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use aws_lc_rs::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::Value;

use crate::error::AuthError;
use crate::mechanism::Mechanism;
use crate::principal::KafkaPrincipal;
use crate::{SaslServer, ServerReply};

/// One verification key of a JWKS.
#[derive(Clone)]
enum Jwk {
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// An uncompressed EC point (`0x04 || x || y`) on `curve` (`P-256` or `P-384`).
    Ec {
        curve: String,
        point: Vec<u8>,
    },
}

/// The keys of a JSON Web Key Set, by key id (`kid`; keys without one are kept under "").
#[derive(Clone, Default)]
pub struct JwkSet {
    keys: BTreeMap<String, Vec<Jwk>>,
}

impl fmt::Debug for JwkSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JwkSet")
            .field("kids", &self.keys.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Why a JWKS could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid JWKS: {0}")]
pub struct JwksError(String);

fn b64(field: &str, value: Option<&Value>) -> Result<Vec<u8>, String> {
    let text = value
        .and_then(Value::as_str)
        .ok_or_else(|| format!("`{field}` is missing"))?;
    URL_SAFE_NO_PAD
        .decode(text.trim_end_matches('='))
        .map_err(|e| format!("`{field}` is not base64url: {e}"))
}

impl JwkSet {
    /// Parses a JWKS document (`{"keys": [...]}`). Keys of other types or uses (encryption) are
    /// skipped; a set without one usable key is an error.
    pub fn parse(json: &str) -> Result<Self, JwksError> {
        let doc: Value = serde_json::from_str(json).map_err(|e| JwksError(e.to_string()))?;
        let keys = doc
            .get("keys")
            .and_then(Value::as_array)
            .ok_or_else(|| JwksError("no `keys` array".into()))?;
        let mut set = JwkSet::default();
        for key in keys {
            if key
                .get("use")
                .and_then(Value::as_str)
                .is_some_and(|u| u != "sig")
            {
                continue;
            }
            let parsed = match key.get("kty").and_then(Value::as_str) {
                Some("RSA") => Jwk::Rsa {
                    n: b64("n", key.get("n")).map_err(JwksError)?,
                    e: b64("e", key.get("e")).map_err(JwksError)?,
                },
                Some("EC") => {
                    let curve = key
                        .get("crv")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string();
                    let mut point = vec![0x04];
                    point.extend(b64("x", key.get("x")).map_err(JwksError)?);
                    point.extend(b64("y", key.get("y")).map_err(JwksError)?);
                    Jwk::Ec { curve, point }
                }
                _ => continue,
            };
            let kid = key
                .get("kid")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            set.keys.entry(kid).or_default().push(parsed);
        }
        if set.keys.is_empty() {
            return Err(JwksError("no RSA or EC signing key".into()));
        }
        Ok(set)
    }

    /// The keys a token with header `kid` may be signed with: those with that id, or every key
    /// when the token names none.
    fn candidates(&self, kid: Option<&str>) -> Vec<&Jwk> {
        match kid {
            Some(kid) => self.keys.get(kid).into_iter().flatten().collect(),
            None => self.keys.values().flatten().collect(),
        }
    }
}

/// Whether `signature` over `message` verifies with `key` under JWS algorithm `alg`.
fn verifies(alg: &str, key: &Jwk, message: &[u8], signature: &[u8]) -> bool {
    match (alg, key) {
        ("RS256" | "RS384" | "RS512", Jwk::Rsa { n, e }) => {
            let params = match alg {
                "RS256" => &signature::RSA_PKCS1_2048_8192_SHA256,
                "RS384" => &signature::RSA_PKCS1_2048_8192_SHA384,
                _ => &signature::RSA_PKCS1_2048_8192_SHA512,
            };
            RsaPublicKeyComponents { n, e }
                .verify(params, message, signature)
                .is_ok()
        }
        ("ES256", Jwk::Ec { curve, point }) if curve == "P-256" => {
            UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                .verify(message, signature)
                .is_ok()
        }
        ("ES384", Jwk::Ec { curve, point }) if curve == "P-384" => {
            UnparsedPublicKey::new(&signature::ECDSA_P384_SHA384_FIXED, point)
                .verify(message, signature)
                .is_ok()
        }
        _ => false,
    }
}

/// Where the keys come from: a JWKS file, re-read when it changes (key rotation).
#[derive(Debug)]
pub enum JwksSource {
    /// Keys given directly (tests, or a set read once).
    Fixed(Arc<JwkSet>),
    /// `sasl.oauthbearer.jwks.endpoint.url = file:///...`.
    File {
        /// The file.
        path: PathBuf,
        /// The keys last read, with the file's modification time then.
        cached: Mutex<Option<(SystemTime, Arc<JwkSet>)>>,
    },
}

impl JwksSource {
    /// A JWKS file, read (and checked) now.
    pub fn file(path: impl Into<PathBuf>) -> Result<Self, JwksError> {
        let source = JwksSource::File {
            path: path.into(),
            cached: Mutex::new(None),
        };
        source.keys()?;
        Ok(source)
    }

    /// The current keys: a file's are re-read when its modification time changes; if the new
    /// content does not parse, the keys read before stay in force.
    fn keys(&self) -> Result<Arc<JwkSet>, JwksError> {
        let (path, cached) = match self {
            JwksSource::Fixed(set) => return Ok(set.clone()),
            JwksSource::File { path, cached } => (path, cached),
        };
        let mut cached = cached.lock().unwrap_or_else(|p| p.into_inner());
        let modified = std::fs::metadata(path)
            .and_then(|m| m.modified())
            .map_err(|e| JwksError(format!("{}: {e}", path.display())))?;
        if let Some((at, keys)) = cached.as_ref() {
            if *at == modified {
                return Ok(keys.clone());
            }
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| JwksError(format!("{}: {e}", path.display())));
        match text.and_then(|t| JwkSet::parse(&t)) {
            Ok(keys) => {
                let keys = Arc::new(keys);
                *cached = Some((modified, keys.clone()));
                Ok(keys)
            }
            Err(e) => match cached.as_ref() {
                Some((_, keys)) => Ok(keys.clone()),
                None => Err(e),
            },
        }
    }
}

/// What a token must satisfy (Kafka's `sasl.oauthbearer.*` broker configs).
#[derive(Debug)]
pub struct OAuthBearerValidator {
    /// The keys (`sasl.oauthbearer.jwks.endpoint.url`).
    pub jwks: JwksSource,
    /// `sasl.oauthbearer.expected.audience`: at least one must be in `aud` (empty: not checked).
    pub expected_audience: Vec<String>,
    /// `sasl.oauthbearer.expected.issuer` (`None`: not checked).
    pub expected_issuer: Option<String>,
    /// `sasl.oauthbearer.sub.claim.name`: the claim that names the principal.
    pub sub_claim: String,
    /// `sasl.oauthbearer.clock.skew.seconds`.
    pub clock_skew_seconds: i64,
}

/// A valid token: who it names and until when (milliseconds since the epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidToken {
    /// `User:<sub>`.
    pub principal: KafkaPrincipal,
    /// `exp`, in milliseconds.
    pub expires_at_ms: i64,
}

fn numeric_claim(claims: &Value, name: &str) -> Result<Option<i64>, String> {
    match claims.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(|n| Some(n as i64))
            .ok_or_else(|| format!("claim `{name}` is not a number")),
    }
}

impl OAuthBearerValidator {
    /// Checks `token` at `now_ms` (milliseconds since the epoch). The error says why, for the
    /// broker's log; clients get only RFC 7628's `invalid_token`.
    pub fn validate(&self, token: &str, now_ms: i64) -> Result<ValidToken, String> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(sig), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err("not a signed JWT (three base64url parts)".into());
        };
        let decode = |what: &str, part: &str| {
            URL_SAFE_NO_PAD
                .decode(part)
                .map_err(|e| format!("{what} is not base64url: {e}"))
        };
        let header: Value = serde_json::from_slice(&decode("header", header)?)
            .map_err(|e| format!("header is not JSON: {e}"))?;
        let alg = header
            .get("alg")
            .and_then(Value::as_str)
            .ok_or("header has no `alg`")?;
        let kid = header.get("kid").and_then(Value::as_str);
        let signature = decode("signature", sig)?;
        let signed = &token.as_bytes()[..token.len() - sig.len() - 1];
        let keys = self.jwks.keys().map_err(|e| e.to_string())?;
        let candidates = keys.candidates(kid);
        if candidates.is_empty() {
            return Err(format!("no key with kid {kid:?} in the JWKS"));
        }
        if !candidates
            .iter()
            .any(|k| verifies(alg, k, signed, &signature))
        {
            return Err(format!("the signature ({alg}) does not verify"));
        }
        let claims: Value = serde_json::from_slice(&decode("payload", payload)?)
            .map_err(|e| format!("payload is not JSON: {e}"))?;
        let now_s = now_ms.div_euclid(1000);
        let skew = self.clock_skew_seconds;
        let exp = numeric_claim(&claims, "exp")?.ok_or("no `exp` claim")?;
        if exp + skew <= now_s {
            return Err(format!("expired at {exp}"));
        }
        if let Some(nbf) = numeric_claim(&claims, "nbf")? {
            if nbf - skew > now_s {
                return Err(format!("not valid before {nbf}"));
            }
        }
        if let Some(iat) = numeric_claim(&claims, "iat")? {
            if iat - skew > now_s {
                return Err(format!("issued in the future ({iat})"));
            }
        }
        if let Some(issuer) = &self.expected_issuer {
            if claims.get("iss").and_then(Value::as_str) != Some(issuer.as_str()) {
                return Err(format!("issuer is not {issuer}"));
            }
        }
        if !self.expected_audience.is_empty() {
            let audience: Vec<&str> = match claims.get("aud") {
                Some(Value::String(a)) => vec![a.as_str()],
                Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            if !audience
                .iter()
                .any(|a| self.expected_audience.iter().any(|e| e == a))
            {
                return Err("audience does not match sasl.oauthbearer.expected.audience".into());
            }
        }
        let sub = claims
            .get(&self.sub_claim)
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| format!("no `{}` claim", self.sub_claim))?;
        Ok(ValidToken {
            principal: KafkaPrincipal::user(sub),
            expires_at_ms: exp.saturating_mul(1000),
        })
    }
}

/// The token of a client's first OAUTHBEARER message (`n,,\x01auth=Bearer <token>\x01...\x01`).
fn bearer_token(message: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(message).ok()?;
    let (gs2, rest) = text.split_once('\x01')?;
    if !gs2.starts_with("n,") && !gs2.starts_with("y,") {
        return None;
    }
    rest.split('\x01')
        .find_map(|kv| kv.strip_prefix("auth="))
        .and_then(|auth| {
            let (scheme, token) = auth.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
        .filter(|t| !t.is_empty())
}

enum Stage {
    Initial,
    /// An invalid token was answered with an error challenge; the client's `0x01` ends it.
    Failed(String),
    Done,
}

/// The server side of one OAUTHBEARER exchange.
pub struct OAuthBearerServer {
    validator: Arc<OAuthBearerValidator>,
    now_ms: i64,
    stage: Stage,
    /// The valid token's expiry, once complete.
    expires_at_ms: Option<i64>,
}

impl OAuthBearerServer {
    /// An exchange checked against `validator` at `now_ms`.
    pub fn new(validator: Arc<OAuthBearerValidator>, now_ms: i64) -> Self {
        Self {
            validator,
            now_ms,
            stage: Stage::Initial,
            expires_at_ms: None,
        }
    }

    /// When the accepted token expires (milliseconds since the epoch).
    pub fn expires_at_ms(&self) -> Option<i64> {
        self.expires_at_ms
    }
}

impl SaslServer for OAuthBearerServer {
    fn mechanism(&self) -> Mechanism {
        Mechanism::OAuthBearer
    }

    fn step(&mut self, client_message: &[u8]) -> Result<ServerReply, AuthError> {
        match std::mem::replace(&mut self.stage, Stage::Done) {
            Stage::Initial => {
                let Some(token) = bearer_token(client_message) else {
                    return Err(AuthError::InvalidToken {
                        reason: "the client's first message carries no auth=Bearer token".into(),
                    });
                };
                match self.validator.validate(token, self.now_ms) {
                    Ok(valid) => {
                        self.expires_at_ms = Some(valid.expires_at_ms);
                        Ok(ServerReply::Complete {
                            response: Vec::new(),
                            principal: valid.principal,
                        })
                    }
                    Err(reason) => {
                        self.stage = Stage::Failed(reason);
                        Ok(ServerReply::Challenge(
                            br#"{"status":"invalid_token"}"#.to_vec(),
                        ))
                    }
                }
            }
            Stage::Failed(reason) => Err(AuthError::InvalidToken { reason }),
            Stage::Done => Err(AuthError::IllegalState {
                mechanism: Mechanism::OAuthBearer,
                state: if self.expires_at_ms.is_some() {
                    "complete"
                } else {
                    "failed"
                },
            }),
        }
    }

    fn is_complete(&self) -> bool {
        self.expires_at_ms.is_some()
    }

    fn credential_expires_at_ms(&self) -> Option<i64> {
        self.expires_at_ms
    }
}

#[cfg(test)]
#[path = "oauthbearer_test.rs"]
mod tests;
