//! ConsumerGroupHeartbeat and ConsumerGroupDescribe on the coordinator, and the durable form
//! of consumer-protocol groups.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment as DescribeAssignment, DescribedGroup, Member, TopicPartitions,
};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::assignor::Assignment;
use crate::consumer::{self, ConsumerGroup, ConsumerMember};
use crate::coordinator::{authorized_operations, s, ClientInfo, GroupCoordinator};
use crate::group::{Group, GroupState};
use crate::migration;
use crate::offsets_topic::{
    encode_key, encode_value, ConsumerGroupValue, ConsumerMemberValue, RecordKey, RecordValue,
};

impl GroupCoordinator {
    pub fn consumer_group_heartbeat(
        &self,
        req: ConsumerGroupHeartbeatRequest,
        version: i16,
        client: ClientInfo<'_>,
    ) -> ConsumerGroupHeartbeatResponse {
        if consumer::blank(&req.group_id) {
            return ConsumerGroupHeartbeatResponse::default()
                .with_error_code(ResponseError::InvalidRequest.code())
                .with_error_message(Some(s("GroupId can't be empty.")));
        }
        let now = self.now();
        let mut groups = self.lock();
        if let Err(e) = self.serves(&req.group_id) {
            return ConsumerGroupHeartbeatResponse::default().with_error_code(e.code());
        }
        // Checked by the coordinator of the group, before anything changes (Kafka's order).
        if let Err(refusal) = consumer::check_request(&req, version) {
            return refusal.response();
        }
        let group = groups
            .entry(req.group_id.to_string())
            .or_insert_with(|| Group::new(&req.group_id, now));
        let mut upgraded = false;
        if group.consumer.is_none() {
            if !(group.is(GroupState::Empty) || group.is(GroupState::Dead)) {
                // A classic group with members: a joining member upgrades it, if it may.
                let not_found = |message: String| {
                    ConsumerGroupHeartbeatResponse::default()
                        .with_error_code(ResponseError::GroupIdNotFound.code())
                        .with_error_message(Some(s(&message)))
                };
                if req.member_epoch != 0 {
                    return not_found(format!("Group {} is not a consumer group.", group.id));
                }
                let max_size = self.consumer_config(&req.group_id).max_size;
                if let Some(why) =
                    migration::upgrade_refusal(group, self.config.migration_policy, max_size)
                {
                    return not_found(why);
                }
                match migration::to_consumer(group, self.catalog.as_ref(), now) {
                    Ok(effects) => self.apply(group, effects),
                    Err(why) => return not_found(why),
                }
                upgraded = true;
            } else {
                // An empty classic group (or a new one) becomes a consumer group; offsets stay.
                group.consumer = Some(ConsumerGroup::default());
                group.protocol_type = None;
            }
        }
        let Some(c) = group.consumer.as_mut() else {
            return ConsumerGroupHeartbeatResponse::default()
                .with_error_code(ResponseError::UnknownServerError.code());
        };
        let leaving = (req.member_epoch == -1 || req.member_epoch == -2)
            .then(|| c.members.get(req.member_id.as_str()).cloned())
            .flatten();
        let new_id = uuid::Uuid::new_v4().simple().to_string();
        let cfg = self.consumer_config(&req.group_id);
        let (response, changed) = consumer::heartbeat(
            c,
            &req,
            client.client_id,
            client.client_host,
            new_id,
            now,
            &cfg,
            self.catalog.as_ref(),
        );
        let left = leaving.filter(|m| !c.members.contains_key(&m.id));
        if let Some(m) = left {
            self.after_consumer_members_left(group, &[m], now);
        } else if changed || upgraded {
            self.persist_consumer(group);
        }
        response
    }

    /// After members left a consumer group (or were fenced): the group becomes classic again
    /// if the last consumer-protocol member went and classic members remain (and the policy
    /// allows it); otherwise its new state is persisted.
    pub(crate) fn after_consumer_members_left(
        &self,
        group: &mut Group,
        left: &[ConsumerMember],
        now: i64,
    ) {
        let downgrade = group.consumer.as_ref().is_some_and(|c| {
            migration::downgrades(
                c,
                left,
                self.config.migration_policy,
                self.config.max_group_size,
                &group.id,
            )
        });
        if !downgrade {
            self.persist_consumer(group);
            return;
        }
        let effects = migration::to_classic(group, self.catalog.as_ref(), now, &self.config);
        let tombstone = (
            encode_key(&RecordKey::ConsumerGroup {
                group: group.id.clone(),
            }),
            None,
        );
        if let Err(e) = self
            .store
            .append(self.partition_for(&group.id), &[tombstone])
        {
            tracing::error!(group = %group.id, error = %e, "cannot persist the downgrade of a consumer group");
        }
        self.apply(group, effects);
    }

