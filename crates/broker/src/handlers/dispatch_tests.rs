//! Every API ferry advertises in ApiVersions has a handler: a default request of each, at the
//! newest version served, gets an answer rather than the `unserved` fallback (no response).

use std::time::Duration;

use kafka_protocol::messages::{ApiKey, ProduceRequest, RequestKind};

use super::tests::{broker, request};
use super::RequestContext;

/// A default request body of `key`: every API ferry serves must be listed here.
fn default_body(key: ApiKey) -> RequestKind {
    macro_rules! bodies {
        ($($api:ident),* $(,)?) => {
            match key {
                $(ApiKey::$api => RequestKind::$api(Default::default()),)*
                other => panic!("{other:?} is served: give it a default body here"),
            }
        };
    }
    match key {
        // acks=0 is the one request answered with no response at all.
        ApiKey::Produce => RequestKind::Produce(ProduceRequest::default().with_acks(-1)),
        _ => bodies!(
            Produce,
            Fetch,
            ListOffsets,
            Metadata,
            ApiVersions,
            SaslHandshake,
            SaslAuthenticate,
            CreateTopics,
            DeleteTopics,
            DeleteRecords,
            InitProducerId,
            OffsetForLeaderEpoch,
            DescribeConfigs,
            AlterConfigs,
            DescribeLogDirs,
            AlterReplicaLogDirs,
            CreatePartitions,
            ElectLeaders,
            DescribeQuorum,
            AlterPartitionReassignments,
            ListPartitionReassignments,
            IncrementalAlterConfigs,
            DescribeCluster,
            FindCoordinator,
            JoinGroup,
            SyncGroup,
            Heartbeat,
            LeaveGroup,
            OffsetCommit,
            OffsetFetch,
            ListGroups,
            DescribeGroups,
            DeleteGroups,
            OffsetDelete,
            ConsumerGroupHeartbeat,
            ConsumerGroupDescribe,
            AddPartitionsToTxn,
            AddOffsetsToTxn,
            EndTxn,
            TxnOffsetCommit,
            WriteTxnMarkers,
            DescribeTransactions,
            ListTransactions,
            DescribeProducers,
            DescribeAcls,
            CreateAcls,
            DeleteAcls,
            DescribeClientQuotas,
            AlterClientQuotas,
            DescribeUserScramCredentials,
            AlterUserScramCredentials,
            DescribeTopicPartitions,
            GetTelemetrySubscriptions,
            PushTelemetry,
            ListConfigResources,
        ),
    }
}

#[tokio::test]
async fn every_advertised_api_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    for &(key, _, max) in ferry_protocol::SUPPORTED {
        let answer = tokio::time::timeout(
            Duration::from_secs(20),
            super::handle(
                &b,
                request(key, max, default_body(key)),
                &RequestContext::for_tests(),
            ),
        )
        .await
        .unwrap_or_else(|_| panic!("{key:?} v{max} not answered in time"));
        assert!(answer.is_some(), "{key:?} v{max} has no handler");
    }
}
