//! From a TLS client certificate to a principal: the subject's distinguished name as Kafka
//! writes it ([`distinguished_name`]), then `ssl.principal.mapping.rules`
//! ([`SslPrincipalMapper`], Kafka's `SslPrincipalMapper`).
//!
//! Rules are a comma-separated list, tried in order, the first that matches giving the name:
//!
//! - `DEFAULT`: the whole DN, e.g. `CN=alice,OU=eng,O=ferry`;
//! - `RULE:<pattern>/<replacement>/[L|U]`: if the regular expression matches the *whole* DN,
//!   the name is the DN with every match replaced (`$1`, `${name}` refer to groups; `\` escapes
//!   a character in the pattern or the replacement), then lower-cased (`L`) or upper-cased (`U`).
//!
//! Splitting follows Kafka's regular expression exactly (a rule's pattern may hold commas; empty
//! items are skipped; text after a rule's flag is an error), so a rule list Kafka accepts means
//! the same here. Patterns are compiled by the `regex` crate, which has no look-around and no
//! back-references: such a pattern is refused when the rules are parsed, not when a client
//! connects. A group reference beyond the pattern's groups is literal text, as Kafka makes it.

use std::fmt;

use regex::{Captures, Regex};

use crate::principal::KafkaPrincipal;

/// Kafka's default `ssl.principal.mapping.rules`.
pub const DEFAULT_RULES: &str = "DEFAULT";

/// A rule list that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Invalid rule: `{rule}`: {message}")]
pub struct MappingRuleError {
    /// The rule as written.
    pub rule: String,
    /// What is wrong with it.
    pub message: String,
}

/// No rule matched a DN (Kafka's `NoMatchingRule`); the connection cannot be given a principal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("No rules apply to {dn}, rules {rules}")]
pub struct NoMatchingRule {
    /// The DN no rule matched.
    pub dn: String,
    /// The rules, as [`SslPrincipalMapper`] prints them.
    pub rules: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Keep,
    Lower,
    Upper,
}

/// A piece of a parsed replacement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Literal(String),
    Group(usize),
    Named(String),
}

#[derive(Debug, Clone)]
enum Rule {
    Default,
    Pattern {
        pattern: String,
        replacement: String,
        /// The pattern anchored at both ends: Kafka's `matches()`.
        whole: Regex,
        /// The pattern as written: Kafka's `replaceAll`.
        search: Regex,
        pieces: Vec<Piece>,
        case: Case,
    },
}

impl Rule {
    fn apply(&self, dn: &str) -> Option<String> {
        match self {
            Rule::Default => Some(dn.to_owned()),
            Rule::Pattern {
                whole,
                search,
                pieces,
                case,
                ..
            } => {
                if !whole.is_match(dn) {
                    return None;
                }
                let replaced = replace_all_like_java(search, dn, pieces);
                Some(match case {
                    Case::Keep => replaced,
                    Case::Lower => replaced.to_lowercase(),
                    Case::Upper => replaced.to_uppercase(),
                })
            }
        }
    }
}

/// Java's `String.replaceAll`, which differs from `Regex::replace_all` in one case: after a
/// non-empty match, Java also takes an empty match at the same position (`(.*)` replaces "abc"
/// twice: the whole, then the empty end), while the regex crate skips it.
fn replace_all_like_java(search: &Regex, text: &str, pieces: &[Piece]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut from = 0;
    while from <= text.len() {
        let Some(caps) = search.captures_at(text, from) else {
            break;
        };
        let Some(whole) = caps.get(0) else {
            break;
        };
        out.push_str(&text[copied..whole.start()]);
        out.push_str(&expand(pieces, &caps));
        copied = whole.end();
        from = if whole.is_empty() {
            // Step over one character; past the end ends the loop.
            whole.end() + text[whole.end()..].chars().next().map_or(1, char::len_utf8)
        } else {
            whole.end()
        };
    }
    out.push_str(&text[copied..]);
    out
}

