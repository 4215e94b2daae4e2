//! The grammar of SCRAM's four messages (RFC 5802 section 7), as Kafka accepts them: a GS2
//! header of `n` (no channel binding) with an optional `a=` authorization id, SASL names with
//! `=2C`/`=3D` escapes, printable nonces, and extensions (`key=value`) after the fixed
//! attributes. Every attribute value is free of commas, so a message splits on `,`.
//!
//! Parse errors are short static texts: they go to the broker's log, never to the client, and
//! they never quote the message (which may hold a proof).

use super::{b64_decode, b64_encode};

/// A parsed client-first-message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientFirst {
    /// `n,,` or `n,a=<authzid>,`; its base64 is the client-final `c=` value.
    pub gs2_header: String,
    /// The authorization id asked for, unescaped, if any.
    pub authzid: Option<String>,
    /// The user name, unescaped.
    pub username: String,
    /// The client's nonce.
    pub nonce: String,
    /// client-first-message-bare, part of the AuthMessage.
    pub bare: String,
    /// Extensions after the nonce (Kafka's `tokenauth=true`, ...).
    pub extensions: Vec<(String, String)>,
}

/// A parsed server-first-message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerFirst {
    /// Client nonce followed by server nonce.
    pub nonce: String,
    /// The user's salt.
    pub salt: Vec<u8>,
    /// The user's iteration count.
    pub iterations: u32,
}

/// A parsed client-final-message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientFinal {
    /// The decoded `c=` value: the GS2 header (no channel-binding data follows it).
    pub channel_binding: Vec<u8>,
    /// The combined nonce echoed back.
    pub nonce: String,
    /// The decoded ClientProof.
    pub proof: Vec<u8>,
    /// client-final-message-without-proof, part of the AuthMessage.
    pub without_proof: String,
}

/// A parsed server-final-message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ServerFinal {
    /// `v=`: the ServerSignature.
    Verifier(Vec<u8>),
    /// `e=`: the server's error value.
    Error(String),
}

/// Whether `s` is a valid nonce: one or more printable ASCII characters other than `,`.
fn is_printable(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

/// Unescapes a SASL name: `=2C` is `,`, `=3D` is `=`, any other `=` is an error.
pub(crate) fn decode_saslname(s: &str) -> Result<String, &'static str> {
    if s.is_empty() {
        return Err("empty SASL name");
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find('=') {
        out.push_str(&rest[..pos]);
        let escape = rest.get(pos..pos + 3);
        match escape {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err("invalid '=' escape in SASL name"),
        }
        rest = &rest[pos + 3..];
    }
    out.push_str(rest);
    if out.contains('\0') {
        return Err("NUL in SASL name");
    }
    Ok(out)
}

/// Escapes a user name as a SASL name.
pub(crate) fn encode_saslname(s: &str) -> String {
    s.replace('=', "=3D").replace(',', "=2C")
}

/// Splits `key=value` where the key is one ASCII letter or more and the value is not empty.
fn extension(attr: &str) -> Result<(String, String), &'static str> {
    match attr.split_once('=') {
        Some((key, value))
            if !key.is_empty()
                && key.bytes().all(|b| b.is_ascii_alphabetic())
                && !value.is_empty() =>
        {
            Ok((key.to_owned(), value.to_owned()))
        }
        _ => Err("malformed extension attribute"),
    }
}

fn attribute<'a>(attr: Option<&'a str>, name: &str) -> Result<&'a str, &'static str> {
    match attr.and_then(|a| a.strip_prefix(name)) {
        Some(value) => Ok(value),
        None => Err(match name {
            "n=" => "missing n= (user name) attribute",
            "r=" => "missing r= (nonce) attribute",
            "s=" => "missing s= (salt) attribute",
            "i=" => "missing i= (iterations) attribute",
            "c=" => "missing c= (channel binding) attribute",
            _ => "missing attribute",
        }),
    }
}

