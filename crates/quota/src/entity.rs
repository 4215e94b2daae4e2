//! The vocabulary of client quotas: which limit ([`QuotaKey`]), on whom ([`QuotaEntity`]), at
//! which level of Kafka's precedence ([`QuotaLevel`]), and under which name the usage is counted
//! ([`MetricKey`]).
//!
//! Names follow Kafka's: an entity is a user, a client id, or both, where either part may be the
//! *default* (`<default>` in `kafka-configs`, a null entity name in AlterClientQuotas and in the
//! metadata log's `ClientQuotaRecord`). A default entity is a template: it gives every user (or
//! client id) that has no more specific quota a limit *of its own*; it is not a limit shared by
//! all of them.

use std::fmt;

use crate::error::QuotaError;

/// One of Kafka's client-quota config keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QuotaKey {
    /// `producer_byte_rate`: bytes per second of produce requests.
    ProducerByteRate,
    /// `consumer_byte_rate`: bytes per second of fetch responses.
    ConsumerByteRate,
    /// `request_percentage`: percent of one request-handler or network thread's time per
    /// second (KIP-124); a client may use `n × 100` on a broker with `n` threads.
    RequestPercentage,
    /// `controller_mutation_rate`: partitions created or deleted per second (KIP-599),
    /// enforced with a token bucket ([`crate::TokenBucket`]).
    ControllerMutationRate,
    /// `connection_creation_rate`: new connections per second from one IP (KIP-612). Known so
    /// that it is not reported as an unknown key; it belongs to IP entities, not to users or
    /// client ids.
    ConnectionCreationRate,
}

impl QuotaKey {
    /// Every key, in a fixed order (the index order of per-entity tables).
    pub const ALL: [QuotaKey; 5] = [
        QuotaKey::ProducerByteRate,
        QuotaKey::ConsumerByteRate,
        QuotaKey::RequestPercentage,
        QuotaKey::ControllerMutationRate,
        QuotaKey::ConnectionCreationRate,
    ];

    /// The config name, as `kafka-configs` and AlterClientQuotas spell it.
    pub fn name(self) -> &'static str {
        match self {
            QuotaKey::ProducerByteRate => "producer_byte_rate",
            QuotaKey::ConsumerByteRate => "consumer_byte_rate",
            QuotaKey::RequestPercentage => "request_percentage",
            QuotaKey::ControllerMutationRate => "controller_mutation_rate",
            QuotaKey::ConnectionCreationRate => "connection_creation_rate",
        }
    }

    /// Parses a config name; an unknown name is [`QuotaError::UnknownKey`].
    pub fn parse(name: &str) -> Result<QuotaKey, QuotaError> {
        QuotaKey::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .ok_or_else(|| QuotaError::UnknownKey(name.to_owned()))
    }

    /// Whether Kafka defines the key as an integer (LONG or INT) rather than a DOUBLE.
    pub fn is_integral(self) -> bool {
        matches!(
            self,
            QuotaKey::ProducerByteRate
                | QuotaKey::ConsumerByteRate
                | QuotaKey::ConnectionCreationRate
        )
    }

    /// Whether the key may be set on a user and/or client-id entity (all but
    /// `connection_creation_rate`, which is for IP entities).
    pub fn applies_to_user_or_client(self) -> bool {
        self != QuotaKey::ConnectionCreationRate
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for QuotaKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One part of an entity: a specific name, or the default for that entity type.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EntityName {
    /// A specific user principal name or client id.
    Named(String),
    /// `<default>`: applies to each user (or client id) with no more specific quota.
    Default,
}

impl EntityName {
    /// From the wire and metadata form, where `None` (a null entity name) means the default.
    pub fn from_wire(name: Option<&str>) -> EntityName {
        match name {
            Some(n) => EntityName::Named(n.to_owned()),
            None => EntityName::Default,
        }
    }

    /// The wire and metadata form: `None` for the default.
    pub fn as_wire(&self) -> Option<&str> {
        match self {
            EntityName::Named(n) => Some(n),
            EntityName::Default => None,
        }
    }
}

impl fmt::Display for EntityName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntityName::Named(n) => f.write_str(n),
            EntityName::Default => f.write_str("<default>"),
        }
    }
}

/// The target of a quota: a user, a client id, or a (user, client id) pair, each part specific
/// or default. At least one part is present (checked by [`QuotaEntity::validate`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QuotaEntity {
    /// The user part (`user` entity type), if any.
    pub user: Option<EntityName>,
    /// The client-id part (`client-id` entity type), if any.
    pub client_id: Option<EntityName>,
}

impl QuotaEntity {
    /// `/config/users/<user>`.
    pub fn user(user: &str) -> Self {
        Self::new(Some(EntityName::Named(user.to_owned())), None)
    }
    /// `/config/users/<default>`.
    pub fn default_user() -> Self {
        Self::new(Some(EntityName::Default), None)
    }
    /// `/config/clients/<client-id>`.
    pub fn client(client_id: &str) -> Self {
        Self::new(None, Some(EntityName::Named(client_id.to_owned())))
    }
    /// `/config/clients/<default>`.
    pub fn default_client() -> Self {
        Self::new(None, Some(EntityName::Default))
    }
    /// `/config/users/<user>/clients/<client-id>` (either part may be [`EntityName::Default`]).
    pub fn user_client(user: EntityName, client_id: EntityName) -> Self {
        Self::new(Some(user), Some(client_id))
    }
    /// An entity from its two optional parts.
    pub fn new(user: Option<EntityName>, client_id: Option<EntityName>) -> Self {
        Self { user, client_id }
    }