fn expand(pieces: &[Piece], caps: &Captures<'_>) -> String {
    let mut out = String::new();
    for piece in pieces {
        match piece {
            Piece::Literal(text) => out.push_str(text),
            Piece::Group(i) => out.push_str(caps.get(*i).map_or("", |m| m.as_str())),
            Piece::Named(name) => out.push_str(caps.name(name).map_or("", |m| m.as_str())),
        }
    }
    out
}

impl fmt::Display for Rule {
    /// As Kafka prints a rule: `DEFAULT`, or `RULE:<pattern>/<replacement>[/L|/U]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Default => f.write_str("DEFAULT"),
            Rule::Pattern {
                pattern,
                replacement,
                case,
                ..
            } => {
                write!(f, "RULE:{pattern}/{replacement}")?;
                match case {
                    Case::Keep => Ok(()),
                    Case::Lower => f.write_str("/L"),
                    Case::Upper => f.write_str("/U"),
                }
            }
        }
    }
}

/// Parses a replacement with Java's rules: `\c` is `c`; `$n` takes as many digits as still name
/// a group; `${name}` is a named group; a `$n` beyond the groups is literal (Kafka escapes it).
fn parse_replacement(text: &str, search: &Regex) -> Result<Vec<Piece>, String> {
    let groups = search.captures_len() - 1;
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(escaped) => literal.push(escaped),
                None => return Err("character to be escaped is missing in the replacement".into()),
            },
            '$' => match chars.peek().copied() {
                Some('{') => {
                    chars.next();
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(ch) if ch.is_ascii_alphanumeric() => name.push(ch),
                            _ => return Err("named group reference is not ${name}".into()),
                        }
                    }
                    if !search.capture_names().any(|n| n == Some(name.as_str())) {
                        return Err(format!("no group named '{name}' in the pattern"));
                    }
                    pieces.push(Piece::Literal(std::mem::take(&mut literal)));
                    pieces.push(Piece::Named(name));
                }
                Some(d) if d.is_ascii_digit() => {
                    let mut group = d.to_digit(10).map_or(0, |v| v as usize);
                    if group > groups {
                        literal.push('$');
                        continue;
                    }
                    chars.next();
                    while let Some(next) = chars.peek().and_then(|ch| ch.to_digit(10)) {
                        let longer = group * 10 + next as usize;
                        if longer > groups {
                            break;
                        }
                        group = longer;
                        chars.next();
                    }
                    pieces.push(Piece::Literal(std::mem::take(&mut literal)));
                    pieces.push(Piece::Group(group));
                }
                _ => {
                    return Err(
                        "illegal group reference: '$' must be followed by a group number or {name} (write \\$ for a dollar sign)"
                            .into(),
                    )
                }
            },
            other => literal.push(other),
        }
    }
    pieces.push(Piece::Literal(literal));
    pieces.retain(|p| !matches!(p, Piece::Literal(text) if text.is_empty()));
    Ok(pieces)
}

/// Where the separator `\s*(,\s*|$)` matches at byte `at`, the byte after it.
fn separator_at(s: &str, at: usize) -> Option<usize> {
    let rest = &s[at..];
    let trimmed = rest.trim_start_matches(is_java_space);
    if trimmed.is_empty() {
        return Some(s.len());
    }
    let after_comma = trimmed.strip_prefix(',')?;
    let next = after_comma.trim_start_matches(is_java_space);
    Some(s.len() - next.len())
}

/// Java's `\s`.
fn is_java_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\u{b}' | '\u{c}' | '\r')
}

/// The first separator at or after `from`: (where it starts, where the next item starts).
fn next_separator(s: &str, from: usize) -> (usize, usize) {
    let mut at = from;
    loop {
        if let Some(next) = separator_at(s, at) {
            return (at, next);
        }
        // separator_at is Some at the end of the string, so `at` is before it here.
        at += s[at..].chars().next().map_or(1, char::len_utf8);
    }
}

