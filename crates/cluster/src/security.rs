//! The security part of the metadata image: SCRAM credentials, ACL bindings and client quotas,
//! as Kafka's controller keeps them (`ScramControlManager`, `AclControlManager`,
//! `ClientQuotaControlManager`) and every broker reads them (credential lookup for SASL/SCRAM,
//! all bindings for the authorizer, quotas per entity for enforcement).
//!
//! Owns: per (user, mechanism) the salt, stored key, server key and iteration count of a SCRAM
//! credential (never a password); ACL bindings by id; quota values by (entity, key).
//!
//! Invariants, checked before a record changes anything (like the rest of [`crate::Image`]):
//! - a credential has a non-empty user and `MIN_ITERATIONS..=MAX_ITERATIONS` iterations;
//! - an ACL binding uses concrete codes only (no UNKNOWN, ANY or MATCH), its principal is
//!   `Type:name`, its resource name is not empty; ids are never nil and are unique; the same
//!   binding is stored once (creating it again is a no-op, as in Kafka);
//! - a quota value is finite and not negative; an entity without any value is not kept.
//!
//! Codes are Kafka's wire codes (`ResourceType`, `PatternType`, `AclOperation`,
//! `AclPermissionType`); the broker converts to and from the authorizer's types.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::image::{Applied, Image, ImageError};

/// Kafka's bounds on SCRAM iterations (both mechanisms).
pub const MIN_ITERATIONS: i32 = 4096;
pub const MAX_ITERATIONS: i32 = 16384;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ScramMechanism {
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl ScramMechanism {
    /// From Kafka's wire code (1: SCRAM-SHA-256, 2: SCRAM-SHA-512); `None` for UNKNOWN (0) and
    /// anything else.
    pub fn from_code(code: i8) -> Option<Self> {
        match code {
            1 => Some(Self::ScramSha256),
            2 => Some(Self::ScramSha512),
            _ => None,
        }
    }

    pub fn code(self) -> i8 {
        match self {
            Self::ScramSha256 => 1,
            Self::ScramSha512 => 2,
        }
    }

    /// The SASL mechanism name.
    pub fn name(self) -> &'static str {
        match self {
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        [Self::ScramSha256, Self::ScramSha512]
            .into_iter()
            .find(|m| m.name() == name)
    }
}

/// What the server keeps of a SCRAM password (RFC 5802).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

/// One ACL: who (principal, host) may or may not (permission) do what (operation) on which
/// resources (type, name, pattern type). Kafka's `AccessControlEntryRecord` without the id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AclBinding {
    pub resource_type: i8,
    pub resource_name: String,
    pub pattern_type: i8,
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission_type: i8,
}

/// Kafka's wire codes for ACL fields.
pub mod acl_codes {
    pub const UNKNOWN: i8 = 0;
    pub const ANY: i8 = 1;
    pub const RESOURCE_TOPIC: i8 = 2;
    pub const RESOURCE_CLUSTER: i8 = 4;
    pub const RESOURCE_USER: i8 = 7;
    pub const PATTERN_MATCH: i8 = 2;
    pub const PATTERN_LITERAL: i8 = 3;
    pub const PATTERN_PREFIXED: i8 = 4;
    /// ALL (2) ..= TWO_PHASE_COMMIT (15).
    pub const OPERATION_ALL: i8 = 2;
    pub const OPERATION_LAST: i8 = 15;
    pub const PERMISSION_DENY: i8 = 2;
    pub const PERMISSION_ALLOW: i8 = 3;
    /// The one name a CLUSTER resource may have.
    pub const CLUSTER_NAME: &str = "kafka-cluster";
    /// The literal resource name that matches every name.
    pub const WILDCARD: &str = "*";
}

impl AclBinding {
    /// Why this binding cannot be stored, if it cannot (Kafka's `validateNewAcl`).
    pub fn invalid_reason(&self) -> Option<String> {
        use acl_codes::*;
        if !(RESOURCE_TOPIC..=RESOURCE_USER).contains(&self.resource_type) {
            return Some(format!("Invalid resourceType {}", self.resource_type));
        }
        if !matches!(self.pattern_type, PATTERN_LITERAL | PATTERN_PREFIXED) {
            return Some(format!("Invalid patternType {}", self.pattern_type));
        }
        if !(OPERATION_ALL..=OPERATION_LAST).contains(&self.operation) {
            return Some(format!("Invalid operation {}", self.operation));
        }
        if !matches!(self.permission_type, PERMISSION_DENY | PERMISSION_ALLOW) {
            return Some(format!("Invalid permissionType {}", self.permission_type));
        }
        if self.resource_name.is_empty() {
            return Some("Resource name should not be empty".into());
        }
        if !self.principal.contains(':') {
            return Some(format!(
                "Could not parse principal from `{}` (no colon is present separating the principal type from the principal name)",
                self.principal
            ));
        }
        None
    }
}

/// Quota entity types.
pub const ENTITY_USER: &str = "user";
pub const ENTITY_CLIENT_ID: &str = "client-id";
pub const ENTITY_IP: &str = "ip";

/// A client quota entity: entity type to name, `None` being the type's default entity. Kafka's
/// `ClientQuotaEntity`; sorted by type, so equal entities compare equal.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct QuotaEntity(pub BTreeMap<String, Option<String>>);

