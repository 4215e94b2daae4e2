//! SCRAM tests: the RFCs' worked examples, full client/server round trips, and every way an
//! exchange must fail.

use std::collections::HashMap;

use super::crypto::Alg;
use super::messages::{decode_saslname, encode_saslname};
use super::*;
use crate::{
    AuthError, AuthErrorKind, KafkaPrincipal, SaslServer, ScramMechanism, Secret, ServerReply,
};

type Store = HashMap<(String, ScramMechanism), ScramCredential>;

fn store_with(user: &str, password: &str, mechanism: ScramMechanism) -> Store {
    let mut store = Store::new();
    let credential = ScramCredential::from_password(mechanism, password, 4096).unwrap();
    store.insert((user.to_owned(), mechanism), credential);
    store
}

fn challenge(reply: ServerReply) -> Vec<u8> {
    match reply {
        ServerReply::Challenge(bytes) => bytes,
        other => panic!("expected a challenge, got {other:?}"),
    }
}

fn complete(reply: ServerReply) -> (Vec<u8>, KafkaPrincipal) {
    match reply {
        ServerReply::Complete {
            response,
            principal,
        } => (response, principal),
        other => panic!("expected completion, got {other:?}"),
    }
}

/// Runs a full exchange and returns the server's verdict on the client's final message.
fn exchange(
    mechanism: ScramMechanism,
    store: &Store,
    user: &str,
    password: &str,
) -> Result<ServerReply, AuthError> {
    let mut server = ScramServer::new(mechanism, store);
    let mut client = ScramClient::new(mechanism, user, Secret::new(password));
    let first = server.step(&client.client_first().unwrap())?;
    let last = client.handle_server_first(&challenge(first)).unwrap();
    server.step(&last)
}

fn invalid_credentials(mechanism: ScramMechanism) -> String {
    format!(
        "Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"
    )
}

// RFC 7677 section 3: SCRAM-SHA-256, user "user", password "pencil".
const RFC7677_CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
const RFC7677_SERVER_FIRST: &str =
    "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
const RFC7677_CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
const RFC7677_SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

fn rfc7677_store() -> Store {
    let salt = b64_decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
    let credential =
        ScramCredential::from_password_and_salt(ScramMechanism::Sha256, "pencil", &salt, 4096)
            .unwrap();
    HashMap::from([(("user".to_owned(), ScramMechanism::Sha256), credential)])
}

