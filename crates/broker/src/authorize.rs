//! The authorization seam of the security admin APIs (SCRAM credentials, ACLs, client quotas):
//! Kafka checks an operation on the CLUSTER resource for each of them. Every handler asks
//! [`Broker::authorize_cluster`] before acting; with no authorizer configured every request is
//! allowed, as Kafka does without `authorizer.class.name`; with one, the ACLs decide (`crate::acl`).

use crate::broker::Broker;
use crate::handlers::RequestContext;

/// The operations on the CLUSTER resource the security admin APIs need (Kafka's
/// `AclOperation` codes in the comments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterOperation {
    /// ALTER (7): CreateAcls, DeleteAcls.
    Alter,
    /// DESCRIBE (8): DescribeAcls.
    Describe,
    /// ALTER_CONFIGS (11): AlterUserScramCredentials, AlterClientQuotas.
    AlterConfigs,
    /// DESCRIBE_CONFIGS (10): DescribeUserScramCredentials, DescribeClientQuotas.
    DescribeConfigs,
}

impl ClusterOperation {
    /// Kafka's `AclOperation` code.
    pub fn code(self) -> i8 {
        match self {
            Self::Alter => 7,
            Self::Describe => 8,
            Self::DescribeConfigs => 10,
            Self::AlterConfigs => 11,
        }
    }
}

impl Broker {
    /// Whether the client of `ctx` may perform `op` on the cluster, as the ACLs say. Without
    /// an authorizer, everyone may.
    pub fn authorize_cluster(&self, ctx: &RequestContext, op: ClusterOperation) -> bool {
        ctx.may_cluster(self, ferry_authz::AclOperation::from_code(op.code()))
    }
}
