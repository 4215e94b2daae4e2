//! Metadata and DescribeCluster answer each client with the endpoints of the listener it
//! connected on, and leave out brokers without that listener (as Kafka does).

use std::sync::Arc;

use ferry_cluster::Endpoint;
use kafka_protocol::messages::*;

use crate::security::{ConnectionSecurity, SecurityProtocol};
use crate::server::{open_broker, Advertised, MetadataQuorum};

fn endpoint(name: &str, host: &str, port: u16) -> Endpoint {
    Endpoint {
        name: name.into(),
        host: host.into(),
        port,
        security_protocol: "PLAINTEXT".into(),
    }
}

fn on(listener: &str) -> super::RequestContext {
    super::RequestContext {
        security: Arc::new(ConnectionSecurity {
            listener: listener.into(),
            protocol: SecurityProtocol::Plaintext,
            peer_cert_subject: None,
        }),
        ..super::RequestContext::for_tests()
    }
}

fn request(key: ApiKey, version: i16, body: RequestKind) -> ferry_protocol::DecodedRequest {
    ferry_protocol::DecodedRequest {
        api_key: key,
        header: RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version),
        body,
    }
}

#[tokio::test]
async fn each_listener_sees_its_own_endpoints() {
    let dir = tempfile::tempdir().unwrap();
    let config = ferry_config::BrokerConfig::parse(&format!(
        "\"metrics.address\" = \"\"\n\"log.dirs\" = \"{}\"",
        dir.path().display()
    ))
    .unwrap();
    let advertised = Advertised {
        endpoints: vec![
            endpoint("CLIENT", "kafka.example.com", 9092),
            endpoint("INTERNAL", "10.0.0.1", 9093),
        ],
        inter_broker: "INTERNAL".into(),
    };
    let (b, _) = open_broker(
        config,
        ferry_common::system_clock(),
        advertised,
        MetadataQuorum::Local,
    )
    .await
    .unwrap();
    let metadata = |listener: &'static str| {
        let b = b.clone();
        async move {
            let body = RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![])));
            match super::handle(&b, request(ApiKey::Metadata, 12, body), &on(listener)).await {
                Some(ResponseKind::Metadata(r)) => r
                    .brokers
                    .iter()
                    .map(|b| (b.node_id.0, b.host.to_string(), b.port))
                    .collect::<Vec<_>>(),
                other => panic!("{other:?}"),
            }
        }
    };
    assert_eq!(
        metadata("CLIENT").await,
        [(1, "kafka.example.com".to_string(), 9092)]
    );
    assert_eq!(
        metadata("INTERNAL").await,
        [(1, "10.0.0.1".to_string(), 9093)]
    );
    assert!(metadata("OTHER").await.is_empty());

    let body = RequestKind::DescribeCluster(DescribeClusterRequest::default());
    match super::handle(
        &b,
        request(ApiKey::DescribeCluster, 0, body),
        &on("INTERNAL"),
    )
    .await
    {
        Some(ResponseKind::DescribeCluster(r)) => {
            let brokers: Vec<_> = r
                .brokers
                .iter()
                .map(|b| (b.host.to_string(), b.port))
                .collect();
            assert_eq!(brokers, [("10.0.0.1".to_string(), 9093)]);
        }
        other => panic!("{other:?}"),
    }
}
