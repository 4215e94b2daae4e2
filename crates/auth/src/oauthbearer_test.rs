//! OAUTHBEARER tokens signed here with fresh keys (aws-lc-rs), checked by the validator.

use super::*;
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::KeySize;
use aws_lc_rs::signature::{EcdsaKeyPair, KeyPair, RsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::json;

const NOW_MS: i64 = 1_800_000_000_000;
const NOW_S: i64 = NOW_MS / 1000;

fn b64u(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// An ES256 signer and its JWK.
struct Es256 {
    key: EcdsaKeyPair,
    kid: &'static str,
}

impl Es256 {
    fn new(kid: &'static str) -> Self {
        let key = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING).unwrap();
        Self { key, kid }
    }

    fn jwk(&self) -> Value {
        let point = self.key.public_key().as_ref();
        json!({"kty": "EC", "crv": "P-256", "kid": self.kid, "use": "sig",
               "x": b64u(&point[1..33]), "y": b64u(&point[33..65])})
    }

    fn token(&self, claims: Value) -> String {
        let header = json!({"alg": "ES256", "typ": "JWT", "kid": self.kid});
        let signing_input = format!(
            "{}.{}",
            b64u(header.to_string().as_bytes()),
            b64u(claims.to_string().as_bytes())
        );
        let sig = self
            .key
            .sign(&SystemRandom::new(), signing_input.as_bytes())
            .unwrap();
        format!("{signing_input}.{}", b64u(sig.as_ref()))
    }
}

fn validator(jwks: Value) -> OAuthBearerValidator {
    OAuthBearerValidator {
        jwks: JwksSource::Fixed(Arc::new(JwkSet::parse(&jwks.to_string()).unwrap())),
        expected_audience: vec!["kafka".into()],
        expected_issuer: Some("https://issuer.example".into()),
        sub_claim: "sub".into(),
        clock_skew_seconds: 30,
    }
}

fn claims(sub: &str) -> Value {
    json!({"sub": sub, "iss": "https://issuer.example", "aud": ["kafka", "other"],
           "iat": NOW_S - 10, "exp": NOW_S + 3600})
}

#[test]
fn a_signed_token_names_its_subject() {
    let signer = Es256::new("k1");
    let v = validator(json!({"keys": [signer.jwk()]}));
    let valid = v.validate(&signer.token(claims("app")), NOW_MS).unwrap();
    assert_eq!(valid.principal, KafkaPrincipal::user("app"));
    assert_eq!(valid.expires_at_ms, (NOW_S + 3600) * 1000);
}

#[test]
fn rs256_tokens_verify_against_the_rsa_key() {
    let key = RsaKeyPair::generate(KeySize::Rsa2048).unwrap();
    let public = key.public_key();
    let jwk = json!({"kty": "RSA", "kid": "r1",
                     "n": b64u(public.modulus().big_endian_without_leading_zero()),
                     "e": b64u(public.exponent().big_endian_without_leading_zero())});
    let header = json!({"alg": "RS256", "kid": "r1"});
    let input = format!(
        "{}.{}",
        b64u(header.to_string().as_bytes()),
        b64u(claims("rsa-app").to_string().as_bytes())
    );
    let mut sig = vec![0; key.public_modulus_len()];
    key.sign(
        &aws_lc_rs::signature::RSA_PKCS1_SHA256,
        &SystemRandom::new(),
        input.as_bytes(),
        &mut sig,
    )
    .unwrap();
    let token = format!("{input}.{}", b64u(&sig));
    let v = validator(json!({"keys": [jwk]}));
    assert_eq!(
        v.validate(&token, NOW_MS).unwrap().principal,
        KafkaPrincipal::user("rsa-app")
    );
}

#[test]
fn forged_expired_and_misdirected_tokens_are_refused() {
    let signer = Es256::new("k1");
    let other = Es256::new("k1");
    let v = validator(json!({"keys": [signer.jwk()]}));
    let refuse = |token: String| v.validate(&token, NOW_MS).unwrap_err();
    // Signed by another key with the same kid.
    assert!(refuse(other.token(claims("app"))).contains("signature"));
    // A changed payload under the original signature.
    let good = signer.token(claims("app"));
    let parts: Vec<&str> = good.split('.').collect();
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        b64u(claims("admin").to_string().as_bytes()),
        parts[2]
    );
    assert!(refuse(forged).contains("signature"));
    // Unsigned (alg none).
    let none = format!(
        "{}.{}.",
        b64u(br#"{"alg":"none"}"#),
        b64u(claims("app").to_string().as_bytes())
    );
    assert!(v.validate(&none, NOW_MS).is_err());
    // Expired beyond the skew, not yet valid, wrong issuer, wrong audience, no sub.
    let mut c = claims("app");
    c["exp"] = json!(NOW_S - 31);
    assert!(refuse(signer.token(c)).contains("expired"));
    let mut c = claims("app");
    c["exp"] = json!(NOW_S - 10); // within the 30 s skew
    assert!(v.validate(&signer.token(c), NOW_MS).is_ok());
    let mut c = claims("app");
    c["nbf"] = json!(NOW_S + 60);
    assert!(refuse(signer.token(c)).contains("before"));
    let mut c = claims("app");
    c["iss"] = json!("https://elsewhere.example");
    assert!(refuse(signer.token(c)).contains("issuer"));
    let mut c = claims("app");
    c["aud"] = json!("payments");
    assert!(refuse(signer.token(c)).contains("audience"));
    let mut c = claims("app");
    c.as_object_mut().unwrap().remove("sub");
    assert!(refuse(signer.token(c)).contains("sub"));
    let mut c = claims("app");
    c.as_object_mut().unwrap().remove("exp");
    assert!(refuse(signer.token(c)).contains("exp"));
    // A kid the JWKS does not have.
    let stranger = Es256::new("k9");
    assert!(refuse(stranger.token(claims("app"))).contains("kid"));
    // Not a JWT at all.
    assert!(v.validate("garbage", NOW_MS).is_err());
    assert!(v.validate("a.b.c", NOW_MS).is_err());
}

#[test]
fn the_exchange_completes_or_fails_after_the_error_challenge() {
    let signer = Es256::new("k1");
    let v = Arc::new(validator(json!({"keys": [signer.jwk()]})));
    let first = |token: &str| format!("n,,\x01auth=Bearer {token}\x01\x01").into_bytes();

    let mut server = OAuthBearerServer::new(v.clone(), NOW_MS);
    let reply = server.step(&first(&signer.token(claims("app")))).unwrap();
    assert_eq!(
        reply,
        ServerReply::Complete {
            response: Vec::new(),
            principal: KafkaPrincipal::user("app")
        }
    );
    assert!(server.is_complete());
    assert!(matches!(
        server.step(b"more"),
        Err(AuthError::IllegalState { .. })
    ));

    // An invalid token: an error challenge, then the failure once the client acknowledges.
    let mut server = OAuthBearerServer::new(v.clone(), NOW_MS);
    let mut expired = claims("app");
    expired["exp"] = json!(NOW_S - 600);
    let reply = server.step(&first(&signer.token(expired))).unwrap();
    assert_eq!(
        reply,
        ServerReply::Challenge(br#"{"status":"invalid_token"}"#.to_vec())
    );
    let err = server.step(b"\x01").unwrap_err();
    assert_eq!(err.kind(), crate::AuthErrorKind::AuthenticationFailed);
    assert!(err.reason().unwrap().contains("expired"));
    assert!(
        !err.to_string().contains("expired"),
        "details stay in the log"
    );
    assert!(!server.is_complete());

    // A first message without a bearer token.
    let mut server = OAuthBearerServer::new(v, NOW_MS);
    assert!(server.step(b"n,,\x01\x01").is_err());
}

#[test]
fn a_jwks_file_is_reread_when_it_changes() {
    let dir = std::env::temp_dir().join(format!("ferry-jwks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("jwks.json");
    let first = Es256::new("k1");
    std::fs::write(&path, json!({"keys": [first.jwk()]}).to_string()).unwrap();
    let source = JwksSource::file(&path).unwrap();
    let v = OAuthBearerValidator {
        jwks: source,
        expected_audience: Vec::new(),
        expected_issuer: None,
        sub_claim: "sub".into(),
        clock_skew_seconds: 30,
    };
    assert!(v.validate(&first.token(claims("app")), NOW_MS).is_ok());
    // Rotated: the new key is used (the modification time moves on).
    let second = Es256::new("k2");
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&path, json!({"keys": [second.jwk()]}).to_string()).unwrap();
    let f = std::fs::File::options().write(true).open(&path).unwrap();
    f.set_modified(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(2_000_000_005))
        .unwrap();
    assert!(v.validate(&second.token(claims("app")), NOW_MS).is_ok());
    assert!(v.validate(&first.token(claims("app")), NOW_MS).is_err());
    // A broken file keeps the keys read before.
    std::fs::write(&path, "{not json").unwrap();
    f.set_modified(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(2_000_000_010))
        .unwrap();
    assert!(v.validate(&second.token(claims("app")), NOW_MS).is_ok());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_jwks_without_signing_keys_is_refused() {
    assert!(JwkSet::parse("{}").is_err());
    assert!(JwkSet::parse(r#"{"keys": [{"kty": "oct", "k": "AAAA"}]}"#).is_err());
    assert!(JwkSet::parse(r#"{"keys": [{"kty": "RSA", "n": "!!", "e": "AQAB"}]}"#).is_err());
}
