//! The security admin APIs through `handle`: what a write stores is what a describe answers,
//! and it survives a restart (the records are replayed from the controller's log).

use std::sync::Arc;

use ferry_protocol::DecodedRequest;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::{handle, RequestContext};
use crate::broker::Broker;
use crate::server::Server;
use ferry_cluster::security::ScramMechanism;

async fn broker_with_controller(dir: &std::path::Path) -> Arc<Broker> {
    let text = format!(
        "listeners = \"PLAINTEXT://127.0.0.1:0\"\n\"metrics.address\" = \"\"\n\"log.dirs\" = \"{}\"\n",
        dir.display()
    );
    let config = ferry_config::broker_config::BrokerConfig::parse(&text).unwrap();
    Server::start(config, ferry_common::system_clock())
        .await
        .unwrap()
        .broker
}

async fn call(b: &Arc<Broker>, key: ApiKey, version: i16, body: RequestKind) -> ResponseKind {
    let request = DecodedRequest {
        api_key: key,
        header: RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version),
        body,
    };
    handle(b, request, &RequestContext::for_tests())
        .await
        .unwrap()
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

async fn describe_scram(b: &Arc<Broker>, user: &str) -> DescribeUserScramCredentialsResponse {
    let body = DescribeUserScramCredentialsRequest::default()
        .with_users(Some(vec![UserName::default().with_name(s(user))]));
    match call(b, ApiKey::DescribeUserScramCredentials, 0, body.into()).await {
        ResponseKind::DescribeUserScramCredentials(r) => r,
        other => panic!("{other:?}"),
    }
}

async fn describe_all_acls(b: &Arc<Broker>) -> DescribeAclsResponse {
    let body = DescribeAclsRequest::default()
        .with_resource_type_filter(1)
        .with_resource_name_filter(None)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_pattern_type_filter(1)
        .with_operation(1)
        .with_permission_type(1);
    match call(b, ApiKey::DescribeAcls, 3, body.into()).await {
        ResponseKind::DescribeAcls(r) => r,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn credentials_and_acls_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let b = broker_with_controller(dir.path()).await;
        let upsert = AlterUserScramCredentialsRequest::default().with_upsertions(vec![
            ScramCredentialUpsertion::default()
                .with_name(s("alice"))
                .with_mechanism(2)
                .with_iterations(4096)
                .with_salt(bytes::Bytes::from_static(b"salt"))
                .with_salted_password(bytes::Bytes::from_static(b"salted")),
        ]);
        match call(&b, ApiKey::AlterUserScramCredentials, 0, upsert.into()).await {
            ResponseKind::AlterUserScramCredentials(r) => assert_eq!(r.results[0].error_code, 0),
            other => panic!("{other:?}"),
        }
        let create = CreateAclsRequest::default().with_creations(vec![AclCreation::default()
            .with_resource_type(2)
            .with_resource_name(s("orders"))
            .with_resource_pattern_type(3)
            .with_principal(s("User:alice"))
            .with_host(s("*"))
            .with_operation(3)
            .with_permission_type(3)]);
        match call(&b, ApiKey::CreateAcls, 3, create.into()).await {
            ResponseKind::CreateAcls(r) => assert_eq!(r.results[0].error_code, 0),
            other => panic!("{other:?}"),
        }
        assert_eq!(b.metadata.image().acl_bindings().len(), 1);
        assert_eq!(
            describe_all_acls(&b).await.resources.len(),
            1,
            "before the restart"
        );
        b.replicas.shutdown().unwrap();
    }
    let b = broker_with_controller(dir.path()).await;
    let described = describe_scram(&b, "alice").await;
    let infos = &described.results[0].credential_infos;
    assert_eq!((infos[0].mechanism, infos[0].iterations), (2, 4096));
    let stored = b
        .metadata
        .image()
        .scram_credential("alice", ScramMechanism::ScramSha512)
        .cloned()
        .unwrap();
    assert_eq!(
        (stored.stored_key, stored.server_key),
        super::scram::scram_keys(ScramMechanism::ScramSha512, b"salted")
    );
    let acls = describe_all_acls(&b).await;
    assert_eq!(b.metadata.image().acl_bindings().len(), 1, "{acls:?}");
    assert_eq!(acls.resources.len(), 1);
    assert_eq!(acls.resources[0].resource_name.as_str(), "orders");

    let missing = describe_scram(&b, "bob").await;
    assert_eq!(
        missing.results[0].error_code,
        ResponseError::ResourceNotFound.code()
    );
}
