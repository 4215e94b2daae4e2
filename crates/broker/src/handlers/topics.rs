//! CreateTopics, DeleteTopics and CreatePartitions.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, TopicName,
};
use uuid::Uuid;

use super::{message, str_bytes, RequestContext, TOPIC_DENIED};
use crate::broker::{Broker, TopicError};
use ferry_authz::AclOperation;
use ferry_config::topic_config::{self, TOPIC_CONFIGS};

pub fn create_topics(
    broker: &Arc<Broker>,
    request: CreateTopicsRequest,
    version: i16,
    ctx: &RequestContext,
) -> CreateTopicsResponse {
    let mut seen = HashSet::new();
    let cluster_create = ctx.may_cluster(broker, AclOperation::Create);
    let topics = request
        .topics
        .into_iter()
        .map(|t| {
            let result = CreatableTopicResult::default()
                .with_name(t.name.clone())
                .with_num_partitions(-1)
                .with_replication_factor(-1);
            let outcome = if cluster_create || ctx.may_topic(broker, AclOperation::Create, &t.name)
            {
                create_one(broker, &mut seen, t, request.validate_only)
            } else {
                Err(TopicError::new(
                    TOPIC_DENIED,
                    "not authorized to create the topic",
                ))
            };
            let result = match outcome {
                Ok(created) => created_result(broker, result, created, version),
                Err(e) => result
                    .with_error_code(e.error.code())
                    .with_error_message(message(e.message)),
            };
            broker.metrics.error("CreateTopics", result.error_code);
            result
        })
        .collect();
    CreateTopicsResponse::default().with_topics(topics)
}

/// A topic as created (or as it would be, for validate_only, with a nil id).
struct Created {
    id: Uuid,
    partitions: i32,
    replication_factor: i16,
    /// The topic's config overrides.
    configs: BTreeMap<String, String>,
}

/// Creates one topic of the request, or checks that it could be created (validate_only).
/// `seen` holds the names earlier in the request: a name given twice is refused.
fn create_one(
    broker: &Broker,
    seen: &mut HashSet<String>,
    t: CreatableTopic,
    validate_only: bool,
) -> Result<Created, TopicError> {
    let name = t.name.to_string();
    if !seen.insert(name.clone()) {
        return Err(TopicError::new(
            ResponseError::InvalidRequest,
            format!("Topic '{name}' appears more than once in the request"),
        ));
    }
    let configs = requested_configs(&t.configs)?;
    let (partitions, rf, manual) = if t.assignments.is_empty() {
        (t.num_partitions, t.replication_factor, None)
    } else {
        if t.num_partitions != -1 || t.replication_factor != -1 {
            return Err(TopicError::new(
                ResponseError::InvalidRequest,
                "Both replica assignments and numPartitions/replicationFactor were set",
            ));
        }
        let lists = manual_assignment(broker, &t.assignments)?;
        let rf = i16::try_from(lists[0].len()).unwrap_or(i16::MAX);
        (lists.len() as i32, rf, Some(lists))
    };
    let mut new = broker.validate_new_topic(&name, partitions, rf, configs)?;
    new.assignments = manual;
    if validate_only {
        return Ok(Created {
            id: Uuid::nil(),
            partitions: new.partitions,
            replication_factor: new.replication_factor,
            configs: new.configs,
        });
    }
    let meta = broker.create_topic(new)?;
    Ok(Created {
        id: meta.id,
        partitions: meta.partitions,
        replication_factor: meta.replication_factor,
        configs: meta.configs,
    })
}

/// The config overrides a CreateTopics request gives a topic; a null value is refused.
fn requested_configs(
    configs: &[CreatableTopicConfig],
) -> Result<BTreeMap<String, String>, TopicError> {
    let mut overrides = BTreeMap::new();
    for c in configs {
        match &c.value {
            Some(v) => {
                overrides.insert(c.name.to_string(), v.to_string());
            }
            None => {
                return Err(TopicError::new(
                    ResponseError::InvalidConfig,
                    format!(
                        "Null value not supported for topic config '{}'",
                        c.name.as_str()
                    ),
                ))
            }
        }
    }
    Ok(overrides)
}

