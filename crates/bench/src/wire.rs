//! `wire-produce`: a minimal pipelined producer that sends pre-encoded record batches, to
//! measure what the broker itself can take when the client costs almost nothing (librdkafka
//! needs more CPU than the broker on a shared 2-core machine). Batches are encoded once; the
//! broker assigns offsets, checks the CRC and appends each one as it would any producer's.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse, RequestHeader, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

const PRODUCE_VERSION: i16 = 9;

pub struct WireArgs {
    pub bootstrap: String,
    pub topic: String,
    pub partitions: i32,
    pub record_size: usize,
    pub batch_size: usize,
    pub total_bytes: u64,
    pub in_flight: usize,
    pub acks: i16,
}

fn batch(record_size: usize, batch_size: usize) -> Result<Bytes> {
    let n = (batch_size / (record_size + 20)).max(1);
    encode_batch(0, n, Bytes::from(vec![b'x'; record_size]))
}

/// One uncompressed v2 batch of `n` records holding `value`, from `base_offset`.
pub(crate) fn encode_batch(base_offset: i64, n: usize, value: Bytes) -> Result<Bytes> {
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: base_offset + i as i64,
            sequence: -1,
            timestamp: 0,
            key: None,
            value: Some(value.clone()),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .context("encoding the record batch")?;
    Ok(buf.freeze())
}

fn frame(
    correlation_id: i32,
    topic: &str,
    partition: i32,
    records: Bytes,
    acks: i16,
) -> Result<Bytes> {
    let body = ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])]);
    request_frame(ApiKey::Produce, PRODUCE_VERSION, correlation_id, &body)
}

/// A request frame: length prefix, the header of `api` at `version`, then `body`.
pub(crate) fn request_frame<B: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &B,
) -> Result<Bytes> {
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("ferry-bench-wire")));
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    header.encode(&mut buf, api.request_header_version(version))?;
    body.encode(&mut buf, version)?;
    let len = i32::try_from(buf.len() - 4).context("request too large")?;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    Ok(buf.freeze())
}

pub fn run(args: WireArgs) -> Result<()> {
    if args.acks == 0 {
        bail!("wire-produce needs acks 1 or -1 to count what was written");
    }
    let records = batch(args.record_size, args.batch_size)?;
    let per_batch = records.len() as u64;
    let requests = args.total_bytes.div_ceil(per_batch);
    let mut stream = TcpStream::connect(&args.bootstrap)
        .with_context(|| format!("connecting to {}", args.bootstrap))?;
    stream.set_nodelay(true)?;
    let mut reader = stream.try_clone()?;
    let (credit_tx, credit_rx) = mpsc::sync_channel::<()>(args.in_flight);
    for _ in 0..args.in_flight {
        credit_tx.send(())?;
    }
    let start = Instant::now();
    let reader_thread = std::thread::spawn(move || -> Result<u64> {
        let mut errors = 0u64;
        let mut len = [0u8; 4];
        let mut body = Vec::new();
        for _ in 0..requests {
            reader.read_exact(&mut len)?;
            body.resize(i32::from_be_bytes(len).max(0) as usize, 0);
            reader.read_exact(&mut body)?;
            // Response header v0 for Produce v9 is flexible → header v1: correlation id + tags.
            let mut b = Bytes::copy_from_slice(&body[4..]);
            let _tags = b.split_to(1);
            let response = ProduceResponse::decode(&mut b, PRODUCE_VERSION)?;
            for t in &response.responses {
                for p in &t.partition_responses {
                    if p.error_code != 0 {
                        errors += 1;
                    }
                }
            }
            if credit_tx.send(()).is_err() {
                break;
            }
        }
        Ok(errors)
    });
    for i in 0..requests {
        credit_rx.recv().context("reader stopped")?;
        let partition = (i % args.partitions.max(1) as u64) as i32;
        let f = frame(i as i32, &args.topic, partition, records.clone(), args.acks)?;
        stream.write_all(&f)?;
    }
    let errors = reader_thread
        .join()
        .map_err(|_| anyhow::anyhow!("reader thread panicked"))??;
    let secs = start.elapsed().as_secs_f64();
    let bytes = requests * per_batch;
    let records_per_batch = (args.batch_size / (args.record_size + 20)).max(1) as u64;
    println!(
        "wire-produce: {} batches of {} B ({} records of {} B), {:.1} MB in {:.2} s = {:.1} MB/s, {:.0} msgs/s, {} partition errors (acks={}, in-flight {}, partitions {})",
        requests,
        per_batch,
        records_per_batch,
        args.record_size,
        bytes as f64 / 1e6,
        secs,
        bytes as f64 / 1e6 / secs,
        (requests * records_per_batch) as f64 / secs,
        errors,
        args.acks,
        args.in_flight,
        args.partitions
    );
    if errors > 0 {
        bail!("{errors} partitions answered with an error");
    }
    Ok(())
}
