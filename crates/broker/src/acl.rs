//! The broker's ACL authority: the configured authorizer (ferry-authz's `StandardAuthorizer`
//! rules) and the checks request handlers make with it.
//!
//! What it owns: `Option<Authorizer>`, `None` when `authorizer.class.name` is empty. Then every
//! check answers allowed after one branch and touches no lock, and handlers keep the
//! authorized-operations masks they answered before ACLs existed.
//!
//! What it delegates: the decision rules (super users, deny over allow, patterns, implied
//! operations, `allow.everyone.if.no.acl.found`) to ferry-authz; the ACLs themselves to the
//! cluster metadata, whose every image change replaces them here through [`AclAuthority::set_bindings`].
//!
//! Invariant: checks only read. The lock is a `RwLock` held for one decision at a time, so a
//! metadata update waits at most one check and requests never wait for each other.

use std::collections::BTreeMap;
use std::sync::{Mutex, RwLock};

use ferry_authz::{
    AccessControlEntry, AclBinding, AclError, AclOperation, AclPermissionType, Authorizer,
    AuthorizerConfig, PatternType, ResourcePattern, ResourceType, CLUSTER_NAME,
};
use uuid::Uuid;

use kafka_protocol::error::ResponseError;

use crate::broker::Broker;
use crate::handlers::RequestContext;

/// The configured authorizer, or none (everything allowed).
#[derive(Debug, Default)]
pub struct AclAuthority {
    authorizer: Option<RwLock<Authorizer>>,
    /// The image's ACLs last applied, so an image change that leaves them alone (most do: ISR
    /// and leader changes) does not rebuild the authorizer.
    applied: Mutex<Option<BTreeMap<Uuid, ferry_cluster::security::AclBinding>>>,
}

impl AclAuthority {
    /// The authority of `config` (`None`: no authorizer configured), holding no ACLs yet.
    pub fn new(config: Option<AuthorizerConfig>) -> Self {
        Self {
            authorizer: config.map(|c| RwLock::new(Authorizer::new(c))),
            applied: Mutex::new(None),
        }
    }

    /// True when an authorizer is configured.
    pub fn is_enabled(&self) -> bool {
        self.authorizer.is_some()
    }

    /// Reads the authorizer; `None` when none is configured. A poisoned lock still holds a
    /// consistent authorizer (replacing its ACLs is one assignment), so it is used as it is.
    fn read<T>(&self, f: impl FnOnce(&Authorizer) -> T) -> Option<T> {
        let lock = self.authorizer.as_ref()?;
        let guard = lock.read().unwrap_or_else(|e| e.into_inner());
        Some(f(&guard))
    }

    /// May the request's principal perform `op` on the resource `name` of `resource_type`?
    pub fn authorize(
        &self,
        ctx: &RequestContext,
        op: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        self.read(|a| {
            a.authorize(&ctx.principal, ctx.acl_host(), op, resource_type, name)
                .is_allowed()
        })
        .unwrap_or(true)
    }

    /// The authorized-operations mask of the resource for the request's principal; `None` when
    /// no authorizer is configured (the handler answers its ACL-less mask).
    pub fn authorized_operations(
        &self,
        ctx: &RequestContext,
        resource_type: ResourceType,
        name: &str,
    ) -> Option<i32> {
        self.read(|a| a.authorized_operations(&ctx.principal, ctx.acl_host(), resource_type, name))
    }

    /// Could the request's principal perform `op` on some resource of `resource_type`?
    /// (Kafka's `authorizeByResourceType`.)
    pub fn authorize_by_resource_type(
        &self,
        ctx: &RequestContext,
        op: AclOperation,
        resource_type: ResourceType,
    ) -> bool {
        self.read(|a| {
            a.authorize_by_resource_type(&ctx.principal, ctx.acl_host(), op, resource_type)
        })
        .unwrap_or(true)
    }

    /// Replaces every ACL with `bindings`: the hook the cluster metadata calls with the ACLs of
    /// each new image. On error the old ACLs stay. Without an authorizer it does nothing.
    pub fn set_bindings(
        &self,
        bindings: impl IntoIterator<Item = AclBinding>,
    ) -> Result<(), AclError> {
        let Some(lock) = &self.authorizer else {
            return Ok(());
        };
        // Built outside the lock so checks never wait for a rebuild.
        let mut fresh = Authorizer::new(AuthorizerConfig::default());
        fresh.replace_all(bindings)?;
        let mut guard = lock.write().unwrap_or_else(|e| e.into_inner());
        let config = guard.config().clone();
        fresh.set_config(config);
        *guard = fresh;
        Ok(())
    }

