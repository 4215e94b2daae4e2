//! DescribeCluster, DescribeLogDirs and AlterReplicaLogDirs.

use std::collections::BTreeMap;
use std::sync::Arc;

use ferry_common::TopicPartition;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_replica_log_dirs_response::{
    AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
};
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{
    AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse, BrokerId, DescribeClusterRequest,
    DescribeClusterResponse, DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName,
};

use super::{message, str_bytes, RequestContext};
use crate::broker::Broker;
use ferry_authz::{AclOperation, ResourceType, CLUSTER_NAME};

const ENDPOINT_BROKERS: i8 = 1;
const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

pub fn describe_cluster(
    broker: &Arc<Broker>,
    request: DescribeClusterRequest,
    version: i16,
    ctx: &RequestContext,
) -> DescribeClusterResponse {
    let response = DescribeClusterResponse::default()
        .with_cluster_id(str_bytes(&broker.metadata.cluster_id()))
        .with_controller_id(BrokerId(broker.node_id))
        .with_endpoint_type(ENDPOINT_BROKERS)
        .with_cluster_authorized_operations(if request.include_cluster_authorized_operations {
            cluster_authorized_operations(broker, ctx)
        } else {
            AUTHORIZED_OPERATIONS_OMITTED
        });
    if version >= 1 && request.endpoint_type != ENDPOINT_BROKERS {
        broker.metrics.error(
            "DescribeCluster",
            ResponseError::UnsupportedEndpointType.code(),
        );
        return response
            .with_error_code(ResponseError::UnsupportedEndpointType.code())
            .with_error_message(message(
                "Only brokers endpoints are served on this listener",
            ));
    }
    let brokers = super::metadata::live_brokers(broker, ctx.listener())
        .into_iter()
        .map(|(id, host, port, rack)| {
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(id))
                .with_host(str_bytes(&host))
                .with_port(i32::from(port))
                .with_rack(rack.map(|r| str_bytes(&r)))
        })
        .collect();
    response.with_brokers(brokers)
}

/// The cluster's authorized-operations mask for the request's principal, as Kafka answers it in
/// DescribeCluster and Metadata: 0 without DESCRIBE on the cluster (the brokers are still
/// listed); every operation Kafka defines on a cluster when no authorizer is configured.
pub fn cluster_authorized_operations(broker: &Broker, ctx: &RequestContext) -> i32 {
    if !ctx.may_cluster(broker, AclOperation::Describe) {
        return 0;
    }
    broker
        .acls
        .authorized_operations(ctx, ResourceType::Cluster, CLUSTER_NAME)
        .unwrap_or_else(|| ResourceType::Cluster.all_operations_mask())
}

pub fn describe_log_dirs(
    broker: &Arc<Broker>,
    request: DescribeLogDirsRequest,
    ctx: &RequestContext,
) -> DescribeLogDirsResponse {
    if !ctx.may_cluster(broker, AclOperation::Describe) {
        let e = ResponseError::ClusterAuthorizationFailed;
        broker.metrics.error("DescribeLogDirs", e.code());
        return DescribeLogDirsResponse::default().with_error_code(e.code());
    }
    let wanted = |topic: &str, partition: i32| match &request.topics {
        None => true,
        Some(ts) => ts
            .iter()
            .any(|t| t.topic.as_str() == topic && t.partitions.contains(&partition)),
    };
    // log dir -> topic -> partitions
    let mut dirs: BTreeMap<String, BTreeMap<String, Vec<DescribeLogDirsPartition>>> =
        BTreeMap::new();
    for dir in broker.replicas.logs().log_dirs() {
        dirs.entry(dir.display().to_string()).or_default();
    }
    for p in broker.replicas.all() {
        if !wanted(&p.tp.topic, p.tp.partition) {
            continue;
        }
        let dir = p
            .log
            .dir()
            .parent()
            .map(|d| d.display().to_string())
            .unwrap_or_default();
        dirs.entry(dir)
            .or_default()
            .entry(p.tp.topic.clone())
            .or_default()
            .push(
                DescribeLogDirsPartition::default()
                    .with_partition_index(p.tp.partition)
                    .with_partition_size(p.log.size_in_bytes() as i64)
                    .with_offset_lag(0),
            );
    }
    // A replica on its way to another dir is listed there too, as Kafka's future replica: the
    // bytes copied so far, and as offset lag the records not copied yet (Kafka: the log's end
    // less the future log's), at least 1 until the move is done.
    for (tp, dest, copied, copied_to) in broker.replicas.log_dir_moves.running() {
        if !wanted(&tp.topic, tp.partition) {
            continue;
        }
        let lag = broker
            .replicas
            .partition(&tp)
            .map(|p| {
                let future_end = copied_to.max(p.log.log_start_offset());
                (p.log.log_end_offset() - future_end).max(1)
            })
            .unwrap_or(1);
        dirs.entry(dest.display().to_string())
            .or_default()
            .entry(tp.topic.clone())
            .or_default()
            .push(
                DescribeLogDirsPartition::default()
                    .with_partition_index(tp.partition)
                    .with_partition_size(i64::try_from(copied).unwrap_or(i64::MAX))
                    .with_offset_lag(lag)
                    .with_is_future_key(true),
            );
    }
    let offline: Vec<String> = broker
        .replicas
        .logs()
        .offline_dirs()
        .into_iter()
        .map(|(dir, _)| dir.display().to_string())
        .collect();
    let results = dirs
        .into_iter()
        .map(|(dir, topics)| {
            // Kafka's answer for an offline dir: the error, and nothing about its contents.
            if offline.contains(&dir) {
                broker
                    .metrics
                    .error("DescribeLogDirs", ResponseError::KafkaStorageError.code());
                return DescribeLogDirsResult::default()
                    .with_error_code(ResponseError::KafkaStorageError.code())
                    .with_log_dir(str_bytes(&dir))
                    .with_total_bytes(-1)
                    .with_usable_bytes(-1);
            }
            let (total, usable) = disk_space(std::path::Path::new(&dir)).unwrap_or((-1, -1));
            DescribeLogDirsResult::default()
                .with_log_dir(str_bytes(&dir))
                .with_total_bytes(total)
                .with_usable_bytes(usable)
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(name, mut partitions)| {
                            partitions.sort_by_key(|p| p.partition_index);
                            DescribeLogDirsTopic::default()
                                .with_name(TopicName(str_bytes(&name)))
                                .with_partitions(partitions)
                        })
                        .collect(),
                )
        })
        .collect();
    DescribeLogDirsResponse::default().with_results(results)
}

