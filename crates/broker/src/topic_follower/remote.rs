//! Reads one partition of a followed topic that this broker hosts no replica of, over the
//! network, as a consumer (see the module above for when): Fetch (sessionless, `replica_id` -1,
//! `rack_id` = this broker's `broker.rack`, read uncommitted, so up to the high watermark),
//! long-polling `replica.fetch.wait.max.ms`, through the inter-broker client counted as the
//! [`Followed`]'s kind (`kind="wal_metadata_reader"` for the remote WAL's metadata).
//!
//! Whom it asks: the partition's leader in the image, or the replica the leader names as
//! preferred read replica for this rack (KIP-392, the broker's `replica.selector.class`) until
//! that replica answers with an error, the leader or its epoch changes, or [`PREFERRED_TTL`]
//! passed; after such an error it leaves its rack out of the requests for
//! [`LEADER_ONLY_AFTER_FAILURE`], so that the leader serves it. Errors (NOT_LEADER_OR_FOLLOWER,
//! an unknown leader, connection failures) send it back to the image's leader after
//! [`RETRY_BACKOFF`]; OFFSET_OUT_OF_RANGE from the leader restarts the read at the leader's log
//! start.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry_cluster::BrokerId;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{BrokerId as WireBrokerId, FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use tokio::time::Instant;

use super::progress::{lock, Progress};
use super::{Followed, FollowedRecords};
use crate::host::HostHandles;
use crate::inter_broker::Connection;
use ferry_metrics::inter_broker_client_id;

/// Most bytes one fetch asks for.
const MAX_BYTES: i32 = 1 << 20;
const RETRY_BACKOFF: Duration = Duration::from_millis(200);
/// How long past the long-poll a response may take before the connection is given up.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a preferred read replica is used before the leader is asked again (Kafka's
/// consumer re-asks with every metadata refresh).
const PREFERRED_TTL: Duration = Duration::from_secs(60);

/// How long, after a preferred read replica failed, the reader fetches from the leader without
/// its rack (so the leader serves it rather than naming that replica again).
const LEADER_ONLY_AFTER_FAILURE: Duration = Duration::from_secs(10);

/// A read replica the leader named, valid for one leader and epoch.
#[derive(Debug, Clone, Copy)]
struct Preferred {
    replica: BrokerId,
    leader: BrokerId,
    leader_epoch: i32,
    since: Instant,
}

/// What a fetch answer means for the next round.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// Records (possibly none) were applied; fetch again at once.
    Again,
    /// Fetch from this replica (the leader's KIP-392 answer).
    Redirect(BrokerId),
    /// Back to the leader after a pause.
    Retry,
    /// A read again below the position brought nothing: after a pause.
    Pause,
}

/// Runs until the task is aborted (the partition is local now) or the broker is gone.
pub async fn run(
    partition: i32,
    sink: Arc<dyn FollowedRecords>,
    followed: Followed,
    handles: HostHandles,
    progress: Arc<Mutex<Progress>>,
) {
    let topic = followed.topic;
    let mut conn: Option<Connection> = None;
    let mut preferred: Option<Preferred> = None;
    let mut leader_only_until: Option<Instant> = None;
    loop {
        if handles.replicas.strong_count() == 0 {
            return; // the broker is gone
        }
        let Some(position) = lock(&progress).remote_offset(partition) else {
            return;
        };
        // What the sink could not take when it came is read again first.
        let from = sink
            .reread_from(partition)
            .filter(|r| *r < position)
            .unwrap_or(position);
        let (leader, leader_epoch) = handles.metadata.leader_of(topic, partition);
        preferred = preferred.filter(|p| {
            p.leader == leader
                && p.leader_epoch == leader_epoch
                && p.since.elapsed() < PREFERRED_TTL
        });
        let target = preferred.map_or(leader, |p| p.replica);
        if target < 0 {
            tokio::time::sleep(RETRY_BACKOFF).await;
            continue;
        }
        if !connect(&mut conn, &handles, followed, target, partition).await {
            fail_over(&mut preferred, &mut leader_only_until);
            tokio::time::sleep(RETRY_BACKOFF).await;
            continue;
        }
        let wait_ms = handles.config.replica_fetch_wait_max_ms().max(0);
        let rack = match leader_only_until {
            Some(t) if Instant::now() < t => String::new(),
            _ => handles.config.rack().unwrap_or_default(),
        };
        let request = request(topic, partition, from, wait_ms, rack);
        let client_id = inter_broker_client_id(handles.node_id, followed.purpose);
        let Some(c) = conn.as_mut() else { continue };
        let wait = Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0)) + REQUEST_TIMEOUT;
        let data = match fetch_partition(c, &request, &client_id, wait, partition, target).await {
            Ok(data) => data,
            Err(Reconnect) => {
                conn = None;
                None
            }
        };
        let next = match data {
            Some(data) => apply(
                sink.as_ref(),
                &progress,
                Read {
                    partition,
                    from,
                    position,
                    from_leader: target == leader,
                },
                data,
            ),
            None => Next::Retry,
        };
        match next {
            Next::Again => {}
            Next::Redirect(replica) => {
                preferred = Some(Preferred {
                    replica,
                    leader,
                    leader_epoch,
                    since: Instant::now(),
                });
            }
            Next::Retry => {
                fail_over(&mut preferred, &mut leader_only_until);
                tokio::time::sleep(RETRY_BACKOFF).await;
            }
            Next::Pause => tokio::time::sleep(RETRY_BACKOFF).await,
        }
    }
}

