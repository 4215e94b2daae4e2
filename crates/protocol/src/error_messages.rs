//! Null, not "", for an error message with nothing to say.
//!
//! `kafka-protocol` gives a nullable `ErrorMessage` the default `Some("")`; Kafka's brokers send
//! null when there is no message (`ApiError.NONE.message()`), and clients see the difference:
//! kafkajs compares it, the Java client passes it on as the exception's text. Rather than have
//! every handler remember `.with_error_message(None)`, the connection runs each response through
//! [`null_empty_error_messages`] before encoding it.

use kafka_protocol::messages::ResponseKind;
use kafka_protocol::protocol::StrBytes;

fn null_if_empty(message: &mut Option<StrBytes>) {
    if message.as_deref().is_some_and(str::is_empty) {
        *message = None;
    }
}

/// Turns every empty error message of `response` into null.
pub fn null_empty_error_messages(response: &mut ResponseKind) {
    match response {
        ResponseKind::AlterClientQuotas(r) => {
            r.entries
                .iter_mut()
                .for_each(|e| null_if_empty(&mut e.error_message));
        }
        ResponseKind::AlterConfigs(r) => {
            r.responses
                .iter_mut()
                .for_each(|e| null_if_empty(&mut e.error_message));
        }
        ResponseKind::IncrementalAlterConfigs(r) => {
            r.responses
                .iter_mut()
                .for_each(|e| null_if_empty(&mut e.error_message));
        }
        ResponseKind::AlterPartitionReassignments(r) => {
            null_if_empty(&mut r.error_message);
            r.responses
                .iter_mut()
                .flat_map(|t| t.partitions.iter_mut())
                .for_each(|p| null_if_empty(&mut p.error_message));
        }
        ResponseKind::ListPartitionReassignments(r) => null_if_empty(&mut r.error_message),
        ResponseKind::AlterUserScramCredentials(r) => {
            r.results
                .iter_mut()
                .for_each(|e| null_if_empty(&mut e.error_message));
        }
        ResponseKind::DescribeUserScramCredentials(r) => {
            null_if_empty(&mut r.error_message);
            r.results
                .iter_mut()
                .for_each(|e| null_if_empty(&mut e.error_message));
        }
        ResponseKind::CreateAcls(r) => {
            r.results
                .iter_mut()
                .for_each(|e| null_if_empty(&mut e.error_message));
        }
        ResponseKind::DeleteAcls(r) => {
            for filter in &mut r.filter_results {
                null_if_empty(&mut filter.error_message);
                filter
                    .matching_acls
                    .iter_mut()
                    .for_each(|a| null_if_empty(&mut a.error_message));
            }
        }
        ResponseKind::DescribeAcls(r) => null_if_empty(&mut r.error_message),
        ResponseKind::DescribeClientQuotas(r) => null_if_empty(&mut r.error_message),
        ResponseKind::CreateTopics(r) => {
            r.topics
                .iter_mut()
                .for_each(|t| null_if_empty(&mut t.error_message));
        }
        ResponseKind::DescribeConfigs(r) => {
            r.results
                .iter_mut()
                .for_each(|e| null_if_empty(&mut e.error_message));
        }
        ResponseKind::DescribeQuorum(r) => {
            null_if_empty(&mut r.error_message);
            r.topics
                .iter_mut()
                .flat_map(|t| t.partitions.iter_mut())
                .for_each(|p| null_if_empty(&mut p.error_message));
        }
        ResponseKind::ElectLeaders(r) => {
            r.replica_election_results
                .iter_mut()
                .flat_map(|t| t.partition_result.iter_mut())
                .for_each(|p| null_if_empty(&mut p.error_message));
        }
        ResponseKind::FindCoordinator(r) => {
            null_if_empty(&mut r.error_message);
            r.coordinators
                .iter_mut()
                .for_each(|c| null_if_empty(&mut c.error_message));
        }
        ResponseKind::SaslAuthenticate(r) => null_if_empty(&mut r.error_message),
        ResponseKind::UpdateFeatures(r) => {
            null_if_empty(&mut r.error_message);
            r.results
                .iter_mut()
                .for_each(|e| null_if_empty(&mut e.error_message));
        }
        ResponseKind::AddRaftVoter(r) => null_if_empty(&mut r.error_message),
        ResponseKind::RemoveRaftVoter(r) => null_if_empty(&mut r.error_message),
        ResponseKind::UnregisterBroker(r) => null_if_empty(&mut r.error_message),
        ResponseKind::ControllerRegistration(r) => null_if_empty(&mut r.error_message),
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
