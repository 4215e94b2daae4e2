//! The API versions ferry serves. Only APIs with a real handler appear here: clients decide what
//! to send from this table, so advertising an API ferry cannot answer would break them.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};
use kafka_protocol::protocol::VersionRange;

/// (API, min version, max version). Minimums follow Kafka 4.0 (KIP-896) where the codec allows;
/// maximums are the newest versions whose fields ferry fills in correctly.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 13),
    // v18 (KIP-1166) adds a follower's known high watermark to each partition; the response is
    // unchanged.
    (ApiKey::Fetch, 4, 18),
    (ApiKey::ListOffsets, 1, 10),
    (ApiKey::Metadata, 0, 13),
    // KIP-966: what Kafka 3.7+ admin clients send for describeTopics.
    (ApiKey::DescribeTopicPartitions, 0, 0),
    (ApiKey::ApiVersions, 0, 4),
    // SASL (KIP-152). After SaslHandshake v0 the tokens come as bare frames, which ferry
    // serves too: librdkafka only sends v1 to a broker whose range starts at 0.
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::DescribeLogDirs, 1, 4),
    // Moving a replica between this broker's log dirs (KIP-113); v0 went in Kafka 4.0.
    (ApiKey::AlterReplicaLogDirs, 1, 2),
    (ApiKey::CreatePartitions, 0, 3),
    // Preferred and unclean elections (KIP-183, KIP-460), through the controller quorum.
    (ApiKey::ElectLeaders, 0, 2),
    // Moving replicas (KIP-455; v1 KIP-860's allow_replication_factor_change).
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeCluster, 0, 2),
    // The metadata quorum as its leader sees it (KIP-595; v1 fetch times, KIP-836; v2 nodes).
    (ApiKey::DescribeQuorum, 0, 2),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    // Transactions v1 (KIP-98, KIP-447, KIP-890 part 1): EndTxn and TxnOffsetCommit v5 belong
    // to transactions v2, which is not served.
    (ApiKey::AddPartitionsToTxn, 0, 5),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::EndTxn, 0, 4),
    (ApiKey::TxnOffsetCommit, 0, 4),
    (ApiKey::WriteTxnMarkers, 1, 1),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 2),
    (ApiKey::DescribeProducers, 0, 0),
    // Security administration, stored in the controller quorum.
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    // Client telemetry (KIP-714): ferry asks for no metrics.
    (ApiKey::GetTelemetrySubscriptions, 0, 0),
    (ApiKey::PushTelemetry, 0, 0),
    // v0 is KIP-714's ListClientMetricsResources; v1 (KIP-1142) lists topics, brokers, groups.
    (ApiKey::ListConfigResources, 0, 1),
];

/// The version range ferry serves for `key`, if it serves the API at all.
pub fn supported_range(key: ApiKey) -> Option<VersionRange> {
    SUPPORTED
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|&(_, min, max)| VersionRange { min, max })
}

/// The ApiVersions answer: every API ferry serves, with `error_code`.
pub fn api_versions_response(error_code: i16) -> ApiVersionsResponse {
    let api_keys = SUPPORTED
        .iter()
        .map(|&(key, min, max)| {
            ApiVersion::default()
                .with_api_key(key as i16)
                .with_min_version(min)
                .with_max_version(max)
        })
        .collect();
    ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(api_keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_advertised_range_is_one_the_codec_can_decode() {
        for &(key, min, max) in SUPPORTED {
            let codec = key.valid_versions();
            assert!(min <= max, "{key:?}");
            assert!(
                codec.min <= min && max <= codec.max,
                "{key:?}: {min}..{max} outside codec {codec}"
            );
        }
    }

    #[test]
    fn an_api_not_in_the_table_is_neither_advertised_nor_decoded() {
        use crate::request::{decode_request, DecodeError};
        let advertised: Vec<i16> = api_versions_response(0)
            .api_keys
            .iter()
            .map(|a| a.api_key)
            .collect();
        assert_eq!(advertised.len(), SUPPORTED.len());
        let mut unserved = 0;
        for key in ApiKey::iter() {
            let served = supported_range(key).is_some();
            assert_eq!(advertised.contains(&(key as i16)), served, "{key:?}");
            if served {
                continue;
            }
            unserved += 1;
            // Header only: the API is refused before its version or body are looked at.
            let version = key.valid_versions().max;
            let mut frame = Vec::new();
            frame.extend_from_slice(&(key as i16).to_be_bytes());
            frame.extend_from_slice(&version.to_be_bytes());
            frame.extend_from_slice(&5i32.to_be_bytes());
            frame.extend_from_slice(&[0, 0]);
            match decode_request(bytes::Bytes::from(frame)) {
                Err(DecodeError::UnsupportedApi {
                    api,
                    correlation_id: 5,
                }) => assert_eq!(api, key),
                other => panic!("{key:?} not refused as unserved: {other:?}"),
            }
        }
        assert!(unserved > 0, "the codec knows APIs ferry does not serve");
        // Every code the codec knows is covered by ApiKey::iter.
        for code in 0..=200i16 {
            if let Ok(key) = ApiKey::try_from(code) {
                assert!(ApiKey::iter().any(|k| k == key), "{key:?}");
            }
        }
    }

    #[test]
    fn no_api_is_listed_twice() {
        for (i, (a, _, _)) in SUPPORTED.iter().enumerate() {
            assert!(SUPPORTED[i + 1..].iter().all(|(b, _, _)| b != a));
        }
    }
}