/// (total, usable) bytes of the file system holding `dir`, as DescribeLogDirs v4 reports them;
/// `None` when the file system cannot be asked (the response then says -1, "unknown").
fn disk_space(dir: &std::path::Path) -> Option<(i64, i64)> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is a NUL-terminated string and `st` is a properly sized out-parameter that
    // is only read after statvfs reports success.
    let rc = unsafe { libc::statvfs(path.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    let block = st.f_frsize as i64;
    Some((
        (st.f_blocks as i64).saturating_mul(block),
        (st.f_bavail as i64).saturating_mul(block),
    ))
}

/// AlterReplicaLogDirs: moves replicas of this broker to the log dirs named, one answer per
/// partition (see [`crate::log_dir_moves`]). Needs ALTER on the cluster, as in Kafka.
pub fn alter_replica_log_dirs(
    broker: &Arc<Broker>,
    request: AlterReplicaLogDirsRequest,
    ctx: &RequestContext,
) -> AlterReplicaLogDirsResponse {
    let allowed = ctx.may_cluster(broker, AclOperation::Alter);
    // topic -> partition -> error code, in the order asked.
    let mut answers: BTreeMap<String, BTreeMap<i32, i16>> = BTreeMap::new();
    for dir in &request.dirs {
        for topic in &dir.topics {
            for &partition in &topic.partitions {
                let tp = TopicPartition::new(topic.name.as_str(), partition);
                let code = if !allowed {
                    ResponseError::ClusterAuthorizationFailed.code()
                } else {
                    match broker
                        .replicas
                        .alter_replica_log_dir(&tp, dir.path.as_str())
                    {
                        Ok(()) => 0,
                        Err(e) => e.code(),
                    }
                };
                if code != 0 {
                    broker.metrics.error("AlterReplicaLogDirs", code);
                }
                answers.entry(tp.topic).or_default().insert(partition, code);
            }
        }
    }
    let results = answers
        .into_iter()
        .map(|(name, partitions)| {
            AlterReplicaLogDirTopicResult::default()
                .with_topic_name(TopicName(str_bytes(&name)))
                .with_partitions(
                    partitions
                        .into_iter()
                        .map(|(index, code)| {
                            AlterReplicaLogDirPartitionResult::default()
                                .with_partition_index(index)
                                .with_error_code(code)
                        })
                        .collect(),
                )
        })
        .collect();
    AlterReplicaLogDirsResponse::default().with_results(results)
}

#[cfg(test)]
mod disk_tests {
    #[test]
    fn disk_space_of_a_real_directory_is_positive() {
        let dir = tempfile::tempdir().unwrap();
        let (total, usable) = super::disk_space(dir.path()).unwrap();
        assert!(
            total > 0 && usable > 0 && usable <= total,
            "{total} {usable}"
        );
        assert!(super::disk_space(std::path::Path::new("/definitely/not/here")).is_none());
    }
}
