//! The JAAS text of Kafka's `sasl.jaas.config` (and `listener.name.<l>.<mechanism>.sasl.jaas.config`),
//! read as Kafka reads it, so that operators can paste what they already run:
//!
//! ```text
//! org.apache.kafka.common.security.plain.PlainLoginModule required
//!     username="admin" password="admin-secret"
//!     user_admin="admin-secret" user_alice="alice-secret";
//! ```
//!
//! Grammar (Kafka's `JaasConfig`, on Java's `StreamTokenizer`): entries of
//! `<login module class> <control flag> (<name>=<value>)* ;`. Names and values are words
//! (letters, digits, `_`, `$`, `-`, `.`, not starting with a digit, `-` or `.`) or strings quoted
//! with `"` or `'` in which a backslash escapes the next character (`\n`, `\t`, `\r`, `\b`, `\f`,
//! `\a`, `\v` and octal `\ooo` as in Java). `//`, `/* */` and a lone `/` start comments. Control
//! flags are case-insensitive.
//!
//! [`PlainJaasConfig`] and [`ScramJaasConfig`] give the options their meaning: `user_<name>` lists
//! the broker's PLAIN users, `username`/`password` are what this side sends when it is the client
//! (inter-broker). Every option value is a [`Secret`], and no error message quotes a value:
//! configuration errors end up in logs.

use std::fmt;

use crate::plain::PlainUsers;
use crate::secret::Secret;

/// Kafka's PLAIN login module class.
pub const PLAIN_LOGIN_MODULE: &str = "org.apache.kafka.common.security.plain.PlainLoginModule";
/// Kafka's SCRAM login module class.
pub const SCRAM_LOGIN_MODULE: &str = "org.apache.kafka.common.security.scram.ScramLoginModule";

/// A JAAS control flag. Kafka accepts all four; with one login module per mechanism they mean
/// the same thing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlFlag {
    /// `required`.
    Required,
    /// `requisite`.
    Requisite,
    /// `sufficient`.
    Sufficient,
    /// `optional`.
    Optional,
}

impl ControlFlag {
    fn parse(word: &str) -> Option<ControlFlag> {
        match word.to_ascii_uppercase().as_str() {
            "REQUIRED" => Some(ControlFlag::Required),
            "REQUISITE" => Some(ControlFlag::Requisite),
            "SUFFICIENT" => Some(ControlFlag::Sufficient),
            "OPTIONAL" => Some(ControlFlag::Optional),
            _ => None,
        }
    }
}

/// One login module entry: class, flag and options (in the order written; values hidden from
/// `Debug`).
#[derive(Debug, Clone)]
pub struct JaasEntry {
    /// The login module class name.
    pub login_module: String,
    /// The control flag.
    pub control_flag: ControlFlag,
    options: Vec<(String, Secret)>,
}

impl JaasEntry {
    /// The value of option `name`, if set.
    pub fn option(&self, name: &str) -> Option<&Secret> {
        self.options
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value)
    }

    /// Every option, in the order written.
    pub fn options(&self) -> impl Iterator<Item = (&str, &Secret)> {
        self.options
            .iter()
            .map(|(key, value)| (key.as_str(), value))
    }
}

/// A JAAS text that cannot be used. The message names the place and what was expected, never a
/// value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JaasError {
    /// The text does not follow the grammar.
    #[error("invalid JAAS config at line {line}, column {column}: {message}")]
    Syntax {
        /// 1-based line.
        line: usize,
        /// 1-based column (in characters).
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// The text parses but does not configure what it must.
    #[error("invalid JAAS config: {message}")]
    Invalid {
        /// What is wrong.
        message: String,
    },
}