pub(crate) fn parse_client_first(text: &str) -> Result<ClientFirst, &'static str> {
    let (flag, rest) = text.split_once(',').ok_or("missing GS2 header")?;
    match flag {
        "n" => {}
        f if f.starts_with("p=") => return Err("client requested channel binding (p=)"),
        "y" => return Err("client supports channel binding (y); only n is accepted"),
        _ => return Err("malformed GS2 channel-binding flag"),
    }
    let (authz, bare) = rest.split_once(',').ok_or("malformed GS2 header")?;
    let authzid = match authz {
        "" => None,
        a => Some(decode_saslname(
            a.strip_prefix("a=")
                .ok_or("malformed GS2 authorization id")?,
        )?),
    };
    let gs2_header = text[..text.len() - bare.len()].to_owned();
    let mut attrs = bare.split(',');
    let first = attrs.next();
    if first.is_some_and(|a| a.starts_with("m=")) {
        return Err("mandatory extension (m=) is not supported");
    }
    let username = decode_saslname(attribute(first, "n=")?)?;
    let nonce = attribute(attrs.next(), "r=")?;
    if !is_printable(nonce) {
        return Err("client nonce is empty or not printable");
    }
    let extensions = attrs.map(extension).collect::<Result<Vec<_>, _>>()?;
    Ok(ClientFirst {
        gs2_header,
        authzid,
        username,
        nonce: nonce.to_owned(),
        bare: bare.to_owned(),
        extensions,
    })
}

/// `n,,n=<name>,r=<nonce>`: what [`super::ScramClient`] sends first.
pub(crate) fn format_client_first_bare(username: &str, nonce: &str) -> String {
    format!("n={},r={nonce}", encode_saslname(username))
}

pub(crate) fn format_server_first(first: &ServerFirst) -> String {
    format!(
        "r={},s={},i={}",
        first.nonce,
        b64_encode(&first.salt),
        first.iterations
    )
}

pub(crate) fn parse_server_first(text: &str) -> Result<ServerFirst, &'static str> {
    let mut attrs = text.split(',');
    let first = attrs.next();
    if first.is_some_and(|a| a.starts_with("m=")) {
        return Err("mandatory extension (m=) is not supported");
    }
    let nonce = attribute(first, "r=")?;
    if !is_printable(nonce) {
        return Err("server nonce is empty or not printable");
    }
    let salt = b64_decode(attribute(attrs.next(), "s=")?).ok_or("salt is not base64")?;
    if salt.is_empty() {
        return Err("empty salt");
    }
    let iterations = attribute(attrs.next(), "i=")?;
    if iterations.is_empty() || !iterations.bytes().all(|b| b.is_ascii_digit()) {
        return Err("iterations is not a number");
    }
    let iterations: u32 = iterations.parse().map_err(|_| "iterations out of range")?;
    if iterations == 0 {
        return Err("iterations is zero");
    }
    for attr in attrs {
        extension(attr)?;
    }
    Ok(ServerFirst {
        nonce: nonce.to_owned(),
        salt,
        iterations,
    })
}

/// client-final-message-without-proof for a GS2 header and combined nonce.
pub(crate) fn format_client_final_without_proof(gs2_header: &str, nonce: &str) -> String {
    format!("c={},r={nonce}", b64_encode(gs2_header.as_bytes()))
}

pub(crate) fn parse_client_final(text: &str) -> Result<ClientFinal, &'static str> {
    let (without_proof, proof) = text
        .rsplit_once(",p=")
        .ok_or("missing p= (proof) attribute")?;
    let proof = b64_decode(proof).ok_or("proof is not base64")?;
    let mut attrs = without_proof.split(',');
    let channel_binding =
        b64_decode(attribute(attrs.next(), "c=")?).ok_or("channel binding is not base64")?;
    let nonce = attribute(attrs.next(), "r=")?;
    if !is_printable(nonce) {
        return Err("nonce is empty or not printable");
    }
    for attr in attrs {
        extension(attr)?;
    }
    Ok(ClientFinal {
        channel_binding,
        nonce: nonce.to_owned(),
        proof,
        without_proof: without_proof.to_owned(),
    })
}

pub(crate) fn format_server_final(signature: &[u8]) -> String {
    format!("v={}", b64_encode(signature))
}

pub(crate) fn parse_server_final(text: &str) -> Result<ServerFinal, &'static str> {
    if let Some(error) = text.strip_prefix("e=") {
        if error.is_empty() || error.contains(',') {
            return Err("malformed server error");
        }
        return Ok(ServerFinal::Error(error.to_owned()));
    }
    let mut attrs = text.split(',');
    let verifier = attribute(attrs.next(), "v=").map_err(|_| "missing v= (verifier) attribute")?;
    let signature = b64_decode(verifier).ok_or("verifier is not base64")?;
    for attr in attrs {
        extension(attr)?;
    }
    Ok(ServerFinal::Verifier(signature))
}
