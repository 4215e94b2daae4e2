//! [`Secret`]: a string that must not leak through logs. Its `Debug` and `Display` print
//! `[hidden]`; reading it takes an explicit [`Secret::expose`], easy to find in review.

use std::fmt;

use subtle::ConstantTimeEq;

/// A password or other secret text; prints as `[hidden]`.
#[derive(Clone, Default)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself, for the one place that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the secret is the empty string.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Compares with another secret in time that depends on the lengths only, not on where the
    /// bytes first differ.
    pub fn ct_eq(&self, other: &Secret) -> bool {
        self.0.as_bytes().ct_eq(other.0.as_bytes()).into()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[hidden]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[hidden]")
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Secret(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Secret(value.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_hide_the_value() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?}"), "[hidden]");
        assert_eq!(format!("{s}"), "[hidden]");
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn constant_time_equality() {
        assert!(Secret::new("a").ct_eq(&Secret::new("a")));
        assert!(!Secret::new("a").ct_eq(&Secret::new("b")));
        assert!(!Secret::new("a").ct_eq(&Secret::new("ab")));
    }
}