/// Makes `conn` a connection to `target`, keeping it if it is one already; false when
/// connecting failed (logged), leaving no connection.
async fn connect(
    conn: &mut Option<Connection>,
    handles: &HostHandles,
    followed: Followed,
    target: BrokerId,
    partition: i32,
) -> bool {
    if conn.as_ref().map(Connection::peer) == Some(target) {
        return true;
    }
    *conn = None;
    match handles.peers.connect(target, followed.kind).await {
        Ok(c) => {
            *conn = Some(c);
            true
        }
        Err(e) => {
            tracing::debug!(partition, broker = target, error = %e, "metadata reader cannot connect");
            false
        }
    }
}

/// The connection to a fetch's target failed or timed out: it is dropped, and made again.
struct Reconnect;

/// Sends `request` to `target` over `c`, waiting at most `wait`: the metadata partition's
/// answer, or `None` when the response is an error or lacks the partition (logged).
async fn fetch_partition(
    c: &mut Connection,
    request: &FetchRequest,
    client_id: &str,
    wait: Duration,
    partition: i32,
    target: BrokerId,
) -> Result<Option<PartitionData>, Reconnect> {
    match tokio::time::timeout(wait, c.fetch(request, client_id)).await {
        Ok(Ok(response)) if response.error_code == 0 => Ok(response
            .responses
            .into_iter()
            .filter(|t| t.topic.as_str() == request_topic(request))
            .flat_map(|t| t.partitions)
            .find(|d| d.partition_index == partition)),
        Ok(Ok(response)) => {
            tracing::debug!(
                partition,
                code = response.error_code,
                "metadata fetch refused"
            );
            Ok(None)
        }
        Ok(Err(e)) => {
            tracing::debug!(partition, broker = target, error = %e, "metadata fetch failed; reconnecting");
            Err(Reconnect)
        }
        Err(_) => {
            tracing::debug!(
                partition,
                broker = target,
                "metadata fetch timed out; reconnecting"
            );
            Err(Reconnect)
        }
    }
}

/// After a failed fetch: a preferred replica is forgotten, and for a while the reader leaves its
/// rack out so that the leader serves it instead of pointing at that replica again.
fn fail_over(preferred: &mut Option<Preferred>, leader_only_until: &mut Option<Instant>) {
    if preferred.take().is_some() {
        *leader_only_until = Some(Instant::now() + LEADER_ONLY_AFTER_FAILURE);
    }
}

/// The one topic a reader's request names.
fn request_topic(request: &FetchRequest) -> &str {
    request.topics.first().map_or("", |t| t.topic.as_str())
}

fn request(
    topic: &'static str,
    partition: i32,
    from: i64,
    wait_ms: i32,
    rack: String,
) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(WireBrokerId(-1))
        .with_max_wait_ms(wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(MAX_BYTES)
        .with_isolation_level(0)
        // Sessionless: one partition, so a full request is as small as an incremental one.
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_rack_id(StrBytes::from_string(rack))
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str(topic)))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(partition)
                .with_current_leader_epoch(-1)
                .with_fetch_offset(from)
                .with_last_fetched_epoch(-1)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(MAX_BYTES)])])
}

/// One fetch of a reader.
#[derive(Debug, Clone, Copy)]
struct Read {
    partition: i32,
    /// The offset fetched from: `position`, or below it to read again what the sink asks for.
    from: i64,
    /// The reader's position when the fetch was sent.
    position: i64,
    /// The image's leader answered (not a preferred read replica).
    from_leader: bool,
}

