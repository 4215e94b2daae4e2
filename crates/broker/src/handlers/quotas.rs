//! DescribeClientQuotas and AlterClientQuotas (KIP-546), with Kafka's entity filters, key and
//! value checks and error codes (`ClientQuotasImage.describe`, `ClientQuotaControlManager`).
//!
//! Entities are maps of entity type (`user`, `client-id`, `ip`) to a name or the type's
//! default; `ip` is never combined with the others. Values are set or removed one key at a
//! time through the controller quorum; `validate_only` checks without writing.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_client_quotas_request::{EntryData, OpData};
use kafka_protocol::messages::alter_client_quotas_response as alter_response;
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::describe_client_quotas_response as describe_response;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
};

use super::{message, str_bytes, RequestContext};

use crate::broker::Broker;
use ferry_cluster::security::{QuotaEntity, ENTITY_CLIENT_ID, ENTITY_IP, ENTITY_USER};

/// Describe filter match types.
const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
const MATCH_SPECIFIED: i8 = 2;

/// The value types of quota keys, for Kafka's integer checks.
#[derive(Clone, Copy, PartialEq)]
enum KeyType {
    Long,
    Int,
    Double,
}

/// The quota keys of user and client-id entities.
const CLIENT_KEYS: &[(&str, KeyType)] = &[
    ("producer_byte_rate", KeyType::Long),
    ("consumer_byte_rate", KeyType::Long),
    ("request_percentage", KeyType::Double),
    ("controller_mutation_rate", KeyType::Double),
];
/// The quota keys of ip entities.
const IP_KEYS: &[(&str, KeyType)] = &[("connection_creation_rate", KeyType::Int)];

type Refusal = (ResponseError, String);

/// One quota change: the key, and its new value or `None` to remove it.
type QuotaOp = (String, Option<f64>);

fn invalid(why: impl Into<String>) -> Refusal {
    (ResponseError::InvalidRequest, why.into())
}

pub fn describe(
    broker: &Arc<Broker>,
    request: DescribeClientQuotasRequest,
    ctx: &RequestContext,
) -> DescribeClientQuotasResponse {
    let refused = if ctx.may_cluster(broker, ferry_authz::AclOperation::DescribeConfigs) {
        None
    } else {
        Some((ResponseError::ClusterAuthorizationFailed, String::new()))
    };
    let filter = match refused.map_or_else(|| Filter::parse(&request.components), Err) {
        Ok(filter) => filter,
        Err((e, why)) => {
            broker.metrics.error("DescribeClientQuotas", e.code());
            return DescribeClientQuotasResponse::default()
                .with_error_code(e.code())
                .with_error_message(message(why))
                .with_entries(None);
        }
    };
    let image = broker.metadata.image();
    let entries = image
        .client_quotas()
        .iter()
        .filter(|(entity, _)| filter.matches(entity, request.strict))
        .map(|(entity, values)| {
            describe_response::EntryData::default()
                .with_entity(
                    entity
                        .0
                        .iter()
                        .map(|(t, n)| {
                            describe_response::EntityData::default()
                                .with_entity_type(str_bytes(t))
                                .with_entity_name(n.as_deref().map(str_bytes))
                        })
                        .collect(),
                )
                .with_values(
                    values
                        .iter()
                        .map(|(k, v)| {
                            describe_response::ValueData::default()
                                .with_key(str_bytes(k))
                                .with_value(v.0)
                        })
                        .collect(),
                )
        })
        .collect();
    DescribeClientQuotasResponse::default()
        .with_error_message(None)
        .with_entries(Some(entries))
}

/// A describe filter: entity types that must have a given name (`None`: the default entity),
/// and entity types that must be present with any name.
#[derive(Debug, Default)]
struct Filter {
    exact: BTreeMap<String, Option<String>>,
    specified: BTreeSet<String>,
}