/// Reads `<pattern>/<replacement>/` (each part `(\\.|[^\\/])*`) and an optional `L` or `U`
/// flag from byte `at`; returns the parts, the case and the byte after them.
fn scan_rule_body(s: &str, at: usize) -> Option<(&str, &str, Case, usize)> {
    fn part(s: &str, at: usize) -> Option<(&str, usize)> {
        let mut chars = s[at..].char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    chars.next()?;
                }
                '/' => return Some((&s[at..at + i], at + i + 1)),
                _ => {}
            }
        }
        None
    }
    let (pattern, at) = part(s, at)?;
    let (replacement, at) = part(s, at)?;
    let (case, at) = match s[at..].chars().next() {
        Some('L') => (Case::Lower, at + 1),
        Some('U') => (Case::Upper, at + 1),
        _ => (Case::Keep, at),
    };
    Some((pattern, replacement, case, at))
}

fn compile(
    rule: &str,
    pattern: &str,
    replacement: &str,
    case: Case,
) -> Result<Rule, MappingRuleError> {
    let error = |message: String| MappingRuleError {
        rule: rule.to_owned(),
        message,
    };
    let search = Regex::new(pattern).map_err(|e| error(format!("bad pattern: {e}")))?;
    let whole =
        Regex::new(&format!("^(?:{pattern})$")).map_err(|e| error(format!("bad pattern: {e}")))?;
    let pieces = parse_replacement(replacement, &search).map_err(error)?;
    Ok(Rule::Pattern {
        pattern: pattern.to_owned(),
        replacement: replacement.to_owned(),
        whole,
        search,
        pieces,
        case,
    })
}

/// `ssl.principal.mapping.rules`, parsed: turns a certificate's DN into a principal name.
#[derive(Debug, Clone)]
pub struct SslPrincipalMapper {
    rules: Vec<Rule>,
}

impl Default for SslPrincipalMapper {
    /// Kafka's default, `DEFAULT`: the name is the DN.
    fn default() -> Self {
        SslPrincipalMapper {
            rules: vec![Rule::Default],
        }
    }
}

impl SslPrincipalMapper {
    /// Parses a rule list (e.g. `RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT`).
    pub fn from_rules(rules: &str) -> Result<Self, MappingRuleError> {
        let s = rules.trim_matches(|c: char| u32::from(c) <= 0x20);
        let mut parsed = Vec::new();
        let mut at = 0;
        while at < s.len() {
            at = s.len() - s[at..].trim_start_matches(is_java_space).len();
            let rest = &s[at..];
            if rest.starts_with("DEFAULT") {
                if let Some(next) = separator_at(s, at + "DEFAULT".len()) {
                    parsed.push(Rule::Default);
                    at = next;
                    continue;
                }
            }
            if rest.starts_with("RULE:") {
                if let Some((pattern, replacement, case, end)) =
                    scan_rule_body(s, at + "RULE:".len())
                {
                    let (sep, next) = next_separator(s, end);
                    let rule = &s[at..sep];
                    if sep > end {
                        return Err(MappingRuleError {
                            rule: rule.to_owned(),
                            message: format!("unmatched substring: `{}`", &s[end..sep]),
                        });
                    }
                    parsed.push(compile(rule, pattern, replacement, case)?);
                    at = next;
                    continue;
                }
            }
            let (sep, next) = next_separator(s, at);
            if sep > at {
                return Err(MappingRuleError {
                    rule: s[at..sep].to_owned(),
                    message: "expected DEFAULT or RULE:<pattern>/<replacement>/[L|U]".to_owned(),
                });
            }
            at = next;
        }
        Ok(SslPrincipalMapper { rules: parsed })
    }

    /// The principal name for `dn`: the first matching rule's result.
    pub fn name(&self, dn: &str) -> Result<String, NoMatchingRule> {
        self.rules
            .iter()
            .find_map(|rule| rule.apply(dn))
            .ok_or_else(|| NoMatchingRule {
                dn: dn.to_owned(),
                rules: self.rules_text(),
            })
    }

    /// `User:<name>` for `dn`.
    pub fn principal(&self, dn: &str) -> Result<KafkaPrincipal, NoMatchingRule> {
        self.name(dn).map(KafkaPrincipal::user)
    }

    fn rules_text(&self) -> String {
        let rules: Vec<String> = self.rules.iter().map(Rule::to_string).collect();
        format!("[{}]", rules.join(", "))
    }
}

