//! [`QuotaConfig`]: the client quotas currently in force, as the broker learns them from the
//! cluster metadata image (Kafka's `ClientQuotaRecord`s), and the lookup that tells which quota
//! applies to a connection and under which usage bucket it is counted.
//!
//! Invariants:
//! - every stored value passed [`validate_quota`] (positive, finite, integral for byte rates);
//! - every stored entity has a user or a client-id part, and no part is an empty name;
//! - no table keeps an entry whose quotas are all unset, so memory follows what is configured,
//!   not what was ever configured.
//!
//! The lookup works on borrowed `&str` names and does at most eight hash lookups (one per level
//! of precedence, fewer when a user has no quotas of its own): it runs for every request.

use std::collections::HashMap;

use crate::entity::{EntityName, MetricKey, QuotaEntity, QuotaKey, QuotaLevel};
use crate::error::QuotaError;

/// The quota values set on one entity, indexed by [`QuotaKey::index`].
type Limits = [Option<f64>; QuotaKey::ALL.len()];

fn limits_empty(l: &Limits) -> bool {
    l.iter().all(Option::is_none)
}

/// The quotas that share one user part (a named user, the default user, or no user at all).
#[derive(Debug, Default, Clone)]
struct UserTable {
    /// The entity with only this user part (levels 3 and 6); unused for the no-user table.
    own: Limits,
    /// (this user part, named client id) entities (levels 1, 4 and 7).
    clients: HashMap<String, Limits>,
    /// (this user part, default client id) entities (levels 2, 5 and 8).
    default_client: Limits,
}

impl UserTable {
    fn is_empty(&self) -> bool {
        limits_empty(&self.own) && self.clients.is_empty() && limits_empty(&self.default_client)
    }
}

/// What [`QuotaConfig::resolve`] found for a connection.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedQuota {
    /// The limit, in the key's unit (bytes/s, percent, mutations/s).
    pub bound: f64,
    /// Which level of precedence supplied it.
    pub level: QuotaLevel,
    /// The usage bucket the connection's traffic is counted in.
    pub metric_key: MetricKey,
}

/// The client quotas in force on this broker, filled from the metadata image: set and remove
/// one value at a time as records arrive, or replace everything from a snapshot.
#[derive(Debug, Default, Clone)]
pub struct QuotaConfig {
    users: HashMap<String, UserTable>,
    default_user: UserTable,
    no_user: UserTable,
    /// How many entities have each key set, so that a broker can skip all quota work for a key
    /// nobody has configured (Kafka's `quotasEnabled`).
    counts: [usize; QuotaKey::ALL.len()],
}

impl QuotaConfig {
    /// An empty configuration: no quotas, nothing throttled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `value` on `entity`, returning the value it replaces. The value and entity
    /// are checked with [`validate_quota`]; on error nothing changes.
    pub fn set(
        &mut self,
        entity: &QuotaEntity,
        key: QuotaKey,
        value: f64,
    ) -> Result<Option<f64>, QuotaError> {
        validate_quota(entity, key, value)?;
        let limits = self.limits_mut(entity);
        let old = limits[key.index()].replace(value);
        if old.is_none() {
            self.counts[key.index()] += 1;
        }
        Ok(old)
    }

    /// Removes `key` from `entity`, returning the value it had (a `ClientQuotaRecord` with
    /// `remove = true`). Removing what is not set is not an error.
    pub fn remove(&mut self, entity: &QuotaEntity, key: QuotaKey) -> Option<f64> {
        let i = key.index();
        let old = {
            let table = self.table_mut_existing(entity.user.as_ref())?;
            let old = match &entity.client_id {
                None => table.own[i].take(),
                Some(EntityName::Default) => table.default_client[i].take(),
                Some(EntityName::Named(c)) => {
                    let limits = table.clients.get_mut(c)?;
                    let old = limits[i].take();
                    if limits_empty(limits) {
                        table.clients.remove(c);
                    }
                    old
                }
            };
            old?
        };
        self.counts[i] -= 1;
        if let Some(EntityName::Named(u)) = &entity.user {
            if self.users.get(u).is_some_and(UserTable::is_empty) {
                self.users.remove(u);
            }
        }
        Some(old)
    }

    /// Replaces every quota with `entries` (a metadata snapshot). All entries are checked first;
    /// on error the configuration is left as it was.
    pub fn replace_all<I>(&mut self, entries: I) -> Result<(), QuotaError>
    where
        I: IntoIterator<Item = (QuotaEntity, QuotaKey, f64)>,
    {
        let mut next = QuotaConfig::new();
        for (entity, key, value) in entries {
            next.set(&entity, key, value)?;
        }
        *self = next;
        Ok(())
    }

    /// The value of `key` set on exactly `entity` (no precedence applied).
    pub fn get(&self, entity: &QuotaEntity, key: QuotaKey) -> Option<f64> {
        let table = match &entity.user {
            Some(EntityName::Named(u)) => self.users.get(u)?,
            Some(EntityName::Default) => &self.default_user,
            None => &self.no_user,
        };
        let limits = match &entity.client_id {
            None => &table.own,
            Some(EntityName::Default) => &table.default_client,
            Some(EntityName::Named(c)) => table.clients.get(c)?,
        };
        limits[key.index()]
    }