/// A non-empty manual assignment's replica lists in partition order, checked.
fn manual_assignment(
    broker: &Broker,
    assignments: &[CreatableReplicaAssignment],
) -> Result<Vec<Vec<i32>>, TopicError> {
    // Partition ids must be 0..n, each once (Kafka's rule).
    let mut lists = vec![None; assignments.len()];
    for a in assignments {
        let slot = usize::try_from(a.partition_index)
            .ok()
            .and_then(|i| lists.get_mut(i))
            .filter(|slot| slot.is_none())
            .ok_or_else(|| {
                TopicError::new(
                    ResponseError::InvalidReplicaAssignment,
                    format!(
                        "Partitions must be numbered 0 to {} in the manual partition assignment, each once; got {}.",
                        assignments.len() - 1,
                        a.partition_index
                    ),
                )
            })?;
        *slot = Some(a.broker_ids.iter().map(|b| b.0).collect::<Vec<_>>());
    }
    let lists: Vec<Vec<i32>> = lists.into_iter().flatten().collect();
    validate_assignments(broker, lists.iter().cloned(), None)?;
    Ok(lists)
}

/// A created topic's answer; v5+ also carries its effective configs.
fn created_result(
    broker: &Broker,
    result: CreatableTopicResult,
    created: Created,
    version: i16,
) -> CreatableTopicResult {
    let result = result
        .with_topic_id(created.id)
        .with_num_partitions(created.partitions)
        .with_replication_factor(created.replication_factor);
    if version >= 5 {
        result.with_configs(Some(effective_configs(broker, &created.configs)))
    } else {
        result
    }
}