impl fmt::Display for SslPrincipalMapper {
    /// As Kafka prints it: `SslPrincipalMapper(rules = [RULE:.../$1/L, DEFAULT])`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SslPrincipalMapper(rules = {})", self.rules_text())
    }
}

/// The value of one attribute of a certificate subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DnValue {
    /// A directory string (PrintableString, UTF8String, IA5String, ...), decoded.
    Text(String),
    /// The attribute value's full DER encoding, for attribute types Java has no keyword for
    /// (e.g. emailAddress): Java prints those as `#` and hex, and so does ferry.
    Der(Vec<u8>),
}

/// One attribute of a certificate subject: its type, as a dotted OID (`2.5.4.3`) or a keyword
/// (`CN`), and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnAttribute {
    /// OID or keyword.
    pub attribute_type: String,
    /// The value.
    pub value: DnValue,
}

impl DnAttribute {
    /// A text attribute.
    pub fn text(attribute_type: impl Into<String>, value: impl Into<String>) -> Self {
        DnAttribute {
            attribute_type: attribute_type.into(),
            value: DnValue::Text(value.into()),
        }
    }
}

/// The keywords Java's RFC 2253 form uses, with their OIDs.
const KEYWORDS: [(&str, &str); 9] = [
    ("CN", "2.5.4.3"),
    ("C", "2.5.4.6"),
    ("L", "2.5.4.7"),
    ("ST", "2.5.4.8"),
    ("O", "2.5.4.10"),
    ("OU", "2.5.4.11"),
    ("STREET", "2.5.4.9"),
    ("DC", "0.9.2342.19200300.100.1.25"),
    ("UID", "0.9.2342.19200300.100.1.1"),
];

/// The printed type: the keyword when Java has one, else the type as given (an OID).
fn attribute_keyword(attribute_type: &str) -> (&str, bool) {
    for (keyword, oid) in KEYWORDS {
        if attribute_type == oid || attribute_type.eq_ignore_ascii_case(keyword) {
            return (keyword, true);
        }
    }
    (attribute_type, false)
}

/// Escapes a value as Java's RFC 2253 output does: `\` before any of `,=+<>#;"\`, `\00` for
/// NUL, and `\` before leading and trailing spaces.
fn escape_value(value: &str) -> String {
    let chars: Vec<char> = value.chars().collect();
    let lead = chars.iter().take_while(|&&c| c == ' ').count();
    let trail = chars.len() - chars.iter().rev().take_while(|&&c| c == ' ').count();
    let mut out = String::with_capacity(value.len());
    for (i, &c) in chars.iter().enumerate() {
        match c {
            ',' | '=' | '+' | '<' | '>' | '#' | ';' | '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '\0' => out.push_str("\\00"),
            ' ' if i < lead || i >= trail => out.push_str("\\ "),
            _ => out.push(c),
        }
    }
    out
}

/// A certificate subject as Kafka sees it (Java's `X500Principal.getName()`, RFC 2253):
/// relative names most specific first, joined by `,` without spaces; attributes of one
/// multi-valued relative name joined by `+`. `rdns` is in the certificate's own order (the
/// order of the ASN.1 sequence, usually `C` first), as X.509 parsers return it.
///
/// A text value whose type has no keyword is printed as escaped text after its OID, where Java
/// would print `#` and the DER; pass [`DnValue::Der`] for such attributes to match Kafka exactly.
pub fn distinguished_name(rdns: &[Vec<DnAttribute>]) -> String {
    let mut out = String::new();
    for (i, rdn) in rdns.iter().rev().enumerate() {
        if i > 0 {
            out.push(',');
        }
        for (j, attribute) in rdn.iter().enumerate() {
            if j > 0 {
                out.push('+');
            }
            let (keyword, _) = attribute_keyword(&attribute.attribute_type);
            out.push_str(keyword);
            out.push('=');
            match &attribute.value {
                DnValue::Text(text) => out.push_str(&escape_value(text)),
                DnValue::Der(der) => {
                    out.push('#');
                    for byte in der {
                        out.push_str(&format!("{byte:02x}"));
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
#[path = "ssl_mapping_test.rs"]
mod tests;