impl JaasError {
    fn invalid(message: impl Into<String>) -> Self {
        JaasError::Invalid {
            message: message.into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// An unquoted word.
    Word(String),
    /// A quoted string, unescaped.
    Quoted(String),
    /// What Java's tokenizer reads as a number (a token starting with a digit, `.` or `-`).
    Number,
    /// Any other single character (`=`, `;`, ...).
    Char(char),
    Eof,
}

struct Lexer {
    chars: Vec<char>,
    pos: usize,
}

fn is_word_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == '$' || u32::from(c) >= 0xa0
}

fn is_word_char(c: char) -> bool {
    is_word_start(c) || c.is_ascii_digit() || c == '.' || c == '-'
}

impl Lexer {
    fn new(text: &str) -> Self {
        Lexer {
            chars: text.chars().collect(),
            pos: 0,
        }
    }

    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    fn error_at(&self, pos: usize, message: impl Into<String>) -> JaasError {
        let before = &self.chars[..pos.min(self.chars.len())];
        let line = before.iter().filter(|&&c| c == '\n').count() + 1;
        let column = before.iter().rev().take_while(|&&c| c != '\n').count() + 1;
        JaasError::Syntax {
            line,
            column,
            message: message.into(),
        }
    }

    /// Skips white space and comments.
    fn skip_blank(&mut self) -> Result<(), JaasError> {
        loop {
            match self.peek(0) {
                Some(c) if u32::from(c) <= 0x20 => self.pos += 1,
                Some('/') if self.peek(1) == Some('*') => {
                    let start = self.pos;
                    self.pos += 2;
                    loop {
                        match (self.peek(0), self.peek(1)) {
                            (Some('*'), Some('/')) => {
                                self.pos += 2;
                                break;
                            }
                            (Some(_), _) => self.pos += 1,
                            (None, _) => {
                                return Err(self.error_at(start, "unterminated /* comment"))
                            }
                        }
                    }
                }
                // `//` and, as in Java's tokenizer, a lone `/` comment out the rest of the line.
                Some('/') => {
                    while self.peek(0).is_some_and(|c| c != '\n') {
                        self.pos += 1;
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    /// The next token and the position where it starts.
    fn next(&mut self) -> Result<(Token, usize), JaasError> {
        self.skip_blank()?;
        let start = self.pos;
        let Some(c) = self.peek(0) else {
            return Ok((Token::Eof, start));
        };
        if c == '"' || c == '\'' {
            return Ok((Token::Quoted(self.quoted(c)?), start));
        }
        if c.is_ascii_digit() || c == '.' || c == '-' {
            while self.peek(0).is_some_and(is_word_char) {
                self.pos += 1;
            }
            return Ok((Token::Number, start));
        }
        if is_word_start(c) {
            while self.peek(0).is_some_and(is_word_char) {
                self.pos += 1;
            }
            return Ok((
                Token::Word(self.chars[start..self.pos].iter().collect()),
                start,
            ));
        }
        self.pos += 1;
        Ok((Token::Char(c), start))
    }

    fn quoted(&mut self, quote: char) -> Result<String, JaasError> {
        let start = self.pos;
        self.pos += 1;
        let mut out = String::new();
        loop {
            let Some(c) = self.peek(0) else {
                return Err(self.error_at(start, "unterminated quoted string"));
            };
            self.pos += 1;
            match c {
                c if c == quote => return Ok(out),
                '\n' | '\r' => {
                    return Err(self.error_at(start, "unterminated quoted string (line break)"))
                }
                '\\' => {
                    let Some(e) = self.peek(0) else {
                        return Err(self.error_at(start, "unterminated quoted string"));
                    };
                    self.pos += 1;
                    match e {
                        'a' => out.push('\u{7}'),
                        'b' => out.push('\u{8}'),
                        'f' => out.push('\u{c}'),
                        'n' => out.push('\n'),
                        'r' => out.push('\r'),
                        't' => out.push('\t'),
                        'v' => out.push('\u{b}'),
                        '0'..='7' => out.push(self.octal(e)),
                        other => out.push(other),
                    }
                }
                other => out.push(other),
            }
        }
    }

    /// Java's octal escape: up to three digits, three only if the first is 0-3.
    fn octal(&mut self, first: char) -> char {
        let digit = |c: char| c.to_digit(8);
        let mut value = digit(first).unwrap_or(0);
        let max_more = if first <= '3' { 2 } else { 1 };
        for _ in 0..max_more {
            match self.peek(0).and_then(digit) {
                Some(d) => {
                    value = value * 8 + d;
                    self.pos += 1;
                }
                None => break,
            }
        }
        char::from_u32(value).unwrap_or('\u{fffd}')
    }
}

/// Whether the token starting at `at` is an unquoted word (safe to quote in an error).
fn token_was_word(lexer: &Lexer, at: usize) -> bool {
    lexer.chars.get(at).is_some_and(|&c| is_word_start(c))
}

/// Parses a JAAS text into its entries (at least one).
pub fn parse(text: &str) -> Result<Vec<JaasEntry>, JaasError> {
    let mut lexer = Lexer::new(text);
    let mut entries = Vec::new();
    loop {
        let (token, at) = lexer.next()?;
        let login_module = match token {
            Token::Eof => break,
            Token::Word(s) | Token::Quoted(s) => s,
            _ => return Err(lexer.error_at(at, "expected a login module class name")),
        };
        let (token, at) = lexer.next()?;
        let control_flag = match token {
            Token::Eof => return Err(lexer.error_at(at, "Login module control flag not specified")),
            Token::Word(flag) | Token::Quoted(flag) => {
                ControlFlag::parse(&flag).ok_or_else(|| {
                    // A quoted string here is likely a misplaced value: never echo it.
                    let shown = if token_was_word(&lexer, at) {
                        format!("'{flag}'")
                    } else {
                        "(a quoted string)".to_owned()
                    };
                    lexer.error_at(
                        at,
                        format!("Invalid login module control flag {shown} (expected required, requisite, sufficient or optional)"),
                    )
                })?
            }
            _ => return Err(lexer.error_at(at, "Login module control flag not specified")),
        };
        let mut options: Vec<(String, Secret)> = Vec::new();
        loop {
            let (token, key_at) = lexer.next()?;
            let (key, shown) = match token {
                Token::Char(';') => break,
                Token::Eof => {
                    return Err(
                        lexer.error_at(key_at, "JAAS config entry not terminated by semi-colon")
                    )
                }
                Token::Word(key) => (key.clone(), format!("'{key}'")),
                // A quoted name may be a value that lost its key: never echo it.
                Token::Quoted(key) => (key, "(quoted)".to_owned()),
                _ => return Err(lexer.error_at(key_at, "expected an option name or ';'")),
            };
            let (token, at) = lexer.next()?;
            if token != Token::Char('=') {
                return Err(lexer.error_at(
                    at,
                    format!("Value not specified for key {shown} (expected '=')"),
                ));
            }
            let (token, at) = lexer.next()?;
            let value = match token {
                Token::Word(value) | Token::Quoted(value) => value,
                Token::Number => {
                    return Err(lexer.error_at(
                        at,
                        format!("value of {shown} must be quoted: unquoted values may not start with a digit, '.' or '-'"),
                    ))
                }
                _ => return Err(lexer.error_at(at, format!("Value not specified for key {shown}"))),
            };
            if options.iter().any(|(k, _)| *k == key) {
                return Err(lexer.error_at(key_at, format!("option {shown} is set twice")));
            }
            options.push((key, Secret::new(value)));
        }
        entries.push(JaasEntry {
            login_module,
            control_flag,
            options,
        });
    }
    if entries.is_empty() {
        return Err(JaasError::invalid(
            "Login module not specified in JAAS config",
        ));
    }
    Ok(entries)
}

/// Parses a JAAS text that must hold exactly one entry, as a listener's `sasl.jaas.config` must
/// in Kafka.
pub fn parse_single(text: &str) -> Result<JaasEntry, JaasError> {
    let mut entries = parse(text)?;
    if entries.len() != 1 {
        return Err(JaasError::invalid(format!(
            "JAAS config property contains {} login modules, should be 1 module",
            entries.len()
        )));
    }
    entries
        .pop()
        .ok_or_else(|| JaasError::invalid("Login module not specified in JAAS config"))
}

/// The client side of a login module: who this process authenticates as.
#[derive(Clone)]
pub struct JaasLogin {
    /// The `username` option.
    pub username: String,
    /// The `password` option.
    pub password: Secret,
}

impl fmt::Debug for JaasLogin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JaasLogin")
            .field("username", &self.username)
            .field("password", &self.password)
            .finish()
    }
}

/// `username` and `password` together, or neither.
fn login_of(entry: &JaasEntry) -> Result<Option<JaasLogin>, JaasError> {
    match (entry.option("username"), entry.option("password")) {
        (Some(username), Some(password)) => Ok(Some(JaasLogin {
            username: username.expose().to_owned(),
            password: password.clone(),
        })),
        (None, None) => Ok(None),
        (Some(_), None) => Err(JaasError::invalid(format!(
            "{} sets 'username' but not 'password'",
            entry.login_module
        ))),
        (None, Some(_)) => Err(JaasError::invalid(format!(
            "{} sets 'password' but not 'username'",
            entry.login_module
        ))),
    }
}

fn expect_module(entry: &JaasEntry, expected: &str, mechanism: &str) -> Result<(), JaasError> {
    if entry.login_module == expected {
        Ok(())
    } else {
        Err(JaasError::invalid(format!(
            "login module for {mechanism} must be {expected}, found {}",
            entry.login_module
        )))
    }
}

/// What `PlainLoginModule` configures: the broker's PLAIN users and this side's own login.
#[derive(Debug, Clone)]
pub struct PlainJaasConfig {
    /// `username`/`password`: what this side sends as a client (inter-broker).
    pub login: Option<JaasLogin>,
    /// The `user_<name>="<password>"` options: who may log in to this broker with PLAIN.
    pub users: PlainUsers,
}

impl PlainJaasConfig {
    /// Parses a JAAS text holding exactly one `PlainLoginModule` entry.
    pub fn parse(text: &str) -> Result<Self, JaasError> {
        Self::from_entry(&parse_single(text)?)
    }

    /// Reads a parsed `PlainLoginModule` entry.
    pub fn from_entry(entry: &JaasEntry) -> Result<Self, JaasError> {
        expect_module(entry, PLAIN_LOGIN_MODULE, "PLAIN")?;
        let mut users = PlainUsers::new();
        for (key, value) in entry.options() {
            if let Some(name) = key.strip_prefix("user_") {
                if name.is_empty() {
                    return Err(JaasError::invalid(
                        "option 'user_' names no user (write user_<name>=\"<password>\")",
                    ));
                }
                users.insert(name, value);
            }
        }
        Ok(PlainJaasConfig {
            login: login_of(entry)?,
            users,
        })
    }
}

/// What `ScramLoginModule` configures: this side's own login (the broker's SCRAM users live in
/// the metadata log, not in JAAS).
#[derive(Debug, Clone)]
pub struct ScramJaasConfig {
    /// `username`/`password`: what this side sends as a client (inter-broker).
    pub login: Option<JaasLogin>,
}

impl ScramJaasConfig {
    /// Parses a JAAS text holding exactly one `ScramLoginModule` entry.
    pub fn parse(text: &str) -> Result<Self, JaasError> {
        Self::from_entry(&parse_single(text)?)
    }

    /// Reads a parsed `ScramLoginModule` entry. `tokenauth=true` (delegation tokens) is refused:
    /// ferry does not issue delegation tokens.
    pub fn from_entry(entry: &JaasEntry) -> Result<Self, JaasError> {
        expect_module(entry, SCRAM_LOGIN_MODULE, "SCRAM")?;
        if entry
            .option("tokenauth")
            .is_some_and(|v| v.expose().eq_ignore_ascii_case("true"))
        {
            return Err(JaasError::invalid(
                "tokenauth=true (delegation-token login) is not supported by ferry",
            ));
        }
        Ok(ScramJaasConfig {
            login: login_of(entry)?,
        })
    }
}

#[cfg(test)]
#[path = "jaas_test.rs"]
mod tests;