#[test]
fn rfc7677_example_server_side() {
    let store = rfc7677_store();
    let mut server = ScramServer::with_nonce(
        ScramMechanism::Sha256,
        &store,
        "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    );
    let first = challenge(server.step(RFC7677_CLIENT_FIRST.as_bytes()).unwrap());
    assert_eq!(String::from_utf8(first).unwrap(), RFC7677_SERVER_FIRST);
    let (last, principal) = complete(server.step(RFC7677_CLIENT_FINAL.as_bytes()).unwrap());
    assert_eq!(String::from_utf8(last).unwrap(), RFC7677_SERVER_FINAL);
    assert_eq!(principal.to_string(), "User:user");
    assert!(server.is_complete());
}

#[test]
fn rfc7677_example_client_side() {
    let mut client = ScramClient::with_nonce(
        ScramMechanism::Sha256,
        "user",
        Secret::new("pencil"),
        "rOprNGfwEbeRWgbNEkqO",
    );
    assert_eq!(
        client.client_first().unwrap(),
        RFC7677_CLIENT_FIRST.as_bytes()
    );
    let last = client
        .handle_server_first(RFC7677_SERVER_FIRST.as_bytes())
        .unwrap();
    assert_eq!(String::from_utf8(last).unwrap(), RFC7677_CLIENT_FINAL);
    client
        .handle_server_final(RFC7677_SERVER_FINAL.as_bytes())
        .unwrap();
    assert!(client.is_complete());
}

#[test]
fn rfc5802_sha1_example_runs_through_the_same_core() {
    // RFC 5802 section 5: the same exchange with SHA-1, which only the tests can select.
    let alg = Alg::Sha1;
    let salt = b64_decode("QSXCR+Q6sek8bf92").unwrap();
    let salted = alg.hi(b"pencil", &salt, 4096).unwrap();
    let credential = ScramCredential {
        salt,
        stored_key: alg.stored_key(&alg.client_key(&salted).unwrap()),
        server_key: alg.server_key(&salted).unwrap(),
        iterations: 4096,
    };
    let store = HashMap::from([(("user".to_owned(), ScramMechanism::Sha256), credential)]);
    let mut server =
        ScramServer::with_nonce(ScramMechanism::Sha256, &store, "3rfcNHYJY1ZVvWVs7j").with_alg(alg);
    let mut client = ScramClient::with_nonce(
        ScramMechanism::Sha256,
        "user",
        Secret::new("pencil"),
        "fyko+d2lbbFgONRv9qkxdawL",
    )
    .with_alg(alg);

    let client_first = client.client_first().unwrap();
    assert_eq!(client_first, b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL");
    let server_first = challenge(server.step(&client_first).unwrap());
    assert_eq!(
        server_first,
        b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096"
    );
    let client_final = client.handle_server_first(&server_first).unwrap();
    assert_eq!(
        String::from_utf8(client_final.clone()).unwrap(),
        "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
    );
    let (server_final, _) = complete(server.step(&client_final).unwrap());
    assert_eq!(server_final, b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=");
    client.handle_server_final(&server_final).unwrap();
}

#[test]
fn round_trip_sha256_and_sha512() {
    for mechanism in ScramMechanism::ALL {
        let store = store_with("alice", "alice-secret", mechanism);
        let mut server = ScramServer::new(mechanism, &store);
        assert_eq!(server.mechanism(), mechanism.mechanism());
        let mut client = ScramClient::new(mechanism, "alice", Secret::new("alice-secret"));
        let first = challenge(server.step(&client.client_first().unwrap()).unwrap());
        let last = client.handle_server_first(&first).unwrap();
        let (server_final, principal) = complete(server.step(&last).unwrap());
        client.handle_server_final(&server_final).unwrap();
        assert!(client.is_complete() && server.is_complete());
        assert_eq!(principal, KafkaPrincipal::user("alice"));
    }
}

#[test]
fn credential_of_the_other_mechanism_does_not_authenticate() {
    let store = store_with("alice", "alice-secret", ScramMechanism::Sha256);
    let err = exchange(ScramMechanism::Sha512, &store, "alice", "alice-secret").unwrap_err();
    assert_eq!(err.to_string(), invalid_credentials(ScramMechanism::Sha512));
}

#[test]
fn wrong_password_fails_with_kafkas_message() {
    let store = store_with("alice", "alice-secret", ScramMechanism::Sha256);
    let err = exchange(ScramMechanism::Sha256, &store, "alice", "wrong").unwrap_err();
    assert_eq!(err.kind(), AuthErrorKind::AuthenticationFailed);
    assert_eq!(
        err.to_string(),
        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"
    );
    assert_eq!(err.reason(), Some("invalid client proof"));
    assert!(err
        .client_message(true)
        .contains("during re-authentication"));
}

#[test]
fn unknown_user_fails_exactly_like_a_wrong_password() {
    let store = store_with("alice", "alice-secret", ScramMechanism::Sha512);
    let wrong = exchange(ScramMechanism::Sha512, &store, "alice", "wrong").unwrap_err();
    let unknown = exchange(ScramMechanism::Sha512, &store, "mallory", "whatever").unwrap_err();
    assert_eq!(wrong, unknown);
}

#[test]
fn unknown_user_gets_a_plausible_and_stable_server_first() {
    let store = Store::new();
    let server_first = |user: &str| {
        let mut server = ScramServer::new(ScramMechanism::Sha256, &store);
        let message = format!("n,,n={user},r=clientnonce");
        let first = challenge(server.step(message.as_bytes()).unwrap());
        let first = super::messages::parse_server_first(std::str::from_utf8(&first).unwrap());
        first.unwrap()
    };
    let a = server_first("ghost");
    let b = server_first("ghost");
    let c = server_first("phantom");
    assert_eq!(a.salt, b.salt, "the same unknown user sees the same salt");
    assert_ne!(a.salt, c.salt);
    assert_ne!(a.nonce, b.nonce, "nonces are fresh");
    assert_eq!(a.iterations, ScramMechanism::MIN_ITERATIONS);
    assert!(a.nonce.starts_with("clientnonce") && a.nonce.len() > "clientnonce".len());
}

/// Drives the server through a client-first message and returns it, ready for a final message.
fn server_after_first(store: &Store) -> (ScramServer<&Store>, String) {
    let mut server = ScramServer::with_nonce(ScramMechanism::Sha256, store, "SERVERNONCE");
    let first = challenge(server.step(b"n,,n=alice,r=CLIENTNONCE").unwrap());
    (server, String::from_utf8(first).unwrap())
}

#[test]
fn tampered_nonce_is_rejected() {
    let store = store_with("alice", "alice-secret", ScramMechanism::Sha256);
    let mut client = ScramClient::with_nonce(
        ScramMechanism::Sha256,
        "alice",
        Secret::new("alice-secret"),
        "CLIENTNONCE",
    );
    client.client_first().unwrap();
    let (mut server, first) = server_after_first(&store);
    let last = String::from_utf8(client.handle_server_first(first.as_bytes()).unwrap()).unwrap();
    let tampered = last.replace("SERVERNONCE", "SERVERNONCF");
    let err = server.step(tampered.as_bytes()).unwrap_err();
    assert_eq!(err.to_string(), invalid_credentials(ScramMechanism::Sha256));
    assert_eq!(
        err.reason(),
        Some("nonce of the client-final message does not match")
    );
    // The exchange is over.
    let err = server.step(last.as_bytes()).unwrap_err();
    assert_eq!(err.kind(), AuthErrorKind::IllegalSaslState);
}

#[test]
fn tampered_proof_and_channel_binding_are_rejected() {
    let store = store_with("alice", "alice-secret", ScramMechanism::Sha256);
    let final_message = || {
        let mut client = ScramClient::with_nonce(
            ScramMechanism::Sha256,
            "alice",
            Secret::new("alice-secret"),
            "CLIENTNONCE",
        );
        client.client_first().unwrap();
        let (_, first) = server_after_first(&store);
        String::from_utf8(client.handle_server_first(first.as_bytes()).unwrap()).unwrap()
    };
    let good = final_message();
    let (without_proof, proof) = good.rsplit_once(",p=").unwrap();
    let mut proof_bytes = b64_decode(proof).unwrap();
    proof_bytes[0] ^= 1;
    let cases = [
        format!("{without_proof},p={}", b64_encode(&proof_bytes)),
        format!("{without_proof},p={}", b64_encode(&proof_bytes[1..])),
        good.replace("c=biws", &format!("c={}", b64_encode(b"y,,"))),
    ];
    for bad in cases {
        let (mut server, _) = server_after_first(&store);
        let err = server.step(bad.as_bytes()).unwrap_err();
        assert_eq!(err.kind(), AuthErrorKind::AuthenticationFailed, "{bad}");
        assert_eq!(err.to_string(), invalid_credentials(ScramMechanism::Sha256));
    }
    let (mut server, _) = server_after_first(&store);
    assert!(server.step(good.as_bytes()).is_ok());
}

#[test]
fn malformed_client_first_messages_are_rejected() {
    let store = store_with("alice", "alice-secret", ScramMechanism::Sha256);
    let cases: &[&[u8]] = &[
        b"",
        b"n",
        b"n,",
        b"x,,n=alice,r=abc",
        b"n,x=alice,n=alice,r=abc",
        b"n,,r=abc",
        b"n,,n=alice",
        b"n,,n=,r=abc",
        b"n,,n=al=ice,r=abc",
        b"n,,n=al=2ice,r=abc",
        b"n,,n=alice,r=",
        b"n,,n=alice,r=a b",
        b"n,,n=alice,r=abc,=novalue",
        b"n,,n=alice,r=abc,k1=v",
        b"n,,m=ext,n=alice,r=abc",
        b"n,,n=alice,r=\xff",
    ];
    for case in cases {
        let mut server = ScramServer::new(ScramMechanism::Sha256, &store);
        let err = server.step(case).unwrap_err();
        assert_eq!(
            err.to_string(),
            invalid_credentials(ScramMechanism::Sha256),
            "{}",
            String::from_utf8_lossy(case)
        );
        assert!(!server.is_complete());
    }
}

#[test]
fn malformed_client_final_messages_are_rejected() {
    let store = store_with("alice", "alice-secret", ScramMechanism::Sha256);
    let cases: &[&str] = &[
        "",
        "c=biws,r=CLIENTNONCESERVERNONCE",
        "c=biws,r=CLIENTNONCESERVERNONCE,p=***",
        "c=***,r=CLIENTNONCESERVERNONCE,p=AAAA",
        "r=CLIENTNONCESERVERNONCE,p=AAAA",
        "c=biws,p=AAAA",
        "c=biws,r=CLIENTNONCESERVERNONCE,p=AAAA,x=trailing",
    ];
    for case in cases {
        let (mut server, _) = server_after_first(&store);
        let err = server.step(case.as_bytes()).unwrap_err();
        assert_eq!(
            err.to_string(),
            invalid_credentials(ScramMechanism::Sha256),
            "{case}"
        );
    }
}

#[test]
fn channel_binding_requests_are_rejected() {
    let store = store_with("alice", "alice-secret", ScramMechanism::Sha256);
    for case in [
        "p=tls-unique,,n=alice,r=abc",
        "p=tls-server-end-point,,n=alice,r=abc",
        "y,,n=alice,r=abc",
    ] {
        let mut server = ScramServer::new(ScramMechanism::Sha256, &store);
        let err = server.step(case.as_bytes()).unwrap_err();
        assert_eq!(err.kind(), AuthErrorKind::AuthenticationFailed);
        assert!(err.reason().unwrap().contains("channel binding"), "{err:?}");
    }
}

#[test]
fn delegation_token_extension_is_rejected_and_others_ignored() {
    let store = store_with("alice", "alice-secret", ScramMechanism::Sha256);
    let mut server = ScramServer::new(ScramMechanism::Sha256, &store);
    let err = server.step(b"n,,n=alice,r=abc,tokenauth=true").unwrap_err();
    assert!(err.reason().unwrap().contains("tokenauth"));
    let mut server = ScramServer::new(ScramMechanism::Sha256, &store);
    assert!(server
        .step(b"n,,n=alice,r=abc,tokenauth=false,other=x")
        .is_ok());
}

#[test]
fn authorization_id_must_be_the_username() {
    let store = store_with("alice", "alice-secret", ScramMechanism::Sha256);
    let mut server = ScramServer::new(ScramMechanism::Sha256, &store);
    let err = server.step(b"n,a=admin,n=alice,r=abc").unwrap_err();
    assert_eq!(
        err.to_string(),
        "Authentication failed: Client requested an authorization id that is different from username"
    );
    // The same answer for a user that does not exist.
    let mut server = ScramServer::new(ScramMechanism::Sha256, &store);
    assert_eq!(server.step(b"n,a=admin,n=ghost,r=abc").unwrap_err(), err);

    // An equal authzid is fine; its GS2 header is what c= must carry.
    let mut server = ScramServer::with_nonce(ScramMechanism::Sha256, &store, "S");
    let first = challenge(server.step(b"n,a=alice,n=alice,r=C").unwrap());
    let first = String::from_utf8(first).unwrap();
    let credential = store[&("alice".to_owned(), ScramMechanism::Sha256)].clone();
    let alg = Alg::Sha256;
    let salted = alg
        .hi(b"alice-secret", &credential.salt, credential.iterations)
        .unwrap();
    let without_proof = format!("c={},r=CS", b64_encode(b"n,a=alice,"));
    let auth = format!("n=alice,r=C,{first},{without_proof}");
    let client_key = alg.client_key(&salted).unwrap();
    let signature = alg
        .hmac(&alg.stored_key(&client_key), auth.as_bytes())
        .unwrap();
    let proof = super::crypto::xor(&client_key, &signature);
    let last = format!("{without_proof},p={}", b64_encode(&proof));
    let (_, principal) = complete(server.step(last.as_bytes()).unwrap());
    assert_eq!(principal, KafkaPrincipal::user("alice"));
}

#[test]
fn usernames_with_commas_and_equals_signs_round_trip() {
    assert_eq!(encode_saslname("a,b=c"), "a=2Cb=3Dc");
    assert_eq!(decode_saslname("a=2Cb=3Dc").unwrap(), "a,b=c");
    assert!(decode_saslname("a=2").is_err());
    assert!(decode_saslname("a=41").is_err());
    let store = store_with("a,b=c", "pw", ScramMechanism::Sha256);
    let (_, principal) = complete(exchange(ScramMechanism::Sha256, &store, "a,b=c", "pw").unwrap());
    assert_eq!(principal.name(), "a,b=c");
}

#[test]
fn messages_after_the_end_are_illegal() {
    let store = store_with("alice", "alice-secret", ScramMechanism::Sha256);
    let mut server = ScramServer::new(ScramMechanism::Sha256, &store);
    let mut client = ScramClient::new(ScramMechanism::Sha256, "alice", Secret::new("alice-secret"));
    let first = challenge(server.step(&client.client_first().unwrap()).unwrap());
    let last = client.handle_server_first(&first).unwrap();
    server.step(&last).unwrap();
    let err = server.step(&last).unwrap_err();
    assert_eq!(err.kind(), AuthErrorKind::IllegalSaslState);
    assert!(
        server.is_complete(),
        "a stray message does not undo the authentication"
    );
}

#[test]
fn stored_credential_below_the_minimum_is_refused() {
    let mut store = store_with("alice", "alice-secret", ScramMechanism::Sha256);
    for credential in store.values_mut() {
        credential.iterations = 1000;
    }
    let mut server = ScramServer::new(ScramMechanism::Sha256, &store);
    let err = server.step(b"n,,n=alice,r=abc").unwrap_err();
    assert_eq!(err.to_string(), invalid_credentials(ScramMechanism::Sha256));
    assert_eq!(
        err.reason(),
        Some("stored credential has fewer iterations than the minimum")
    );
}

#[test]
fn credential_iteration_bounds_are_kafkas() {
    let m = ScramMechanism::Sha256;
    let err = ScramCredential::from_password(m, "pw", 4095).unwrap_err();
    assert!(err.to_string().starts_with("Too few iterations"), "{err}");
    assert!(err.to_string().contains("4096"));
    let err = ScramCredential::from_password(m, "pw", 16385).unwrap_err();
    assert!(err.to_string().starts_with("Too many iterations"), "{err}");
    assert!(ScramCredential::from_password(m, "pw", -1).is_err());
    assert!(ScramCredential::from_password(m, "pw", 16384).is_ok());
    assert!(salted_password(m, "pw", b"salt", 100).is_err());
}

#[test]
fn upsertion_with_salted_password_gives_the_same_credential() {
    for m in ScramMechanism::ALL {
        let salt = b"some salt";
        let salted = salted_password(m, "secret", salt, 8192).unwrap();
        assert_eq!(salted.len(), m.hash_len());
        let from_upsertion = ScramCredential::from_salted_password(m, salt, &salted, 8192).unwrap();
        let from_password =
            ScramCredential::from_password_and_salt(m, "secret", salt, 8192).unwrap();
        assert_eq!(from_upsertion, from_password);
        assert_eq!(from_upsertion.iterations, 8192);

        let err = ScramCredential::from_salted_password(m, salt, &salted[1..], 8192).unwrap_err();
        assert!(
            matches!(err, CredentialError::SaltedPasswordLength { .. }),
            "{err}"
        );
        let err = ScramCredential::from_salted_password(m, b"", &salted, 8192).unwrap_err();
        assert!(matches!(err, CredentialError::EmptySalt { .. }), "{err}");
    }
}

#[test]
fn random_salts_differ() {
    let a = ScramCredential::from_password(ScramMechanism::Sha256, "pw", 4096).unwrap();
    let b = ScramCredential::from_password(ScramMechanism::Sha256, "pw", 4096).unwrap();
    assert_ne!(a.salt, b.salt);
    assert_ne!(a.stored_key, b.stored_key);
}

#[test]
fn debug_output_hides_secrets() {
    let credential = ScramCredential::from_password(ScramMechanism::Sha256, "pw", 4096).unwrap();
    let text = format!("{credential:?}");
    assert!(!text.contains(&format!("{:?}", credential.salt)), "{text}");
    assert!(text.contains("[hidden]"));
    let client = ScramClient::new(ScramMechanism::Sha256, "alice", Secret::new("alice-secret"));
    let text = format!("{client:?}");
    assert!(
        text.contains("alice") && !text.contains("alice-secret"),
        "{text}"
    );
}

#[test]
fn client_rejects_a_bad_server() {
    let fresh = || {
        let mut client =
            ScramClient::with_nonce(ScramMechanism::Sha256, "user", Secret::new("pencil"), "CN");
        client.client_first().unwrap();
        client
    };
    type Check = fn(&ClientError) -> bool;
    let cases: [(&str, Check); 7] = [
        ("r=XX,s=QSXCR+Q6sek8bf92,i=4096", |e| {
            *e == ClientError::NonceMismatch
        }),
        ("r=CN,s=QSXCR+Q6sek8bf92,i=4096", |e| {
            *e == ClientError::NonceMismatch
        }),
        ("r=CNs,s=QSXCR+Q6sek8bf92,i=1024", |e| {
            matches!(
                e,
                ClientError::IterationsOutOfRange {
                    iterations: 1024,
                    ..
                }
            )
        }),
        ("r=CNs,s=QSXCR+Q6sek8bf92,i=100000", |e| {
            matches!(e, ClientError::IterationsOutOfRange { .. })
        }),
        ("r=CNs,s=QSXCR+Q6sek8bf92,i=x", |e| {
            matches!(e, ClientError::Malformed(_))
        }),
        ("r=CNs,s=,i=4096", |e| {
            matches!(e, ClientError::Malformed(_))
        }),
        ("m=x,r=CNs,s=QSXCR+Q6sek8bf92,i=4096", |e| {
            matches!(e, ClientError::Malformed(_))
        }),
    ];
    for (message, expected) in cases {
        let err = fresh().handle_server_first(message.as_bytes()).unwrap_err();
        assert!(expected(&err), "{message}: {err:?}");
    }

    let mut client = fresh();
    client
        .handle_server_first(b"r=CNs,s=QSXCR+Q6sek8bf92,i=4096")
        .unwrap();
    let err = client
        .handle_server_final(b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=")
        .unwrap_err();
    assert_eq!(err, ClientError::InvalidServerSignature);
    assert!(!client.is_complete());

    let mut client = fresh();
    client
        .handle_server_first(b"r=CNs,s=QSXCR+Q6sek8bf92,i=4096")
        .unwrap();
    let err = client.handle_server_final(b"e=invalid-proof").unwrap_err();
    assert_eq!(err, ClientError::Server("invalid-proof".to_owned()));

    let mut client = fresh();
    let err = client.client_first().unwrap_err();
    assert!(matches!(err, ClientError::IllegalState(_)));
}

#[test]
fn salts_look_like_kafkas() {
    use super::{kafka_style_salt, SALT_SEED_LEN};
    assert_eq!(kafka_style_salt(&[0; SALT_SEED_LEN]), b"0");
    let mut one = [0; SALT_SEED_LEN];
    one[SALT_SEED_LEN - 1] = 35;
    assert_eq!(kafka_style_salt(&one), b"z");
    one[SALT_SEED_LEN - 1] = 36;
    assert_eq!(kafka_style_salt(&one), b"10");
    // 2^130 - 1 in base 36 (only 130 bits of the seed count).
    let max = kafka_style_salt(&[0xff; SALT_SEED_LEN]);
    assert_eq!(max, b"1omfro7zwmumr3umxudzyj6scf");

    let credential = ScramCredential::from_password(ScramMechanism::Sha512, "pw", 4096).unwrap();
    assert!((20..=26).contains(&credential.salt.len()));
    assert!(credential
        .salt
        .iter()
        .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase()));

    // An unknown user's salt has the same shape.
    let store = Store::new();
    let mut server = ScramServer::new(ScramMechanism::Sha512, &store);
    let first = challenge(server.step(b"n,,n=ghost,r=abc").unwrap());
    let first = super::messages::parse_server_first(std::str::from_utf8(&first).unwrap()).unwrap();
    assert!((20..=26).contains(&first.salt.len()));
    assert!(first.salt.iter().all(|b| b.is_ascii_alphanumeric()));
}