impl Filter {
    fn parse(components: &[ComponentData]) -> Result<Self, Refusal> {
        let mut filter = Filter::default();
        for c in components {
            let ty = c.entity_type.to_string();
            if ty.is_empty() {
                return Err(invalid("Invalid empty entity type."));
            }
            if filter.exact.contains_key(&ty) || filter.specified.contains(&ty) {
                return Err(invalid(format!(
                    "Entity type {ty} cannot appear more than once in the filter."
                )));
            }
            if ![ENTITY_USER, ENTITY_CLIENT_ID, ENTITY_IP].contains(&ty.as_str()) {
                return Err((
                    ResponseError::UnsupportedVersion,
                    format!("Unsupported entity type {ty}"),
                ));
            }
            let name = c._match.as_ref().map(|m| m.to_string());
            match (c.match_type, name) {
                (MATCH_EXACT, Some(name)) => {
                    filter.exact.insert(ty, Some(name));
                }
                (MATCH_EXACT, None) => {
                    return Err(invalid(
                        "Request specified MATCH_TYPE_EXACT, but set match string to null.",
                    ))
                }
                (MATCH_DEFAULT, None) => {
                    filter.exact.insert(ty, None);
                }
                (MATCH_SPECIFIED, None) => {
                    filter.specified.insert(ty);
                }
                (MATCH_DEFAULT | MATCH_SPECIFIED, Some(_)) => {
                    return Err(invalid(format!(
                        "Request specified match type {}, but also specified a match string.",
                        c.match_type
                    )))
                }
                (other, _) => {
                    return Err((
                        ResponseError::UnsupportedVersion,
                        format!("Unknown match type {other}"),
                    ))
                }
            }
        }
        let has = |t: &str| filter.exact.contains_key(t) || filter.specified.contains(t);
        if has(ENTITY_IP) && (has(ENTITY_USER) || has(ENTITY_CLIENT_ID)) {
            return Err(invalid(
                "Invalid entity filter component combination. IP filter component should not be used with user or clientId filter component.",
            ));
        }
        Ok(filter)
    }

    /// Kafka's rule: every exact component equals the entity's, every specified type is in the
    /// entity with a name (not the default); strict: the entity has no other types.
    fn matches(&self, entity: &QuotaEntity, strict: bool) -> bool {
        if strict && entity.0.len() != self.exact.len() + self.specified.len() {
            return false;
        }
        self.exact
            .iter()
            .all(|(t, name)| entity.0.get(t).is_some_and(|n| n == name))
            && self
                .specified
                .iter()
                .all(|t| entity.0.get(t).is_some_and(|n| n.is_some()))
    }
}

pub async fn alter(
    broker: &Arc<Broker>,
    request: AlterClientQuotasRequest,
    ctx: &RequestContext,
) -> AlterClientQuotasResponse {
    let allowed = ctx.may_cluster(broker, ferry_authz::AclOperation::AlterConfigs);
    let mut results = Vec::with_capacity(request.entries.len());
    for entry in request.entries {
        let error = if !allowed {
            Some((ResponseError::ClusterAuthorizationFailed, String::new()))
        } else {
            match check_entry(&entry) {
                Err(refusal) => Some(refusal),
                Ok(_) if request.validate_only => None,
                Ok((entity, ops)) => write(broker, &entity, ops).await,
            }
        };
        let mut result = alter_response::EntryData::default()
            .with_error_message(None)
            .with_entity(
                entry
                    .entity
                    .iter()
                    .map(|e| {
                        alter_response::EntityData::default()
                            .with_entity_type(e.entity_type.clone())
                            .with_entity_name(e.entity_name.clone())
                    })
                    .collect(),
            );
        if let Some((e, why)) = error {
            broker.metrics.error("AlterClientQuotas", e.code());
            result = result
                .with_error_code(e.code())
                .with_error_message(message(why));
        }
        results.push(result);
    }
    AlterClientQuotasResponse::default().with_entries(results)
}

/// The entity and its (key, value to set or `None` to remove) changes, or why it is refused.
fn check_entry(entry: &EntryData) -> Result<(QuotaEntity, Vec<QuotaOp>), Refusal> {
    let entity = check_entity(entry)?;
    let keys = if entity.0.contains_key(ENTITY_IP) {
        IP_KEYS
    } else {
        CLIENT_KEYS
    };
    let mut seen = BTreeSet::new();
    let mut ops = Vec::with_capacity(entry.ops.len());
    for op in &entry.ops {
        let key = op.key.to_string();
        if !seen.insert(key.clone()) {
            return Err(invalid(format!("Duplicate quota key {key}")));
        }
        let Some((_, ty)) = keys.iter().find(|(k, _)| *k == key) else {
            return Err(invalid(format!("Invalid configuration key {key}")));
        };
        ops.push((
            key,
            if op.remove {
                None
            } else {
                Some(check_value(op, *ty)?)
            },
        ));
    }
    Ok((entity, ops))
}