    pub(crate) fn persist_consumer(&self, group: &Group) {
        let Some(c) = &group.consumer else { return };
        let value = ConsumerGroupValue {
            group_epoch: c.group_epoch,
            assignment_epoch: c.assignment_epoch,
            assignor: c.assignor.clone(),
            members: c
                .members
                .values()
                .map(|m| ConsumerMemberValue {
                    member_id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    rack: m.rack.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    subscribed: m.subscribed.clone(),
                    subscribed_regex: m.subscribed_regex.as_ref().map(|r| r.source.clone()),
                    server_assignor: m.server_assignor.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    epoch: m.epoch,
                    previous_epoch: m.previous_epoch,
                    assigned: consumer::union(&m.assigned, &m.revoking),
                    target: c.target.get(&m.id).cloned().unwrap_or_default(),
                    classic: m.classic.clone(),
                })
                .collect(),
        };
        let record = (
            encode_key(&RecordKey::ConsumerGroup {
                group: group.id.clone(),
            }),
            Some(encode_value(&RecordValue::ConsumerGroup(value))),
        );
        if let Err(e) = self.store.append(self.partition_for(&group.id), &[record]) {
            tracing::error!(group = %group.id, error = %e, "cannot persist consumer group");
        }
    }

    pub fn consumer_group_describe(
        &self,
        req: ConsumerGroupDescribeRequest,
    ) -> ConsumerGroupDescribeResponse {
        let groups = self.lock();
        let described = req
            .group_ids
            .iter()
            .map(|id| {
                let base = DescribedGroup::default()
                    .with_group_id(id.clone())
                    .with_authorized_operations(authorized_operations(
                        req.include_authorized_operations,
                    ));
                if let Err(e) = self.serves(id) {
                    return base.with_error_code(e.code());
                }
                match groups.get(id.as_str()) {
                    None => base
                        .with_error_code(ResponseError::GroupIdNotFound.code())
                        .with_error_message(Some(s(&format!("Group {} not found.", id.as_str()))))
                        .with_group_state(s("Dead")),
                    // Clients fall back to DescribeGroups for classic groups on this answer.
                    Some(g) if g.consumer.is_none() => base
                        .with_error_code(ResponseError::GroupIdNotFound.code())
                        .with_error_message(Some(s(&format!(
                            "Group {} is not a consumer group.",
                            id.as_str()
                        ))))
                        .with_group_state(s("Dead")),
                    Some(g) => {
                        let c = g.consumer.as_ref();
                        let c = c.cloned().unwrap_or_default();
                        base.with_group_state(s(c.state_name()))
                            .with_group_epoch(c.group_epoch)
                            .with_assignment_epoch(c.assignment_epoch)
                            .with_assignor_name(s(&c.assignor))
                            .with_members(
                                c.members
                                    .values()
                                    .map(|m| self.describe_member(&c, m))
                                    .collect(),
                            )
                    }
                }
            })
            .collect();
        ConsumerGroupDescribeResponse::default().with_groups(described)
    }

    fn describe_member(&self, c: &ConsumerGroup, m: &ConsumerMember) -> Member {
        let wire = |a: &Assignment| {
            DescribeAssignment::default().with_topic_partitions(
                a.iter()
                    .map(|(t, ps)| {
                        TopicPartitions::default()
                            .with_topic_id(*t)
                            .with_topic_name(TopicName(StrBytes::from_string(
                                self.catalog.topic_name(*t).unwrap_or_default(),
                            )))
                            .with_partitions(ps.iter().copied().collect())
                    })
                    .collect(),
            )
        };
        Member::default()
            .with_member_id(s(&m.id))
            .with_instance_id(m.instance_id.as_deref().map(s))
            .with_rack_id(m.rack.as_deref().map(s))
            .with_member_epoch(m.epoch)
            .with_client_id(s(&m.client_id))
            .with_client_host(s(&m.client_host))
            .with_subscribed_topic_names(m.subscribed.iter().map(|t| TopicName(s(t))).collect())
            .with_subscribed_topic_regex(m.subscribed_regex.as_ref().map(|r| s(&r.source)))
            .with_assignment(wire(&consumer::union(&m.assigned, &m.revoking)))
            .with_target_assignment(wire(&c.target.get(&m.id).cloned().unwrap_or_default()))
            // KIP-1099's member type: 0 classic, 1 consumer.
            .with_member_type(if m.classic.is_some() { 0 } else { 1 })
    }
}
