//! CreateAcls, DescribeAcls and DeleteAcls, with Kafka's validation and error codes
//! (`AclApis`, `AclControlManager`). Bindings live in the controller quorum; creating one that
//! exists already succeeds without a change. Describe reads this broker's image (it may lag a
//! change made through another broker, as in Kafka); filters match as ferry-authz's `AclBindingFilter` (Kafka's rules), the authorizer's own.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{message, str_bytes, RequestContext};

use crate::broker::Broker;
use ferry_authz::{
    AccessControlEntryFilter, AclBindingFilter, AclOperation, AclPermissionType, PatternType,
    ResourcePatternFilter, ResourceType,
};
use ferry_cluster::security::acl_codes::{CLUSTER_NAME, RESOURCE_CLUSTER};
use ferry_cluster::security::AclBinding;

pub async fn create(
    broker: &Arc<Broker>,
    request: CreateAclsRequest,
    ctx: &RequestContext,
) -> CreateAclsResponse {
    let allowed = ctx.may_cluster(broker, ferry_authz::AclOperation::Alter);
    let mut results = Vec::with_capacity(request.creations.len());
    for creation in request.creations {
        let error = if allowed {
            create_one(broker, creation).await
        } else {
            Some((ResponseError::ClusterAuthorizationFailed, String::new()))
        };
        let mut result = AclCreationResult::default().with_error_message(None);
        if let Some((e, why)) = error {
            broker.metrics.error("CreateAcls", e.code());
            result = result.with_error_code(e.code());
            if !why.is_empty() {
                result = result.with_error_message(message(why));
            }
        }
        results.push(result);
    }
    CreateAclsResponse::default().with_results(results)
}

async fn create_one(broker: &Broker, c: AclCreation) -> Option<(ResponseError, String)> {
    let binding = AclBinding {
        resource_type: c.resource_type,
        resource_name: c.resource_name.to_string(),
        pattern_type: c.resource_pattern_type,
        principal: c.principal.to_string(),
        host: c.host.to_string(),
        operation: c.operation,
        permission_type: c.permission_type,
    };
    if binding.resource_type == RESOURCE_CLUSTER && binding.resource_name != CLUSTER_NAME {
        return Some((
            ResponseError::InvalidRequest,
            format!("The only valid name for the CLUSTER resource is {CLUSTER_NAME}"),
        ));
    }
    if binding.resource_name.is_empty() {
        return Some((
            ResponseError::InvalidRequest,
            "Invalid empty resource name specified".into(),
        ));
    }
    if let Some(why) = binding.invalid_reason() {
        return Some((ResponseError::InvalidRequest, why));
    }
    broker
        .metadata
        .create_acl(binding)
        .await
        .err()
        .map(|e| (crate::errors::security_record_error(&e), e.to_string()))
}

pub fn describe(
    broker: &Arc<Broker>,
    r: DescribeAclsRequest,
    ctx: &RequestContext,
) -> DescribeAclsResponse {
    let refuse = |e: ResponseError, why: &str| {
        broker.metrics.error("DescribeAcls", e.code());
        let response = DescribeAclsResponse::default()
            .with_error_message(None)
            .with_error_code(e.code());
        if why.is_empty() {
            response
        } else {
            response.with_error_message(message(why))
        }
    };
    if !ctx.may_cluster(broker, ferry_authz::AclOperation::Describe) {
        return refuse(ResponseError::ClusterAuthorizationFailed, "");
    }
    let filter = acl_filter(
        r.resource_type_filter,
        r.resource_name_filter,
        r.pattern_type_filter,
        r.principal_filter,
        r.host_filter,
        r.operation,
        r.permission_type,
    );
    if filter.is_unknown() {
        return refuse(
            ResponseError::InvalidRequest,
            "The request contained an invalid filter",
        );
    }
    let image = broker.metadata.image();
    // Grouped by resource pattern, as Kafka answers.
    let mut by_resource: BTreeMap<(i8, &str, i8), Vec<AclDescription>> = BTreeMap::new();
    for b in image
        .acl_bindings()
        .values()
        .filter(|b| selects(&filter, b))
    {
        by_resource
            .entry((b.resource_type, b.resource_name.as_str(), b.pattern_type))
            .or_default()
            .push(
                AclDescription::default()
                    .with_principal(str_bytes(&b.principal))
                    .with_host(str_bytes(&b.host))
                    .with_operation(b.operation)
                    .with_permission_type(b.permission_type),
            );
    }
    let resources = by_resource
        .into_iter()
        .map(|((resource_type, name, pattern_type), acls)| {
            DescribeAclsResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(str_bytes(name))
                .with_pattern_type(pattern_type)
                .with_acls(acls)
        })
        .collect();
    DescribeAclsResponse::default()
        .with_error_message(None)
        .with_resources(resources)
}