/// Kafka's `validateEntity` plus the ip rules.
fn check_entity(entry: &EntryData) -> Result<QuotaEntity, Refusal> {
    if entry.entity.is_empty() {
        return Err(invalid("Invalid empty client quota entity"));
    }
    let mut entity = BTreeMap::new();
    for e in &entry.entity {
        let ty = e.entity_type.to_string();
        if entity.contains_key(&ty) {
            return Err(invalid(format!(
                "Invalid empty client quota entity, duplicate entity entry {ty}"
            )));
        }
        if ![ENTITY_USER, ENTITY_CLIENT_ID, ENTITY_IP].contains(&ty.as_str()) {
            return Err((
                ResponseError::UnsupportedVersion,
                format!("Unhandled client quota entity type: {ty}"),
            ));
        }
        let name = e.entity_name.as_ref().map(|n| n.to_string());
        if name.as_deref() == Some("") {
            return Err(invalid(format!("Empty {ty} not supported")));
        }
        if ty == ENTITY_IP {
            if let Some(ip) = name.as_deref().filter(|n| n.parse::<IpAddr>().is_err()) {
                return Err(invalid(format!(
                    "{ip} is not a valid IP or resolvable host."
                )));
            }
        }
        entity.insert(ty, name);
    }
    if entity.contains_key(ENTITY_IP) && entity.len() > 1 {
        return Err(invalid(
            "Invalid quota entity combination, IP entity should not be combined with User or ClientId",
        ));
    }
    Ok(QuotaEntity(entity))
}

fn check_value(op: &OpData, ty: KeyType) -> Result<f64, Refusal> {
    let (key, value) = (op.key.as_str(), op.value);
    if !value.is_finite() || value < 0.0 {
        return Err(invalid(format!(
            "Proposed value for {key} must be a non-negative number, not {value}"
        )));
    }
    let limit = match ty {
        KeyType::Double => return Ok(value),
        KeyType::Long => i64::MAX as f64,
        KeyType::Int => f64::from(i32::MAX),
    };
    let name = if ty == KeyType::Long { "LONG" } else { "INT" };
    if value > limit {
        return Err(invalid(format!(
            "Proposed value for {key} is too large for a {name}."
        )));
    }
    if value.fract() != 0.0 {
        return Err(invalid(format!(
            "Proposed value for {key} is not a valid {name}."
        )));
    }
    Ok(value)
}

