//! The subject of an X.509 certificate as an RFC 2253 string (`CN=client,OU=ops,O=Example`),
//! the form Kafka's `X500Principal.getName()` gives and `ssl.principal.mapping.rules` match.
//!
//! A small DER walk over `Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version
//! OPTIONAL, serialNumber, signature, issuer, validity, subject, ... } ... }`. The certificate
//! has been verified by rustls before it is read here; a malformed one gives `None`.

/// The subject DN of a DER certificate, RDNs in RFC 2253 order (last first).
pub fn subject_dn(der: &[u8]) -> Option<String> {
    let (cert, _) = element(der, 0x30)?;
    let (tbs, _) = element(cert, 0x30)?;
    let mut rest = tbs;
    if rest.first() == Some(&0xa0) {
        rest = element(rest, 0xa0)?.1;
    }
    rest = element(rest, 0x02)?.1; // serialNumber
    rest = element(rest, 0x30)?.1; // signature
    rest = element(rest, 0x30)?.1; // issuer
    rest = element(rest, 0x30)?.1; // validity
    let (subject, _) = element(rest, 0x30)?;
    let mut rdns = Vec::new();
    let mut sets = subject;
    while !sets.is_empty() {
        let (set, next) = element(sets, 0x31)?;
        sets = next;
        let mut attrs = Vec::new();
        let mut items = set;
        while !items.is_empty() {
            let (atv, next) = element(items, 0x30)?;
            items = next;
            let (oid, value) = element(atv, 0x06)?;
            let (tag, body, _) = any(value)?;
            let value = match tag {
                // UTF8String, PrintableString, IA5String, TeletexString (as Latin-1).
                0x0c | 0x13 | 0x16 => escape(std::str::from_utf8(body).ok()?),
                0x14 => escape(&body.iter().map(|b| *b as char).collect::<String>()),
                // BMPString.
                0x1e => {
                    let units: Vec<u16> = body
                        .chunks(2)
                        .map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))
                        .collect();
                    escape(&String::from_utf16_lossy(&units))
                }
                _ => format!("#{}", hex(&value[..value.len()])),
            };
            attrs.push(format!("{}={value}", attribute_name(oid)));
        }
        rdns.push(attrs.join("+"));
    }
    rdns.reverse();
    Some(rdns.join(","))
}

/// The element with `tag` at the start of `data`: (its contents, what follows it).
fn element(data: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (t, body, rest) = any(data)?;
    (t == tag).then_some((body, rest))
}

/// (tag, contents, rest) of the element at the start of `data`.
fn any(data: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let tag = *data.first()?;
    let first = *data.get(1)? as usize;
    let (len, header) = if first < 0x80 {
        (first, 2)
    } else {
        let n = first & 0x7f;
        if n == 0 || n > 4 {
            return None;
        }
        let bytes = data.get(2..2 + n)?;
        (
            bytes.iter().fold(0usize, |a, b| (a << 8) | *b as usize),
            2 + n,
        )
    };
    let body = data.get(header..header.checked_add(len)?)?;
    Some((tag, body, &data[header + len..]))
}

fn attribute_name(oid: &[u8]) -> String {
    match oid {
        [0x55, 0x04, 0x03] => "CN".into(),
        [0x55, 0x04, 0x06] => "C".into(),
        [0x55, 0x04, 0x07] => "L".into(),
        [0x55, 0x04, 0x08] => "ST".into(),
        [0x55, 0x04, 0x09] => "STREET".into(),
        [0x55, 0x04, 0x0a] => "O".into(),
        [0x55, 0x04, 0x0b] => "OU".into(),
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19] => "DC".into(),
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01] => "UID".into(),
        other => dotted(other),
    }
}

/// An OID in dotted form (`1.2.840.113549.1.9.1`).
fn dotted(oid: &[u8]) -> String {
    let mut parts = Vec::new();
    let mut value: u64 = 0;
    for b in oid {
        value = (value << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            if parts.is_empty() {
                let first = (value / 40).min(2);
                parts.push(first.to_string());
                parts.push((value - first * 40).to_string());
            } else {
                parts.push(value.to_string());
            }
            value = 0;
        }
    }
    parts.join(".")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// RFC 2253 escaping of an attribute value.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DER TLV with a short or long length.
    fn tlv(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        if body.len() < 0x80 {
            v.push(body.len() as u8);
        } else {
            v.push(0x82);
            v.extend_from_slice(&(body.len() as u16).to_be_bytes());
        }
        v.extend_from_slice(body);
        v
    }

    fn rdn(oid: &[u8], tag: u8, value: &str) -> Vec<u8> {
        let atv = [tlv(0x06, oid), tlv(tag, value.as_bytes())].concat();
        tlv(0x31, &tlv(0x30, &atv))
    }

    #[test]
    fn subject_is_given_in_rfc2253_order_with_escapes() {
        let name = [
            rdn(&[0x55, 0x04, 0x06], 0x13, "US"),
            rdn(&[0x55, 0x04, 0x0a], 0x0c, "Example, Inc"),
            rdn(&[0x55, 0x04, 0x03], 0x0c, "client-1"),
        ]
        .concat();
        let tbs = [
            tlv(0xa0, &tlv(0x02, &[2])),
            tlv(0x02, &[1]),
            tlv(0x30, &[]),
            tlv(0x30, &rdn(&[0x55, 0x04, 0x03], 0x0c, "ca")),
            tlv(0x30, &[]),
            tlv(0x30, &name),
            tlv(0x30, &[0u8; 200]),
        ]
        .concat();
        let cert = tlv(0x30, &[tlv(0x30, &tbs), tlv(0x30, &[])].concat());
        assert_eq!(
            subject_dn(&cert).as_deref(),
            Some("CN=client-1,O=Example\\, Inc,C=US")
        );
        assert_eq!(subject_dn(&cert[..10]), None);
    }

    #[test]
    fn unknown_attributes_are_dotted_oids() {
        assert_eq!(
            dotted(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01]),
            "1.2.840.113549.1.9.1"
        );
    }
}