impl QuotaEntity {
    pub fn new<'a>(parts: impl IntoIterator<Item = (&'a str, Option<&'a str>)>) -> Self {
        Self(
            parts
                .into_iter()
                .map(|(t, n)| (t.to_string(), n.map(str::to_string)))
                .collect(),
        )
    }
}

/// A quota value. Compared by bits, so the image stays `Eq`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(transparent)]
pub struct QuotaValue(pub f64);

impl PartialEq for QuotaValue {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for QuotaValue {}

/// Client quotas: per entity, key to value. Serialized as a list (entities are not strings).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Vec<QuotaEntry>", into = "Vec<QuotaEntry>")]
pub struct ClientQuotas(pub BTreeMap<QuotaEntity, BTreeMap<String, QuotaValue>>);

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QuotaEntry {
    entity: QuotaEntity,
    values: BTreeMap<String, QuotaValue>,
}

impl From<Vec<QuotaEntry>> for ClientQuotas {
    fn from(entries: Vec<QuotaEntry>) -> Self {
        Self(entries.into_iter().map(|e| (e.entity, e.values)).collect())
    }
}

impl From<ClientQuotas> for Vec<QuotaEntry> {
    fn from(quotas: ClientQuotas) -> Self {
        quotas
            .0
            .into_iter()
            .map(|(entity, values)| QuotaEntry { entity, values })
            .collect()
    }
}

/// Read access for brokers.
impl Image {
    /// The credential of `user` for `mechanism`, if any.
    pub fn scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Option<&ScramCredential> {
        self.scram_credentials.get(user)?.get(&mechanism)
    }

    /// The mechanisms `user` has credentials for, with their credentials.
    pub fn scram_credentials_of(
        &self,
        user: &str,
    ) -> Option<&BTreeMap<ScramMechanism, ScramCredential>> {
        self.scram_credentials.get(user)
    }

    /// Every ACL binding, by id.
    pub fn acl_bindings(&self) -> &BTreeMap<Uuid, AclBinding> {
        &self.acls
    }

    /// The quota values set for exactly `entity` (no fallback to defaults: that is enforcement's
    /// rule to apply).
    pub fn client_quota(&self, entity: &QuotaEntity) -> Option<&BTreeMap<String, QuotaValue>> {
        self.client_quotas.0.get(entity)
    }

    /// Every entity with quotas.
    pub fn client_quotas(&self) -> &BTreeMap<QuotaEntity, BTreeMap<String, QuotaValue>> {
        &self.client_quotas.0
    }

    pub(crate) fn upsert_scram(
        &mut self,
        user: &str,
        mechanism: ScramMechanism,
        credential: &ScramCredential,
    ) -> Result<Applied, ImageError> {
        if user.is_empty() {
            return Err(ImageError::InvalidCredential(
                "the user name is empty".into(),
            ));
        }
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&credential.iterations) {
            return Err(ImageError::InvalidCredential(format!(
                "{} iterations are outside {MIN_ITERATIONS}..={MAX_ITERATIONS}",
                credential.iterations
            )));
        }
        self.scram_credentials
            .entry(user.to_string())
            .or_default()
            .insert(mechanism, credential.clone());
        Ok(Applied::Done)
    }

    pub(crate) fn delete_scram(
        &mut self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Result<Applied, ImageError> {
        let Some(of_user) = self.scram_credentials.get_mut(user) else {
            return Err(ImageError::UnknownCredential(user.to_string(), mechanism));
        };
        if of_user.remove(&mechanism).is_none() {
            return Err(ImageError::UnknownCredential(user.to_string(), mechanism));
        }
        if of_user.is_empty() {
            self.scram_credentials.remove(user);
        }
        Ok(Applied::Done)
    }

    pub(crate) fn create_acl(
        &mut self,
        id: Uuid,
        binding: &AclBinding,
    ) -> Result<Applied, ImageError> {
        if let Some(why) = binding.invalid_reason() {
            return Err(ImageError::InvalidAcl(why));
        }
        if self.acls.values().any(|b| b == binding) {
            return Ok(Applied::Done);
        }
        if id.is_nil() || self.acls.contains_key(&id) {
            return Err(ImageError::InvalidAclId(id));
        }
        self.acls.insert(id, binding.clone());
        Ok(Applied::Done)
    }

    pub(crate) fn delete_acl(&mut self, id: Uuid) -> Result<Applied, ImageError> {
        match self.acls.remove(&id) {
            Some(_) => Ok(Applied::Done),
            None => Err(ImageError::UnknownAcl(id)),
        }
    }

    pub(crate) fn alter_client_quota(
        &mut self,
        entity: &QuotaEntity,
        key: &str,
        value: Option<f64>,
    ) -> Result<Applied, ImageError> {
        if entity.0.is_empty() {
            return Err(ImageError::InvalidQuota("the entity is empty".into()));
        }
        match value {
            Some(v) if !v.is_finite() || v < 0.0 => Err(ImageError::InvalidQuota(format!(
                "{key} = {v} is not a finite, non-negative number"
            ))),
            Some(v) => {
                self.client_quotas
                    .0
                    .entry(entity.clone())
                    .or_default()
                    .insert(key.to_string(), QuotaValue(v));
                Ok(Applied::Done)
            }
            None => {
                if let Some(values) = self.client_quotas.0.get_mut(entity) {
                    values.remove(key);
                    if values.is_empty() {
                        self.client_quotas.0.remove(entity);
                    }
                }
                Ok(Applied::Done)
            }
        }
    }
}

#[cfg(test)]
#[path = "security_test.rs"]
mod tests;
