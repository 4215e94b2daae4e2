//! `wire-consume`: a minimal consumer that sends bare Fetch requests for every partition of a
//! topic and only walks the batch headers of what comes back, to measure what the broker itself
//! can serve when the client costs almost nothing. librdkafka's consumer scans every assigned
//! partition each time its broker thread wakes (`rd_kafka_toppar_fetch_decide`), so at 1,000
//! partitions its own CPU grows with the partition count and hides the broker's.
//!
//! Each request names every partition (no fetch session, as librdkafka sends them) with one
//! request in flight, so the broker does all the per-partition work a librdkafka consumer asks
//! of it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::{Decodable, StrBytes};

use crate::wire::request_frame;

/// The last Fetch version that names topics (v13 and later use topic ids).
const FETCH_VERSION: i16 = 12;

pub struct WireConsumeArgs {
    pub bootstrap: String,
    pub topic: String,
    pub partitions: i32,
    pub records: u64,
    pub max_bytes: i32,
    pub partition_max_bytes: i32,
    pub max_wait_ms: i32,
}

/// What a partition's record set held: whole batches only (a broker may end a record set
/// with a partial batch, which the next fetch reads again).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct RecordSetSummary {
    pub records: u64,
    pub bytes: u64,
    /// The offset after the last whole batch, if there was one.
    pub next_offset: Option<i64>,
}

/// Walks the v2 batch headers of `set`.
pub(crate) fn summarize(set: &[u8]) -> RecordSetSummary {
    const HEADER: usize = 61;
    let mut out = RecordSetSummary::default();
    let mut pos = 0usize;
    while set.len() - pos >= HEADER {
        let h = &set[pos..pos + HEADER];
        let be_i64 = |at: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&h[at..at + 8]);
            i64::from_be_bytes(a)
        };
        let be_i32 = |at: usize| {
            let mut a = [0u8; 4];
            a.copy_from_slice(&h[at..at + 4]);
            i32::from_be_bytes(a)
        };
        let Some(total) = usize::try_from(be_i32(8))
            .ok()
            .and_then(|l| l.checked_add(12))
        else {
            break;
        };
        if total < HEADER || set.len() - pos < total {
            break;
        }
        out.records += u64::try_from(be_i32(57)).unwrap_or(0);
        out.bytes += total as u64;
        out.next_offset = Some(be_i64(0) + i64::from(be_i32(23)) + 1);
        pos += total;
    }
    out
}

fn request(args: &WireConsumeArgs, correlation_id: i32, offsets: &[i64]) -> Result<Bytes> {
    let partitions = offsets
        .iter()
        .enumerate()
        .map(|(p, &offset)| {
            FetchPartition::default()
                .with_partition(p as i32)
                .with_current_leader_epoch(-1)
                .with_fetch_offset(offset)
                .with_last_fetched_epoch(-1)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(args.partition_max_bytes)
        })
        .collect();
    let body = FetchRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(-1))
        .with_max_wait_ms(args.max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(args.max_bytes)
        .with_isolation_level(0)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(args.topic.clone())))
            .with_partitions(partitions)]);
    request_frame(ApiKey::Fetch, FETCH_VERSION, correlation_id, &body)
}

pub fn run(args: WireConsumeArgs) -> Result<()> {
    let count = usize::try_from(args.partitions).context("--partitions")?;
    let mut offsets = vec![0i64; count];
    let mut stream = TcpStream::connect(&args.bootstrap)
        .with_context(|| format!("connecting to {}", args.bootstrap))?;
    stream.set_nodelay(true)?;
    // One buffer for every response, taken back once the response is dropped: a fresh
    // multi-MB allocation per response would be paid in page faults, on the client's side.
    let mut body: Vec<u8> = Vec::new();
    let (mut records, mut bytes, mut fetches, mut empty_in_a_row) = (0u64, 0u64, 0u64, 0u32);
    let start = Instant::now();
    while records < args.records {
        fetches += 1;
        let correlation_id = i32::try_from(fetches % (i32::MAX as u64))?;
        stream.write_all(&request(&args, correlation_id, &offsets)?)?;
        let mut len = [0u8; 4];
        stream.read_exact(&mut len)?;
        let len = usize::try_from(i32::from_be_bytes(len)).context("negative frame length")?;
        body.resize(len, 0);
        stream.read_exact(&mut body)?;
        let mut frame = Bytes::from(std::mem::take(&mut body));
        let mut b = frame.slice(..);
        // Response header v1 (flexible): correlation id, then tagged fields (none).
        if b.len() < 5 {
            bail!("a {}-byte Fetch response", b.len());
        }
        let _ = b.split_to(5);
        let response = FetchResponse::decode(&mut b, FETCH_VERSION)?;
        if response.error_code != 0 {
            bail!("Fetch failed with error {}", response.error_code);
        }
        let before = records;
        for topic in &response.responses {
            for p in &topic.partitions {
                if p.error_code != 0 {
                    bail!(
                        "partition {} answered error {}",
                        p.partition_index,
                        p.error_code
                    );
                }
                let Some(set) = p.records.as_deref() else {
                    continue;
                };
                let s = summarize(set);
                records += s.records;
                bytes += s.bytes;
                if let (Some(next), Some(slot)) = (
                    s.next_offset,
                    usize::try_from(p.partition_index)
                        .ok()
                        .and_then(|i| offsets.get_mut(i)),
                ) {
                    *slot = next;
                }
            }
        }
        drop(response);
        drop(b);
        // Take the buffer back when nothing points into it any more.
        body = match std::mem::take(&mut frame).try_into_mut() {
            Ok(m) => m.into(),
            Err(_) => Vec::new(),
        };
        empty_in_a_row = if records == before {
            empty_in_a_row + 1
        } else {
            0
        };
        if empty_in_a_row >= 20 {
            bail!(
                "only {records} of {} records after {fetches} fetches",
                args.records
            );
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "wire-consume: {records} records, {:.1} MB in {:.2} s = {:.1} MB/s, {fetches} fetches (partitions {}, fetch.max.bytes {}, max.partition.fetch.bytes {})",
        bytes as f64 / 1e6,
        secs,
        bytes as f64 / 1e6 / secs,
        args.partitions,
        args.max_bytes,
        args.partition_max_bytes,
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::encode_batch;

    fn batch(base: i64, n: usize) -> Vec<u8> {
        encode_batch(base, n, Bytes::from_static(b"value"))
            .expect("encoding")
            .to_vec()
    }

    #[test]
    fn a_record_set_is_counted_by_its_whole_batches() {
        let mut set = batch(10, 3);
        set.extend_from_slice(&batch(13, 2));
        let whole = set.len() as u64;
        assert_eq!(
            summarize(&set),
            RecordSetSummary {
                records: 5,
                bytes: whole,
                next_offset: Some(15)
            }
        );
        // A record set cut inside its second batch counts the first only.
        let first = batch(10, 3).len();
        let cut = summarize(&set[..first + 70]);
        assert_eq!(
            cut,
            RecordSetSummary {
                records: 3,
                bytes: first as u64,
                next_offset: Some(13)
            }
        );
        assert_eq!(summarize(&set[..30]), RecordSetSummary::default());
    }
}
