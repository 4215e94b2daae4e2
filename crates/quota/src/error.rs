//! The crate's error type. Every error here is a wrong input (an unknown key, a bad value, an
//! entity Kafka does not accept); none is worth retrying unchanged.

/// Why a quota key, value or entity was rejected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum QuotaError {
    /// The key is not one of Kafka's client-quota keys.
    #[error("invalid configuration key {0}")]
    UnknownKey(String),
    /// The key exists but does not apply to this kind of entity (for example
    /// `connection_creation_rate` on a user, which Kafka only accepts for an IP entity).
    #[error("{key} cannot be set on {entity}")]
    KeyNotForEntity {
        /// The key's config name.
        key: &'static str,
        /// The entity it was set on.
        entity: String,
    },
    /// Kafka requires every quota to be greater than zero (and finite).
    #[error("quota {key} must be greater than 0, got {value}")]
    NotPositive {
        /// The key's config name.
        key: &'static str,
        /// The rejected value.
        value: f64,
    },
    /// Byte rates and connection rates are integers in Kafka's config definitions.
    #[error("{key} cannot be a fractional value, got {value}")]
    Fractional {
        /// The key's config name.
        key: &'static str,
        /// The rejected value.
        value: f64,
    },
    /// The value does not fit the key's integer type.
    #[error("proposed value for {key} is too large: {value}")]
    TooLarge {
        /// The key's config name.
        key: &'static str,
        /// The rejected value.
        value: f64,
    },
    /// `quota.window.num` and `quota.window.size.seconds` must both be at least 1.
    #[error("invalid quota window: {samples} samples of {window_ms} ms")]
    InvalidWindow {
        /// The `quota.window.num` given.
        samples: u32,
        /// The window length given, in milliseconds.
        window_ms: i64,
    },
    /// An entity name was empty, or the entity named neither a user nor a client id.
    #[error("invalid quota entity: {0}")]
    InvalidEntity(String),
}

impl QuotaError {
    /// Always false: every variant describes input that will fail again unchanged. Present so
    /// that callers can treat this error like the other crates' errors.
    pub fn is_retriable(&self) -> bool {
        false
    }
}