async fn write(broker: &Broker, entity: &QuotaEntity, ops: Vec<QuotaOp>) -> Option<Refusal> {
    for (key, value) in ops {
        if let Err(e) = broker
            .metadata
            .alter_client_quota(entity, &key, value)
            .await
        {
            return Some((crate::errors::security_record_error(&e), e.to_string()));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::alter_client_quotas_request::EntityData;
    use kafka_protocol::protocol::StrBytes;

    fn component(ty: &str, match_type: i8, name: Option<&str>) -> ComponentData {
        ComponentData::default()
            .with_entity_type(str_bytes(ty))
            .with_match_type(match_type)
            .with_match(name.map(str_bytes))
    }

    fn entity(parts: &[(&str, Option<&str>)]) -> QuotaEntity {
        QuotaEntity::new(parts.iter().copied())
    }

    #[test]
    fn describe_filters_match_exact_default_and_specified_names() {
        let alice = entity(&[(ENTITY_USER, Some("alice"))]);
        let default_user = entity(&[(ENTITY_USER, None)]);
        let alice_app = entity(&[
            (ENTITY_USER, Some("alice")),
            (ENTITY_CLIENT_ID, Some("app")),
        ]);
        let exact = Filter::parse(&[component(ENTITY_USER, MATCH_EXACT, Some("alice"))]).unwrap();
        assert!(exact.matches(&alice, false));
        assert!(exact.matches(&alice_app, false));
        assert!(!exact.matches(&alice_app, true));
        assert!(!exact.matches(&default_user, false));

        let default = Filter::parse(&[component(ENTITY_USER, MATCH_DEFAULT, None)]).unwrap();
        assert!(default.matches(&default_user, true));
        assert!(!default.matches(&alice, false));

        let specified = Filter::parse(&[component(ENTITY_USER, MATCH_SPECIFIED, None)]).unwrap();
        assert!(specified.matches(&alice, true));
        assert!(!specified.matches(&default_user, false));

        let all = Filter::parse(&[]).unwrap();
        assert!(all.matches(&alice_app, false));
        assert!(!all.matches(&alice, true));
    }

    #[test]
    fn describe_filters_that_kafka_refuses_are_refused() {
        let refused = [
            vec![component("", MATCH_EXACT, Some("a"))],
            vec![component(ENTITY_USER, MATCH_EXACT, None)],
            vec![component(ENTITY_USER, MATCH_DEFAULT, Some("a"))],
            vec![
                component(ENTITY_USER, MATCH_SPECIFIED, None),
                component(ENTITY_USER, MATCH_DEFAULT, None),
            ],
            vec![
                component(ENTITY_IP, MATCH_SPECIFIED, None),
                component(ENTITY_USER, MATCH_DEFAULT, None),
            ],
        ];
        for components in refused {
            assert_eq!(
                Filter::parse(&components).unwrap_err().0,
                ResponseError::InvalidRequest,
                "{components:?}"
            );
        }
        assert_eq!(
            Filter::parse(&[component("group", MATCH_SPECIFIED, None)])
                .unwrap_err()
                .0,
            ResponseError::UnsupportedVersion
        );
    }

    fn entry(parts: &[(&str, Option<&str>)], ops: &[(&str, f64, bool)]) -> EntryData {
        EntryData::default()
            .with_entity(
                parts
                    .iter()
                    .map(|(t, n)| {
                        EntityData::default()
                            .with_entity_type(str_bytes(t))
                            .with_entity_name(n.map(str_bytes))
                    })
                    .collect(),
            )
            .with_ops(
                ops.iter()
                    .map(|(k, v, remove)| {
                        OpData::default()
                            .with_key(StrBytes::from_string(k.to_string()))
                            .with_value(*v)
                            .with_remove(*remove)
                    })
                    .collect(),
            )
    }

    #[test]
    fn alter_entries_are_checked_like_kafka() {
        let user = [(ENTITY_USER, Some("alice"))];
        let ok = entry(
            &user,
            &[
                ("producer_byte_rate", 1024.0, false),
                ("request_percentage", 12.5, false),
                ("consumer_byte_rate", 0.0, true),
            ],
        );
        let (entity, ops) = check_entry(&ok).unwrap();
        assert_eq!(entity, QuotaEntity::new(user));
        assert_eq!(ops[2], ("consumer_byte_rate".to_string(), None));
        let ip = entry(
            &[(ENTITY_IP, Some("10.1.2.3"))],
            &[("connection_creation_rate", 5.0, false)],
        );
        assert!(check_entry(&ip).is_ok());

        let invalid_request = [
            entry(&user, &[("bogus", 1.0, false)]),
            entry(&user, &[("producer_byte_rate", -1.0, false)]),
            entry(&user, &[("producer_byte_rate", f64::NAN, false)]),
            entry(&user, &[("producer_byte_rate", 1.5, false)]),
            entry(
                &user,
                &[
                    ("request_percentage", 1.0, false),
                    ("request_percentage", 2.0, false),
                ],
            ),
            entry(&user, &[("connection_creation_rate", 1.0, false)]),
            entry(&[(ENTITY_IP, None)], &[("producer_byte_rate", 1.0, false)]),
            entry(
                &[(ENTITY_IP, Some("not-an-ip"))],
                &[("connection_creation_rate", 1.0, false)],
            ),
            entry(&[(ENTITY_IP, None), (ENTITY_USER, None)], &[]),
            entry(&[(ENTITY_USER, Some(""))], &[]),
            entry(&[], &[]),
        ];
        for e in invalid_request {
            assert_eq!(
                check_entry(&e).unwrap_err().0,
                ResponseError::InvalidRequest,
                "{e:?}"
            );
        }
    }
}