    /// Checks what Kafka's controller checks: at least one part, and no empty name.
    pub fn validate(&self) -> Result<(), QuotaError> {
        if self.user.is_none() && self.client_id.is_none() {
            return Err(QuotaError::InvalidEntity(
                "empty client quota entity".to_owned(),
            ));
        }
        if matches!(&self.user, Some(EntityName::Named(n)) if n.is_empty()) {
            return Err(QuotaError::InvalidEntity(
                "empty user not supported".to_owned(),
            ));
        }
        if matches!(&self.client_id, Some(EntityName::Named(n)) if n.is_empty()) {
            return Err(QuotaError::InvalidEntity(
                "empty client-id not supported".to_owned(),
            ));
        }
        Ok(())
    }

    /// The precedence level this entity occupies, or `None` for an invalid (empty) entity.
    pub fn level(&self) -> Option<QuotaLevel> {
        use EntityName::{Default as D, Named as N};
        Some(match (&self.user, &self.client_id) {
            (Some(N(_)), Some(N(_))) => QuotaLevel::UserClient,
            (Some(N(_)), Some(D)) => QuotaLevel::UserDefaultClient,
            (Some(N(_)), None) => QuotaLevel::User,
            (Some(D), Some(N(_))) => QuotaLevel::DefaultUserClient,
            (Some(D), Some(D)) => QuotaLevel::DefaultUserDefaultClient,
            (Some(D), None) => QuotaLevel::DefaultUser,
            (None, Some(N(_))) => QuotaLevel::Client,
            (None, Some(D)) => QuotaLevel::DefaultClient,
            (None, None) => return None,
        })
    }
}

impl fmt::Display for QuotaEntity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.user, &self.client_id) {
            (Some(u), Some(c)) => write!(f, "user {u} client-id {c}"),
            (Some(u), None) => write!(f, "user {u}"),
            (None, Some(c)) => write!(f, "client-id {c}"),
            (None, None) => f.write_str("empty entity"),
        }
    }
}

/// The eight levels of Kafka's order of precedence, most specific first: for a connection of
/// user `U` with client id `C`, the first level that has a quota for the key is the one applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QuotaLevel {
    /// 1. `/config/users/U/clients/C`
    UserClient,
    /// 2. `/config/users/U/clients/<default>`
    UserDefaultClient,
    /// 3. `/config/users/U`
    User,
    /// 4. `/config/users/<default>/clients/C`
    DefaultUserClient,
    /// 5. `/config/users/<default>/clients/<default>`
    DefaultUserDefaultClient,
    /// 6. `/config/users/<default>`
    DefaultUser,
    /// 7. `/config/clients/C`
    Client,
    /// 8. `/config/clients/<default>`
    DefaultClient,
}

impl QuotaLevel {
    /// All levels in precedence order, most specific first.
    pub const PRECEDENCE: [QuotaLevel; 8] = [
        QuotaLevel::UserClient,
        QuotaLevel::UserDefaultClient,
        QuotaLevel::User,
        QuotaLevel::DefaultUserClient,
        QuotaLevel::DefaultUserDefaultClient,
        QuotaLevel::DefaultUser,
        QuotaLevel::Client,
        QuotaLevel::DefaultClient,
    ];

    /// The usage bucket for a connection of `user` and `client_id` whose quota comes from this
    /// level, as Kafka's default quota callback tags its sensors: a level that names a user part
    /// (specific or default) keeps the user, one that names a client part keeps the client id,
    /// and the other part is empty. So a user-level quota (3 or 6) is shared by all of that
    /// user's client ids, a client-level quota (7 or 8) by all users of that client id, and the
    /// (user, client) levels (1, 2, 4, 5) count each pair on its own.
    pub fn metric_key(self, user: &str, client_id: &str) -> MetricKey {
        let (u, c) = self.tags(user, client_id);
        MetricKey::new(u, c)
    }

    /// The `user` and `client-id` tags of [`QuotaLevel::metric_key`], borrowed.
    pub fn tags<'a>(self, user: &'a str, client_id: &'a str) -> (&'a str, &'a str) {
        let (has_user, has_client) = match self {
            QuotaLevel::UserClient
            | QuotaLevel::UserDefaultClient
            | QuotaLevel::DefaultUserClient
            | QuotaLevel::DefaultUserDefaultClient => (true, true),
            QuotaLevel::User | QuotaLevel::DefaultUser => (true, false),
            QuotaLevel::Client | QuotaLevel::DefaultClient => (false, true),
        };
        (
            if has_user { user } else { "" },
            if has_client { client_id } else { "" },
        )
    }
}

/// Whose usage a sensor counts: Kafka's quota metric tags `user` and `client-id`, where an empty
/// string means "not part of this bucket". Every connection that resolves to the same
/// `MetricKey` (for the same [`QuotaKey`]) shares one rate.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MetricKey {
    /// The `user` tag: the principal name, or empty.
    pub user: String,
    /// The `client-id` tag: the client id, or empty.
    pub client_id: String,
}

impl MetricKey {
    /// A key from its two tags.
    pub fn new(user: &str, client_id: &str) -> Self {
        Self {
            user: user.to_owned(),
            client_id: client_id.to_owned(),
        }
    }
}

impl fmt::Display for MetricKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "user={:?} client-id={:?}", self.user, self.client_id)
    }
}