    /// Follows the ACLs of a new metadata image (every broker applies every image): replaces
    /// the authorizer's ACLs when they differ from the last image's.
    pub fn follow_image(&self, acls: &BTreeMap<Uuid, ferry_cluster::security::AclBinding>) {
        if self.authorizer.is_none() {
            return;
        }
        let mut applied = self.applied.lock().unwrap_or_else(|e| e.into_inner());
        if applied.as_ref() == Some(acls) {
            return;
        }
        match self.set_bindings(acls.values().map(to_authz_binding)) {
            Ok(()) => *applied = Some(acls.clone()),
            // The controller validated every binding it stored, so this is a bug or a newer
            // controller's code: keep the ACLs in force and say so.
            Err(e) => {
                tracing::error!(error = %e, "cannot apply the metadata image's ACLs; the previous ACLs stay in force")
            }
        }
    }

    /// The stored ACLs (for DescribeAcls); empty without an authorizer.
    pub fn bindings(&self) -> Vec<AclBinding> {
        self.read(Authorizer::bindings).unwrap_or_default()
    }
}

impl RequestContext {
    /// May this request perform `op` on the resource `name` of `resource_type`?
    pub fn may(
        &self,
        broker: &Broker,
        op: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        broker.acls.authorize(self, op, resource_type, name)
    }

    /// May this request perform `op` on the topic `name`?
    pub fn may_topic(&self, broker: &Broker, op: AclOperation, name: &str) -> bool {
        self.may(broker, op, ResourceType::Topic, name)
    }

    /// May this request perform `op` on the group `id`?
    pub fn may_group(&self, broker: &Broker, op: AclOperation, id: &str) -> bool {
        self.may(broker, op, ResourceType::Group, id)
    }

    /// May this request perform `op` on the transactional id `id`?
    pub fn may_txn(&self, broker: &Broker, op: AclOperation, id: &str) -> bool {
        self.may(broker, op, ResourceType::TransactionalId, id)
    }

    /// May this request perform `op` on the cluster?
    pub fn may_cluster(&self, broker: &Broker, op: AclOperation) -> bool {
        self.may(broker, op, ResourceType::Cluster, CLUSTER_NAME)
    }

    /// The error of a cluster-level admin API the request may not use: DescribeAcls,
    /// DescribeUserScramCredentials and DescribeClientQuotas need `Describe`; CreateAcls,
    /// DeleteAcls, AlterUserScramCredentials and AlterClientQuotas need `Alter`.
    pub fn cluster_denied(&self, broker: &Broker, op: AclOperation) -> Option<ResponseError> {
        (!self.may_cluster(broker, op)).then_some(ResponseError::ClusterAuthorizationFailed)
    }

    /// Producing idempotently: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic.
    pub fn may_idempotent_write(&self, broker: &Broker) -> bool {
        self.may_cluster(broker, AclOperation::IdempotentWrite)
            || broker.acls.authorize_by_resource_type(
                self,
                AclOperation::Write,
                ResourceType::Topic,
            )
    }

    /// Creating a topic: CREATE on the cluster, else on the topic (Kafka checks both).
    pub fn may_create_topic(&self, broker: &Broker, name: &str) -> bool {
        self.may_cluster(broker, AclOperation::Create)
            || self.may_topic(broker, AclOperation::Create, name)
    }

    /// The host an ACL's host is compared with: the client's address without Kafka's `/`.
    pub fn acl_host(&self) -> &str {
        self.client_host
            .strip_prefix('/')
            .unwrap_or(&self.client_host)
    }
}

/// An ACL as the cluster metadata stores it (Kafka's wire codes) in ferry-authz's terms.
pub fn to_authz_binding(b: &ferry_cluster::security::AclBinding) -> AclBinding {
    AclBinding::new(
        ResourcePattern::new(
            ResourceType::from_code(b.resource_type),
            b.resource_name.clone(),
            PatternType::from_code(b.pattern_type),
        ),
        AccessControlEntry::new(
            b.principal.clone(),
            b.host.clone(),
            AclOperation::from_code(b.operation),
            AclPermissionType::from_code(b.permission_type),
        ),
    )
}