/// Applies one partition's answer to a fetch, handing records to `sink` (`RemoteWal::feed`).
fn apply(
    sink: &dyn FollowedRecords,
    progress: &Mutex<Progress>,
    read: Read,
    data: PartitionData,
) -> Next {
    let Read {
        partition,
        from,
        position,
        from_leader,
    } = read;
    let again = from < position;
    if data.error_code == ResponseError::OffsetOutOfRange.code() && from_leader {
        if again {
            // What the sink asked for again lies below the leader's log start now.
            sink.gone_below(partition, data.log_start_offset.min(position));
            return Next::Again;
        }
        let mut progress = lock(progress);
        if progress.accepts(partition, from) {
            tracing::info!(
                partition,
                offset = from,
                log_start_offset = data.log_start_offset,
                "remote WAL metadata out of range; reading again from the leader's log start"
            );
            progress.on_out_of_range(partition, data.log_start_offset);
        }
        return Next::Again;
    }
    if data.error_code != 0 {
        tracing::debug!(partition, error = ?ResponseError::try_from_code(data.error_code),
            "metadata fetch partition error");
        return Next::Retry;
    }
    if data.preferred_read_replica.0 >= 0 {
        return Next::Redirect(data.preferred_read_replica.0);
    }
    let records = data.records.unwrap_or_default();
    let (whole, end) = whole_batches(&records);
    let mut progress = lock(progress);
    // The partition turned local meanwhile, or an out-of-range restart moved its position.
    if !progress.accepts(partition, position) {
        return Next::Again;
    }
    let mut next = from;
    if whole > 0 {
        // Fed under the lock: a read is applied exactly once, at the position it was asked for.
        next = sink
            .feed(partition, records.slice(..whole), from)
            .max(end)
            .max(from);
    }
    if !again || next > position {
        progress.on_remote_read(partition, next, data.high_watermark);
    }
    if again && whole == 0 {
        Next::Pause
    } else {
        Next::Again
    }
}