pub async fn delete(
    broker: &Arc<Broker>,
    request: DeleteAclsRequest,
    ctx: &RequestContext,
) -> DeleteAclsResponse {
    let allowed = ctx.may_cluster(broker, ferry_authz::AclOperation::Alter);
    let mut results = Vec::with_capacity(request.filters.len());
    for f in request.filters {
        let filter = acl_filter(
            f.resource_type_filter,
            f.resource_name_filter,
            f.pattern_type_filter,
            f.principal_filter,
            f.host_filter,
            f.operation,
            f.permission_type,
        );
        let result = if !allowed {
            filter_error(ResponseError::ClusterAuthorizationFailed, None)
        } else if filter.is_unknown() {
            filter_error(ResponseError::InvalidRequest, message("Unknown filter."))
        } else {
            delete_matching(broker, &filter).await
        };
        if result.error_code != 0 {
            broker.metrics.error("DeleteAcls", result.error_code);
        }
        results.push(result);
    }
    DeleteAclsResponse::default().with_filter_results(results)
}

fn filter_error(e: ResponseError, why: Option<StrBytes>) -> DeleteAclsFilterResult {
    DeleteAclsFilterResult::default()
        .with_error_code(e.code())
        .with_error_message(why)
}

/// Deletes every stored binding `filter` matches; each is listed with its own outcome (one
/// already deleted by an earlier filter or a concurrent request counts as deleted).
async fn delete_matching(broker: &Broker, filter: &AclBindingFilter) -> DeleteAclsFilterResult {
    let image = broker.metadata.image();
    let mut matching = Vec::new();
    for (id, b) in image
        .acl_bindings()
        .iter()
        .filter(|(_, b)| selects(filter, b))
    {
        let mut acl = DeleteAclsMatchingAcl::default()
            .with_resource_type(b.resource_type)
            .with_resource_name(str_bytes(&b.resource_name))
            .with_pattern_type(b.pattern_type)
            .with_principal(str_bytes(&b.principal))
            .with_host(str_bytes(&b.host))
            .with_operation(b.operation)
            .with_permission_type(b.permission_type);
        if let Err(e) = broker.metadata.delete_acl(*id).await {
            let code = crate::errors::security_record_error(&e);
            if code != ResponseError::ResourceNotFound {
                acl = acl
                    .with_error_code(code.code())
                    .with_error_message(message(e.to_string()));
            }
        }
        matching.push(acl);
    }
    DeleteAclsFilterResult::default()
        .with_error_message(None)
        .with_matching_acls(matching)
}

/// A DescribeAcls or DeleteAcls filter from its wire fields (Kafka's codes; an unknown code
/// makes the filter unknown, which the APIs refuse).
fn acl_filter(
    resource_type: i8,
    name: Option<StrBytes>,
    pattern_type: i8,
    principal: Option<StrBytes>,
    host: Option<StrBytes>,
    operation: i8,
    permission: i8,
) -> AclBindingFilter {
    AclBindingFilter::new(
        ResourcePatternFilter::new(
            ResourceType::from_code(resource_type),
            name.map(|s| s.to_string()),
            PatternType::from_code(pattern_type),
        ),
        AccessControlEntryFilter::new(
            principal.map(|s| s.to_string()),
            host.map(|s| s.to_string()),
            AclOperation::from_code(operation),
            AclPermissionType::from_code(permission),
        ),
    )
}

/// Whether `filter` selects the stored binding `b` (the same rules the authorizer matches by).
fn selects(filter: &AclBindingFilter, b: &AclBinding) -> bool {
    filter.matches(&crate::acl::to_authz_binding(b))
}
