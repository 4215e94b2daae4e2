//! Null, not "", for an error message with nothing to say.
//!
//! `kafka-protocol` gives a nullable `ErrorMessage` the default `Some("")`; Kafka's brokers send
//! null when there is no message (`ApiError.NONE.message()`), and clients see the difference:
//! kafkajs compares it, the Java client passes it on as the exception's text. Rather than have
//! every handler remember `.with_error_message(None)`, the connection runs each response through
//! [`null_empty_error_messages`] before encoding it.

use kafka_protocol::messages::{
    add_raft_voter_response, alter_client_quotas_response, alter_configs_response,
    alter_partition_reassignments_response, alter_user_scram_credentials_response,
    controller_registration_response, create_acls_response, create_topics_response,
    delete_acls_response, describe_acls_response, describe_client_quotas_response,
    describe_configs_response, describe_quorum_response, describe_user_scram_credentials_response,
    elect_leaders_response, find_coordinator_response, incremental_alter_configs_response,
    list_partition_reassignments_response, remove_raft_voter_response, sasl_authenticate_response,
    unregister_broker_response, update_features_response, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

/// A response, or a part of one, that carries a nullable error message.
trait HasErrorMessage {
    fn error_message(&mut self) -> &mut Option<StrBytes>;
}

macro_rules! has_error_message {
    ($($part:ty),* $(,)?) => {
        $(impl HasErrorMessage for $part {
            fn error_message(&mut self) -> &mut Option<StrBytes> {
                &mut self.error_message
            }
        })*
    };
}

has_error_message!(
    add_raft_voter_response::AddRaftVoterResponse,
    alter_client_quotas_response::EntryData,
    alter_configs_response::AlterConfigsResourceResponse,
    alter_partition_reassignments_response::AlterPartitionReassignmentsResponse,
    alter_partition_reassignments_response::ReassignablePartitionResponse,
    alter_user_scram_credentials_response::AlterUserScramCredentialsResult,
    controller_registration_response::ControllerRegistrationResponse,
    create_acls_response::AclCreationResult,
    create_topics_response::CreatableTopicResult,
    delete_acls_response::DeleteAclsFilterResult,
    delete_acls_response::DeleteAclsMatchingAcl,
    describe_acls_response::DescribeAclsResponse,
    describe_client_quotas_response::DescribeClientQuotasResponse,
    describe_configs_response::DescribeConfigsResult,
    describe_quorum_response::DescribeQuorumResponse,
    describe_quorum_response::PartitionData,
    describe_user_scram_credentials_response::DescribeUserScramCredentialsResponse,
    describe_user_scram_credentials_response::DescribeUserScramCredentialsResult,
    elect_leaders_response::PartitionResult,
    find_coordinator_response::Coordinator,
    find_coordinator_response::FindCoordinatorResponse,
    incremental_alter_configs_response::AlterConfigsResourceResponse,
    list_partition_reassignments_response::ListPartitionReassignmentsResponse,
    remove_raft_voter_response::RemoveRaftVoterResponse,
    sasl_authenticate_response::SaslAuthenticateResponse,
    unregister_broker_response::UnregisterBrokerResponse,
    update_features_response::UpdatableFeatureResult,
    update_features_response::UpdateFeaturesResponse,
);

fn null_if_empty(part: &mut impl HasErrorMessage) {
    let message = part.error_message();
    if message.as_deref().is_some_and(str::is_empty) {
        *message = None;
    }
}

fn null_each<'a, T: HasErrorMessage + 'a>(parts: impl IntoIterator<Item = &'a mut T>) {
    parts.into_iter().for_each(null_if_empty);
}

/// Turns every empty error message of `response` into null.
pub fn null_empty_error_messages(response: &mut ResponseKind) {
    match response {
        ResponseKind::AlterClientQuotas(r) => null_each(&mut r.entries),
        ResponseKind::AlterConfigs(r) => null_each(&mut r.responses),
        ResponseKind::IncrementalAlterConfigs(r) => null_each(&mut r.responses),
        ResponseKind::AlterPartitionReassignments(r) => {
            null_if_empty(r);
            null_each(r.responses.iter_mut().flat_map(|t| &mut t.partitions));
        }
        ResponseKind::ListPartitionReassignments(r) => null_if_empty(r),
        ResponseKind::AlterUserScramCredentials(r) => null_each(&mut r.results),
        ResponseKind::DescribeUserScramCredentials(r) => {
            null_if_empty(r);
            null_each(&mut r.results);
        }
        ResponseKind::CreateAcls(r) => null_each(&mut r.results),
        ResponseKind::DeleteAcls(r) => {
            null_each(&mut r.filter_results);
            null_each(
                r.filter_results
                    .iter_mut()
                    .flat_map(|f| &mut f.matching_acls),
            );
        }
        ResponseKind::DescribeAcls(r) => null_if_empty(r),
        ResponseKind::DescribeClientQuotas(r) => null_if_empty(r),
        ResponseKind::CreateTopics(r) => null_each(&mut r.topics),
        ResponseKind::DescribeConfigs(r) => null_each(&mut r.results),
        ResponseKind::DescribeQuorum(r) => {
            null_if_empty(r);
            null_each(r.topics.iter_mut().flat_map(|t| &mut t.partitions));
        }
        ResponseKind::ElectLeaders(r) => null_each(
            r.replica_election_results
                .iter_mut()
                .flat_map(|t| &mut t.partition_result),
        ),
        ResponseKind::FindCoordinator(r) => {
            null_if_empty(r);
            null_each(&mut r.coordinators);
        }
        ResponseKind::SaslAuthenticate(r) => null_if_empty(r),
        ResponseKind::UpdateFeatures(r) => {
            null_if_empty(r);
            null_each(&mut r.results);
        }
        ResponseKind::AddRaftVoter(r) => null_if_empty(r),
        ResponseKind::RemoveRaftVoter(r) => null_if_empty(r),
        ResponseKind::UnregisterBroker(r) => null_if_empty(r),
        ResponseKind::ControllerRegistration(r) => null_if_empty(r),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
    use kafka_protocol::messages::delete_acls_response::{
        DeleteAclsFilterResult, DeleteAclsMatchingAcl,
    };
    use kafka_protocol::messages::find_coordinator_response::Coordinator;
    use kafka_protocol::messages::{
        ApiKey, CreateTopicsResponse, DeleteAclsResponse, FindCoordinatorResponse, TopicName,
    };

    use super::*;
    use crate::encode_response;

    fn text(s: &'static str) -> Option<StrBytes> {
        Some(StrBytes::from_static_str(s))
    }

    #[test]
    fn the_crates_default_is_an_empty_message() {
        // If kafka-protocol ever defaults to null, this pass has become unnecessary.
        assert_eq!(CreatableTopicResult::default().error_message, text(""));
    }

    #[test]
    fn empty_messages_become_null_and_real_ones_stay() {
        let mut r = ResponseKind::CreateTopics(CreateTopicsResponse::default().with_topics(vec![
            CreatableTopicResult::default().with_name(TopicName(StrBytes::from_static_str("a"))),
            CreatableTopicResult::default()
                .with_name(TopicName(StrBytes::from_static_str("b")))
                .with_error_code(36)
                .with_error_message(text("Topic 'b' already exists.")),
        ]));
        null_empty_error_messages(&mut r);
        let ResponseKind::CreateTopics(r) = r else {
            unreachable!()
        };
        assert_eq!(r.topics[0].error_message, None);
        assert_eq!(r.topics[1].error_message, text("Topic 'b' already exists."));
    }

    #[test]
    fn nested_messages_are_reached() {
        let mut r = ResponseKind::DeleteAcls(
            DeleteAclsResponse::default()
                .with_filter_results(vec![DeleteAclsFilterResult::default()
                    .with_matching_acls(vec![DeleteAclsMatchingAcl::default()])]),
        );
        null_empty_error_messages(&mut r);
        let ResponseKind::DeleteAcls(r) = r else {
            unreachable!()
        };
        assert_eq!(r.filter_results[0].error_message, None);
        assert_eq!(r.filter_results[0].matching_acls[0].error_message, None);

        let mut r = ResponseKind::FindCoordinator(
            FindCoordinatorResponse::default().with_coordinators(vec![Coordinator::default()]),
        );
        null_empty_error_messages(&mut r);
        let ResponseKind::FindCoordinator(r) = r else {
            unreachable!()
        };
        assert_eq!(r.error_message, None);
        assert_eq!(r.coordinators[0].error_message, None);
    }

    /// On the wire a null message is the length -1, which is what a client decodes as null.
    #[test]
    fn a_null_message_is_encoded_as_length_minus_one() {
        let mut r = ResponseKind::FindCoordinator(FindCoordinatorResponse::default());
        null_empty_error_messages(&mut r);
        let frame = encode_response(ApiKey::FindCoordinator, 2, 9, &r).unwrap();
        let bytes = frame.to_bytes().unwrap();
        // size, correlation id, throttle time, error code, then the message's i16 length.
        assert_eq!(&bytes[14..16], &(-1i16).to_be_bytes());
    }
}