/// The length of the whole batches at the start of `records` (a response may end in a partial
/// batch) and the offset after the last of them (from the batch headers, so that a batch
/// compaction emptied still moves the position).
fn whole_batches(records: &[u8]) -> (usize, i64) {
    ferry_log::batch::whole_batches(records).fold((0, -1), |(_, end), b| {
        (b.bytes.end, end.max(b.last_offset + 1))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topic_follower::progress::LocalReplica;
    use bytes::Bytes;

    fn batch(base: i64, last_delta: i32, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; 12 + len];
        b[..8].copy_from_slice(&base.to_be_bytes());
        b[8..12].copy_from_slice(&(len as i32).to_be_bytes());
        b[23..27].copy_from_slice(&last_delta.to_be_bytes());
        b
    }

    #[test]
    fn only_whole_batches_count() {
        let mut r = batch(10, 4, 40);
        r.extend(batch(15, 0, 30));
        let whole = r.len();
        assert_eq!(whole_batches(&r), (whole, 16));
        // A partial batch at the end is left for the next fetch.
        r.extend(&batch(16, 2, 50)[..30]);
        assert_eq!(whole_batches(&r), (whole, 16));
        assert_eq!(whole_batches(&[]), (0, -1));
    }

    /// A sink that answers each read with `next`, and notes what it is told is gone.
    #[derive(Default)]
    struct TestSink {
        next: Mutex<i64>,
        fed_from: Mutex<Vec<i64>>,
        gone_below: Mutex<Option<i64>>,
    }

    impl TestSink {
        fn answering(next: i64) -> Self {
            let sink = Self::default();
            *sink.next.lock().unwrap() = next;
            sink
        }
    }

    impl FollowedRecords for TestSink {
        fn feed(&self, _: i32, _: Bytes, from: i64) -> i64 {
            self.fed_from.lock().unwrap().push(from);
            *self.next.lock().unwrap()
        }
        fn gone_below(&self, _: i32, offset: i64) {
            *self.gone_below.lock().unwrap() = Some(offset);
        }
        fn caught_up(&self) {}
    }

    fn read(from: i64, position: i64, from_leader: bool) -> Read {
        Read {
            partition: 0,
            from,
            position,
            from_leader,
        }
    }

    fn two_batches(base: i64, high_watermark: i64) -> PartitionData {
        let mut records = batch(base, 4, 40);
        records.extend(batch(base + 5, 4, 40));
        PartitionData::default()
            .with_high_watermark(high_watermark)
            .with_preferred_read_replica(WireBrokerId(-1))
            .with_records(Some(Bytes::from(records)))
    }

    /// What the sink could not take when it came is fetched again below the reader's
    /// position: the position moves only when such a read ends past it, an empty one pauses,
    /// and one below the leader's log start tells the sink what is gone.
    #[test]
    fn a_read_again_below_the_position_moves_it_only_past_it() {
        let progress = Mutex::new(Progress::default());
        lock(&progress).route(1, |_| LocalReplica::Absent);
        let sink = TestSink::answering(10);
        assert_eq!(
            apply(&sink, &progress, read(0, 0, true), two_batches(0, 10)),
            Next::Again
        );
        assert_eq!(lock(&progress).remote_offset(0), Some(10));
        assert!(lock(&progress).remote_caught_up());

        // Again from 3: the batches reach 13, past the position.
        *sink.next.lock().unwrap() = 13;
        assert_eq!(
            apply(&sink, &progress, read(3, 10, true), two_batches(3, 20)),
            Next::Again
        );
        assert_eq!(*sink.fed_from.lock().unwrap(), vec![0, 3]);
        assert_eq!(lock(&progress).remote_offset(0), Some(13));
        // Again from 2, ending at 12: the position stays.
        *sink.next.lock().unwrap() = 12;
        assert_eq!(
            apply(&sink, &progress, read(2, 13, true), two_batches(2, 20)),
            Next::Again
        );
        assert_eq!(lock(&progress).remote_offset(0), Some(13));
        let empty = PartitionData::default()
            .with_high_watermark(20)
            .with_preferred_read_replica(WireBrokerId(-1));
        assert_eq!(
            apply(&sink, &progress, read(2, 13, true), empty),
            Next::Pause
        );
        let out_of_range = PartitionData::default()
            .with_error_code(ResponseError::OffsetOutOfRange.code())
            .with_log_start_offset(7)
            .with_preferred_read_replica(WireBrokerId(-1));
        assert_eq!(
            apply(&sink, &progress, read(2, 13, true), out_of_range),
            Next::Again
        );
        assert_eq!(*sink.gone_below.lock().unwrap(), Some(7));
        assert_eq!(lock(&progress).remote_offset(0), Some(13));
    }

    #[test]
    fn a_failed_preferred_replica_sends_the_reader_to_the_leader_without_its_rack() {
        let mut leader_only = None;
        // A failure at the leader itself changes nothing.
        let mut preferred = None;
        fail_over(&mut preferred, &mut leader_only);
        assert!(leader_only.is_none());
        preferred = Some(Preferred {
            replica: 4,
            leader: 2,
            leader_epoch: 0,
            since: Instant::now(),
        });
        fail_over(&mut preferred, &mut leader_only);
        assert!(preferred.is_none());
        assert!(leader_only.is_some_and(|t| t > Instant::now()));
    }

    #[test]
    fn errors_and_redirects_are_told_apart() {
        let wal = TestSink::default();
        let progress = Mutex::new(Progress::default());
        lock(&progress).route(1, |_| LocalReplica::Absent);
        let data = |code: ResponseError| {
            PartitionData::default()
                .with_error_code(code.code())
                .with_log_start_offset(42)
                .with_preferred_read_replica(WireBrokerId(-1))
        };
        // Out of range from a preferred replica: back to the leader, position kept.
        let next = apply(
            &wal,
            &progress,
            read(0, 0, false),
            data(ResponseError::OffsetOutOfRange),
        );
        assert_eq!(next, Next::Retry);
        assert_eq!(lock(&progress).remote_offset(0), Some(0));
        // From the leader: restart at its log start.
        let next = apply(
            &wal,
            &progress,
            read(0, 0, true),
            data(ResponseError::OffsetOutOfRange),
        );
        assert_eq!(next, Next::Again);
        assert_eq!(lock(&progress).remote_offset(0), Some(42));
        let next = apply(
            &wal,
            &progress,
            read(42, 42, true),
            data(ResponseError::NotLeaderOrFollower),
        );
        assert_eq!(next, Next::Retry);
        let redirect = PartitionData::default().with_preferred_read_replica(WireBrokerId(4));
        assert_eq!(
            apply(&wal, &progress, read(42, 42, true), redirect),
            Next::Redirect(4)
        );
        // An empty answer at the high watermark: caught up.
        let empty = PartitionData::default()
            .with_high_watermark(42)
            .with_preferred_read_replica(WireBrokerId(-1));
        assert!(!lock(&progress).remote_caught_up());
        assert_eq!(
            apply(&wal, &progress, read(42, 42, true), empty),
            Next::Again
        );
        assert!(lock(&progress).remote_caught_up());
    }
}
