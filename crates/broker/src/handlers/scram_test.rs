use super::*;

fn base64(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut count = 0;
    let mut out = Vec::new();
    for c in text.bytes().filter(|&c| c != b'=') {
        let v = ALPHABET.iter().position(|&a| a == c).unwrap() as u32;
        bits = (bits << 6) | v;
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
            bits &= (1 << count) - 1;
        }
    }
    out
}

fn hmac_sha256(key: &[u8], text: &[u8]) -> Vec<u8> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap();
    mac.update(text);
    mac.finalize().into_bytes().to_vec()
}

/// RFC 5802's Hi(): PBKDF2 with HMAC, one block.
fn hi(password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
    let mut u = hmac_sha256(password, &[salt, &[0, 0, 0, 1]].concat());
    let mut out = u.clone();
    for _ in 1..iterations {
        u = hmac_sha256(password, &u);
        out.iter_mut().zip(&u).for_each(|(o, x)| *o ^= x);
    }
    out
}

/// RFC 7677 section 3: user "user", password "pencil". The keys derived from the salted
/// password must reproduce the example's client proof and server signature.
#[test]
fn scram_sha_256_keys_match_the_rfc_7677_example() {
    let salted = hi(b"pencil", &base64("W22ZaJ0SNY7soEsUEjb6gQ=="), 4096);
    let (stored_key, server_key) = scram_keys(ScramMechanism::ScramSha256, &salted);

    let auth_message = "n=user,r=rOprNGfwEbeRWgbNEkqO,\
        r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,\
        c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    // The server checks a proof: ClientKey = ClientProof XOR HMAC(StoredKey, AuthMessage),
    // and H(ClientKey) must be the StoredKey.
    let proof = base64("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=");
    let client_signature = hmac_sha256(&stored_key, auth_message.as_bytes());
    let client_key: Vec<u8> = proof
        .iter()
        .zip(&client_signature)
        .map(|(p, s)| p ^ s)
        .collect();
    assert_eq!(Sha256::digest(&client_key).to_vec(), stored_key);

    let server_signature = hmac_sha256(&server_key, auth_message.as_bytes());
    assert_eq!(
        server_signature,
        base64("6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    );
}

#[test]
fn scram_sha_512_keys_have_the_hash_length() {
    let (stored_key, server_key) = scram_keys(ScramMechanism::ScramSha512, b"salted");
    assert_eq!((stored_key.len(), server_key.len()), (64, 64));
}