    /// Every (entity, key, value) set, sorted by entity then key: what DescribeClientQuotas and
    /// a snapshot need.
    pub fn entries(&self) -> Vec<(QuotaEntity, QuotaKey, f64)> {
        let mut out = Vec::new();
        let tables = self
            .users
            .iter()
            .map(|(u, t)| (Some(EntityName::Named(u.clone())), t))
            .chain([
                (Some(EntityName::Default), &self.default_user),
                (None, &self.no_user),
            ]);
        for (user, table) in tables {
            let mut push = |client: Option<EntityName>, limits: &Limits| {
                for key in QuotaKey::ALL {
                    if let Some(v) = limits[key.index()] {
                        out.push((QuotaEntity::new(user.clone(), client.clone()), key, v));
                    }
                }
            };
            if user.is_some() {
                push(None, &table.own);
            }
            push(Some(EntityName::Default), &table.default_client);
            for (c, limits) in &table.clients {
                push(Some(EntityName::Named(c.clone())), limits);
            }
        }
        out.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        out
    }

    /// Whether any entity has `key` set; when false, a broker need not record usage for it.
    pub fn has_quotas(&self, key: QuotaKey) -> bool {
        self.counts[key.index()] > 0
    }

    /// Whether no quota at all is set.
    pub fn is_empty(&self) -> bool {
        self.counts.iter().all(|&n| n == 0)
    }

    /// The quota `key` that applies to a connection of `user` (the principal name, e.g.
    /// `ANONYMOUS` on an unauthenticated listener) with `client_id`, and the usage bucket it is
    /// counted in; `None` when no level of precedence sets `key` for it.
    pub fn quota_for(
        &self,
        key: QuotaKey,
        user: &str,
        client_id: &str,
    ) -> Option<(f64, MetricKey)> {
        self.resolve(key, user, client_id)
            .map(|r| (r.bound, r.metric_key))
    }

    /// Like [`QuotaConfig::quota_for`], also saying which level supplied the quota.
    pub fn resolve(&self, key: QuotaKey, user: &str, client_id: &str) -> Option<ResolvedQuota> {
        let (bound, level) = self.resolve_level(key, user, client_id)?;
        Some(ResolvedQuota {
            bound,
            level,
            metric_key: level.metric_key(user, client_id),
        })
    }

    /// The bound and the borrowed usage-bucket tags (`user`, `client-id`), without allocating:
    /// the per-request form of [`QuotaConfig::quota_for`].
    pub fn quota_tags_for<'a>(
        &self,
        key: QuotaKey,
        user: &'a str,
        client_id: &'a str,
    ) -> Option<(f64, &'a str, &'a str)> {
        let (bound, level) = self.resolve_level(key, user, client_id)?;
        let (u, c) = level.tags(user, client_id);
        Some((bound, u, c))
    }

    /// Walks the eight levels in Kafka's order; the first one with `key` set wins.
    fn resolve_level(
        &self,
        key: QuotaKey,
        user: &str,
        client_id: &str,
    ) -> Option<(f64, QuotaLevel)> {
        let i = key.index();
        let named = self.users.get(user);
        let client_of = |t: &UserTable| t.clients.get(client_id).and_then(|l| l[i]);
        let at = |level: QuotaLevel, v: Option<f64>| v.map(|b| (b, level));
        named
            .and_then(|t| at(QuotaLevel::UserClient, client_of(t)))
            .or_else(|| named.and_then(|t| at(QuotaLevel::UserDefaultClient, t.default_client[i])))
            .or_else(|| named.and_then(|t| at(QuotaLevel::User, t.own[i])))
            .or_else(|| at(QuotaLevel::DefaultUserClient, client_of(&self.default_user)))
            .or_else(|| {
                at(
                    QuotaLevel::DefaultUserDefaultClient,
                    self.default_user.default_client[i],
                )
            })
            .or_else(|| at(QuotaLevel::DefaultUser, self.default_user.own[i]))
            .or_else(|| at(QuotaLevel::Client, client_of(&self.no_user)))
            .or_else(|| at(QuotaLevel::DefaultClient, self.no_user.default_client[i]))
    }

    /// The limits of `entity`, created empty if absent. Only called on validated entities.
    fn limits_mut(&mut self, entity: &QuotaEntity) -> &mut Limits {
        let table = match &entity.user {
            Some(EntityName::Named(u)) => self.users.entry(u.clone()).or_default(),
            Some(EntityName::Default) => &mut self.default_user,
            None => &mut self.no_user,
        };
        match &entity.client_id {
            None => &mut table.own,
            Some(EntityName::Default) => &mut table.default_client,
            Some(EntityName::Named(c)) => table.clients.entry(c.clone()).or_default(),
        }
    }

    fn table_mut_existing(&mut self, user: Option<&EntityName>) -> Option<&mut UserTable> {
        match user {
            Some(EntityName::Named(u)) => self.users.get_mut(u),
            Some(EntityName::Default) => Some(&mut self.default_user),
            None => Some(&mut self.no_user),
        }
    }
}

/// Checks a quota as Kafka's controller does for AlterClientQuotas: the entity has a user or
/// client-id part with no empty name, the key applies to such entities, the value is greater
/// than zero and finite, and keys Kafka defines as integers get whole numbers (a remainder up to
/// 1e-6 is tolerated, as in Kafka) that fit a signed 64-bit integer.
pub fn validate_quota(entity: &QuotaEntity, key: QuotaKey, value: f64) -> Result<(), QuotaError> {
    entity.validate()?;
    if !key.applies_to_user_or_client() {
        return Err(QuotaError::KeyNotForEntity {
            key: key.name(),
            entity: entity.to_string(),
        });
    }
    if value.is_nan() || value <= 0.0 {
        return Err(QuotaError::NotPositive {
            key: key.name(),
            value,
        });
    }
    if !value.is_finite() {
        return Err(QuotaError::TooLarge {
            key: key.name(),
            value,
        });
    }
    if key.is_integral() {
        if value > i64::MAX as f64 {
            return Err(QuotaError::TooLarge {
                key: key.name(),
                value,
            });
        }
        if (value % 1.0).abs() > 1e-6 {
            return Err(QuotaError::Fractional {
                key: key.name(),
                value,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "config_test.rs"]
mod tests;