/// Checks a manual assignment as Kafka's controller does: non-empty replica lists of one length
/// (`rf`, when the topic already has one), registered brokers, none twice in a list.
fn validate_assignments(
    broker: &Broker,
    assignments: impl Iterator<Item = Vec<i32>>,
    rf: Option<usize>,
) -> Result<(), TopicError> {
    let image = broker.metadata.image();
    let mut rf = rf;
    for replicas in assignments {
        if replicas.is_empty() {
            return Err(TopicError::new(
                ResponseError::InvalidReplicaAssignment,
                "empty replica list",
            ));
        }
        let want = *rf.get_or_insert(replicas.len());
        if want != replicas.len() {
            return Err(TopicError::new(
                ResponseError::InvalidReplicaAssignment,
                format!(
                    "The manual partition assignment includes a partition with {} replica(s), but this is not consistent with previous partitions, which have {want} replica(s).",
                    replicas.len()
                ),
            ));
        }
        let registered = |b: i32| {
            image.brokers.contains_key(&b) || (image.brokers.is_empty() && b == broker.node_id)
        };
        if let Some(b) = replicas.iter().find(|&&b| !registered(b)) {
            return Err(TopicError::new(
                ResponseError::InvalidReplicaAssignment,
                format!("The manual partition assignment includes broker {b}, but no such broker is registered."),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some(b) = replicas.iter().find(|&&b| !seen.insert(b)) {
            return Err(TopicError::new(
                ResponseError::InvalidReplicaAssignment,
                format!("The manual partition assignment includes the broker {b} more than once."),
            ));
        }
    }
    Ok(())
}

fn effective_configs(
    broker: &Broker,
    overrides: &BTreeMap<String, String>,
) -> Vec<CreatableTopicConfigs> {
    TOPIC_CONFIGS
        .iter()
        .filter(|def| def.effect != topic_config::Effect::Removed)
        .filter_map(|def| {
            let (value, source) = topic_config::effective(&broker.config, overrides, def.name)?;
            Some(
                CreatableTopicConfigs::default()
                    .with_name(str_bytes(def.name))
                    .with_value(Some(str_bytes(&value)))
                    .with_config_source(source.code()),
            )
        })
        .collect()
}

pub fn delete_topics(
    broker: &Arc<Broker>,
    request: DeleteTopicsRequest,
    version: i16,
    ctx: &RequestContext,
) -> DeleteTopicsResponse {
    let denied = |name: &str| !ctx.may_topic(broker, AclOperation::Delete, name);
    // v6+ names topics by name or id; older versions by name only.
    let wanted: Vec<(Option<TopicName>, Uuid)> = if version >= 6 {
        request
            .topics
            .into_iter()
            .map(|t| (t.name, t.topic_id))
            .collect()
    } else {
        request
            .topic_names
            .into_iter()
            .map(|n| (Some(n), Uuid::nil()))
            .collect()
    };
    // Kafka refuses the whole request before looking at any topic (`ControllerApis.deleteTopics`).
    let disabled = match (broker.config.delete_topic_enable(), version) {
        (true, _) => None,
        (false, 0..=2) => Some(ResponseError::InvalidRequest),
        (false, _) => Some(ResponseError::TopicDeletionDisabled),
    };
    let responses = wanted
        .into_iter()
        .map(|(name, id)| {
            if let Some(e) = disabled {
                broker.metrics.error("DeleteTopics", e.code());
                return DeletableTopicResult::default()
                    .with_name(name)
                    .with_topic_id(id)
                    .with_error_code(e.code())
                    .with_error_message(message("Topic deletion is disabled."));
            }
            let found = match &name {
                Some(n) if denied(n) => Err(TOPIC_DENIED),
                Some(n) => broker
                    .metadata
                    .topic(n)
                    .ok_or(ResponseError::UnknownTopicOrPartition),
                None => match broker.metadata.topic_by_id(id) {
                    Some(meta) if denied(&meta.name) => Err(TOPIC_DENIED),
                    Some(meta) => Ok(meta),
                    None => Err(ResponseError::UnknownTopicId),
                },
            };
            let result = match found {
                Ok(meta) if meta.name == crate::group_store::OFFSETS_TOPIC => {
                    DeletableTopicResult::default()
                        .with_name(Some(TopicName(str_bytes(&meta.name))))
                        .with_topic_id(meta.id)
                        .with_error_code(ResponseError::InvalidRequest.code())
                        .with_error_message(message(format!(
                            "Deleting the internal topic {} is not allowed",
                            meta.name
                        )))
                }
                Ok(meta) => match broker.delete_topic(&meta.name) {
                    Ok(_) => DeletableTopicResult::default()
                        .with_name(Some(TopicName(str_bytes(&meta.name))))
                        .with_topic_id(meta.id),
                    Err(e) => DeletableTopicResult::default()
                        .with_name(Some(TopicName(str_bytes(&meta.name))))
                        .with_topic_id(meta.id)
                        .with_error_code(e.error.code())
                        .with_error_message(message(e.message)),
                },
                Err(e) => DeletableTopicResult::default()
                    .with_name(name)
                    .with_topic_id(id)
                    .with_error_code(e.code())
                    .with_error_message(message(e.to_string())),
            };
            broker.metrics.error("DeleteTopics", result.error_code);
            result
        })
        .collect();
    DeleteTopicsResponse::default().with_responses(responses)
}

pub fn create_partitions(
    broker: &Arc<Broker>,
    request: CreatePartitionsRequest,
    ctx: &RequestContext,
) -> CreatePartitionsResponse {
    let results = request
        .topics
        .into_iter()
        .map(|t| {
            let outcome: Result<(), TopicError> = (|| {
                if !ctx.may_topic(broker, AclOperation::Alter, &t.name) {
                    return Err(TopicError::new(TOPIC_DENIED, "not authorized to alter the topic"));
                }
                let meta = broker.metadata.topic(&t.name).ok_or_else(|| {
                    TopicError::new(
                        ResponseError::UnknownTopicOrPartition,
                        format!("The topic '{}' does not exist.", t.name.as_str()),
                    )
                })?;
                if t.count <= meta.partitions {
                    return Err(TopicError::new(
                        ResponseError::InvalidPartitions,
                        format!(
                            "Topic currently has {} partitions, which is higher than the requested {}.",
                            meta.partitions, t.count
                        ),
                    ));
                }
                if let Some(assignments) = &t.assignments {
                    if assignments.len() as i32 != t.count - meta.partitions {
                        return Err(TopicError::new(
                            ResponseError::InvalidReplicaAssignment,
                            format!(
                                "Increasing the number of partitions by {} but {} assignments provided.",
                                t.count - meta.partitions,
                                assignments.len()
                            ),
                        ));
                    }
                    validate_assignments(
                        broker,
                        assignments.iter().map(|a| a.broker_ids.iter().map(|b| b.0).collect()),
                        usize::try_from(meta.replication_factor).ok(),
                    )?;
                }
                if request.validate_only {
                    return Ok(());
                }
                let meta = broker
                    .metadata
                    .set_partition_count(
                        &meta.name,
                        t.count,
                        t.assignments.as_ref().map(|lists| {
                            lists
                                .iter()
                                .map(|a| a.broker_ids.iter().map(|b| b.0).collect())
                                .collect()
                        }),
                    )
                    .map_err(|e| TopicError::new(crate::errors::metadata_error(&e), e.to_string()))?;
                broker.open_topic(&meta)?;
                tracing::info!(topic = %meta.name, partitions = meta.partitions, "added partitions");
                Ok(())
            })();
            let result = CreatePartitionsTopicResult::default().with_name(t.name);
            let result = match outcome {
                Ok(()) => result,
                Err(e) => result
                    .with_error_code(e.error.code())
                    .with_error_message(message(e.message)),
            };
            broker.metrics.error("CreatePartitions", result.error_code);
            result
        })
        .collect();
    CreatePartitionsResponse::default().with_results(results)
}
