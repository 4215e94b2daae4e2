//! FindCoordinator and the consumer group APIs, delegated to the group coordinator.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;

use super::{message, str_bytes, RequestContext};
use crate::broker::Broker;
use ferry_authz::AclOperation;

const KEY_GROUP: i8 = 0;
const KEY_TRANSACTION: i8 = 1;

pub fn find_coordinator(
    broker: &Arc<Broker>,
    request: FindCoordinatorRequest,
    version: i16,
    ctx: &RequestContext,
) -> FindCoordinatorResponse {
    let keys: Vec<StrBytes> = if version >= 4 {
        request.coordinator_keys.clone()
    } else {
        vec![request.key.clone()]
    };
    let coordinators: Vec<Coordinator> = keys
        .into_iter()
        .map(|key| {
            let base = Coordinator::default()
                .with_key(key.clone())
                .with_node_id(BrokerId(-1))
                .with_port(-1);
            let result = match request.key_type {
                KEY_GROUP if key.is_empty() && version >= 4 => {
                    Err((ResponseError::InvalidRequest, "empty group id"))
                }
                KEY_GROUP if !ctx.may_group(broker, AclOperation::Describe, &key) => Err((
                    ResponseError::GroupAuthorizationFailed,
                    "not authorized to describe the group",
                )),
                KEY_GROUP => match broker.ensure_group_coordinator() {
                    Ok(()) => Ok(()),
                    Err(_) => Err((
                        ResponseError::CoordinatorNotAvailable,
                        "the group coordinator is not available",
                    )),
                },
                KEY_TRANSACTION if key.is_empty() && version >= 4 => {
                    Err((ResponseError::InvalidRequest, "empty transactional id"))
                }
                KEY_TRANSACTION if !ctx.may_txn(broker, AclOperation::Describe, &key) => Err((
                    ResponseError::TransactionalIdAuthorizationFailed,
                    "not authorized to describe the transactional id",
                )),
                KEY_TRANSACTION => match broker.ensure_txn_coordinator() {
                    Ok(()) => Ok(()),
                    Err(_) => Err((
                        ResponseError::CoordinatorNotAvailable,
                        "the transaction coordinator is not available",
                    )),
                },
                _ => Err((
                    ResponseError::InvalidRequest,
                    "unknown coordinator key type",
                )),
            };
            // The coordinator of a group is the leader of its `__consumer_offsets` partition,
            // of a transactional id the leader of its `__transaction_state` partition.
            let result = result.and_then(|()| {
                let (leader, _) = if request.key_type == KEY_TRANSACTION {
                    let partition = broker.txns.partition_for(&key);
                    broker.leader_of(ferry_txn::TRANSACTION_STATE_TOPIC, partition)
                } else {
                    let partition = broker.groups.partition_for(&key);
                    broker.leader_of(crate::group_store::OFFSETS_TOPIC, partition)
                };
                super::metadata::live_brokers(broker, ctx.listener())
                    .into_iter()
                    .find(|b| b.0 == leader)
                    .map(|(id, h, p, _)| (id, h, p))
                    .ok_or((
                        ResponseError::CoordinatorNotAvailable,
                        "the coordinator's partition has no live leader",
                    ))
            });
            let c = match result {
                Ok((id, host, port)) => base
                    .with_node_id(BrokerId(id))
                    .with_host(str_bytes(&host))
                    .with_port(i32::from(port)),
                Err((e, m)) => base
                    .with_error_code(e.code())
                    .with_error_message(message(m)),
            };
            broker.metrics.error("FindCoordinator", c.error_code);
            c
        })
        .collect();
    if version >= 4 {
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let c = coordinators.into_iter().next().unwrap_or_default();
    let mut r = FindCoordinatorResponse::default()
        .with_error_code(c.error_code)
        .with_node_id(c.node_id)
        .with_host(c.host)
        .with_port(c.port);
    if version >= 1 {
        r = r.with_error_message(c.error_message);
    }
    r
}
