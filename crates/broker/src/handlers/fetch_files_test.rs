//! A consumer Fetch on a plaintext listener leaves its record sets in the segment files and the
//! connection sends them with `sendfile` (issue 16): all of them with `fetch.sendfile.enable`,
//! otherwise those after the response's first 1 MiB. The bytes on the wire are those of the same
//! response encoded in memory.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::tests::{config, create, name, produce, request};
use super::RequestContext;
use crate::broker::Broker;
use crate::server::Server;

/// A fetch of partition 0 of `topic` from `offset`, up to 1 MB.
fn fetch_body(topic: &str, offset: i64, isolation_level: i8) -> FetchRequest {
    FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1 << 20)
        .with_isolation_level(isolation_level)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])])
}

/// The request frame of `body` at `version`, correlation id `correlation_id`.
fn request_frame(body: &FetchRequest, version: i16, correlation_id: i32) -> Bytes {
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::Fetch as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("consumer")));
    let mut msg = BytesMut::new();
    header
        .encode(&mut msg, ApiKey::Fetch.request_header_version(version))
        .unwrap();
    body.encode(&mut msg, version).unwrap();
    let mut frame = BytesMut::new();
    frame.put_i32(msg.len() as i32);
    frame.extend_from_slice(&msg);
    frame.freeze()
}

/// The handler's answer to `body`, encoded in one buffer as a TLS connection's would be.
async fn in_memory_frame(
    b: &Arc<Broker>,
    body: FetchRequest,
    version: i16,
    correlation_id: i32,
) -> Bytes {
    let r = request(ApiKey::Fetch, version, RequestKind::Fetch(body));
    let response = super::handle(b, r, &RequestContext::for_tests())
        .await
        .unwrap();
    ferry_protocol::encode_response(ApiKey::Fetch, version, correlation_id, &response)
        .unwrap()
        .to_bytes()
        .unwrap()
}

/// Whether the handler leaves the records of `body` in files for a plaintext connection.
async fn answered_with_file_records(b: &Arc<Broker>, body: FetchRequest, version: i16) -> bool {
    let mut ctx = RequestContext::for_tests();
    let files = Arc::new(std::sync::Mutex::new(ferry_protocol::FileRecords::new()));
    ctx.file_records = Some(files.clone());
    let r = request(ApiKey::Fetch, version, RequestKind::Fetch(body));
    super::handle(b, r, &ctx).await.unwrap();
    let files = files.lock().unwrap();
    !files.is_empty()
}

/// A server listening on a plaintext port, with `extra` config lines, until [`Serving::stop`].
struct Serving {
    broker: Arc<Broker>,
    addr: std::net::SocketAddr,
    stop: tokio::sync::watch::Sender<bool>,
    serving: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Serving {
    async fn start(dir: &std::path::Path, extra: &str) -> Self {
        let server = Server::start(config(dir, extra), ferry_common::system_clock())
            .await
            .unwrap();
        let broker = server.broker.clone();
        let addr = server.local_addr;
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let serving = tokio::spawn(server.run(stopped));
        Serving {
            broker,
            addr,
            stop,
            serving,
        }
    }

    async fn stop(self) {
        self.stop.send(true).unwrap();
        self.serving.await.unwrap().unwrap();
    }
}

/// Sends `body` on `socket` and reads the answer: the bytes after its length prefix.
async fn answer_on_the_wire(
    socket: &mut tokio::net::TcpStream,
    body: &FetchRequest,
    version: i16,
    correlation_id: i32,
) -> Vec<u8> {
    socket
        .write_all(&request_frame(body, version, correlation_id))
        .await
        .unwrap();
    let len = socket.read_i32().await.unwrap();
    let mut got = vec![0u8; len as usize];
    socket.read_exact(&mut got).await.unwrap();
    got
}

#[tokio::test]
async fn a_plaintext_fetch_sent_from_files_is_the_bytes_of_the_in_memory_response() {
    let dir = tempfile::tempdir().unwrap();
    let server = Serving::start(dir.path(), "\"fetch.sendfile.enable\" = true").await;
    let b = server.broker.clone();
    // Segments of a few 5 KB records each: a 1 MB fetch spans segments, each a file piece.
    create(&b, "files", 1, &[("segment.bytes", "40000")]).await;
    let values: Vec<String> = (0..40).map(|i| format!("{i:04}").repeat(1_250)).collect();
    for chunk in values.chunks(4) {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        produce(&b, "files", 0, super::tests::batch(&refs, None), 1).await;
    }
    let part = b.replicas.partition_of("files", 0).unwrap();
    assert!(part.log.segment_count() >= 4, "segments did not roll");

    let mut socket = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let mut correlation_id = 0;
    for version in [4i16, 11, 12] {
        for (offset, isolation) in [(0, 0), (7, 0), (0, 1), (33, 1)] {
            correlation_id += 1;
            let body = fetch_body("files", offset, isolation);
            assert!(
                answered_with_file_records(&b, body.clone(), version).await,
                "v{version} offset {offset}: the records stay in files"
            );
            let want = in_memory_frame(&b, body.clone(), version, correlation_id).await;
            let got = answer_on_the_wire(&mut socket, &body, version, correlation_id).await;
            assert_eq!(got.len() + 4, want.len(), "v{version} offset {offset}");
            assert!(
                got == want[4..],
                "v{version} offset {offset} isolation {isolation}: the bytes differ"
            );
        }
    }
    drop(socket);
    server.stop().await;
}

/// Without `fetch.sendfile.enable`, a response's first `READ_IN_MEMORY_UP_TO` bytes of records
/// are read into memory and the record sets after them stay in files, which the writer sends
/// with `sendfile` (never read and streamed): a small fetch is all in memory, a large one sends
/// its later partitions from files, and either way the bytes on the wire are those of the
/// response encoded in memory.
#[tokio::test]
async fn a_large_plaintext_fetch_sends_its_later_record_sets_with_sendfile() {
    use super::fetch::READ_IN_MEMORY_UP_TO;
    use crate::server::file_bytes;
    let dir = tempfile::tempdir().unwrap();
    let server = Serving::start(dir.path(), "").await;
    let b = server.broker.clone();
    // Three partitions, each with more than the in-memory share of a response.
    create(&b, "big", 3, &[]).await;
    let value = "v".repeat(50_000);
    let per_partition = READ_IN_MEMORY_UP_TO / value.len() + 8;
    for p in 0..3 {
        for _ in 0..per_partition / 8 {
            let values = vec![value.as_str(); 8];
            produce(&b, "big", p, super::tests::batch(&values, None), 1).await;
        }
    }
    let fetch = |partitions: &[i32], partition_max: i32| {
        let from: Vec<(i32, i64)> = partitions.iter().map(|&p| (p, 0)).collect();
        super::tests::fetch_of_partitions("big", &from, partition_max)
    };
    let small = fetch(&[0], (READ_IN_MEMORY_UP_TO / 2) as i32);
    let large = fetch(&[0, 1, 2], 16 << 20);
    assert!(!answered_with_file_records(&b, small.clone(), 12).await);
    assert!(answered_with_file_records(&b, large.clone(), 12).await);

    let mut socket = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let sent_before = file_bytes::SENT.with(|c| c.get());
    for (correlation_id, body) in [(1, small), (2, large)] {
        let want = in_memory_frame(&b, body.clone(), 12, correlation_id).await;
        let got = answer_on_the_wire(&mut socket, &body, 12, correlation_id).await;
        assert_eq!(got.len() + 4, want.len(), "fetch {correlation_id}");
        assert!(got == want[4..], "fetch {correlation_id}: the bytes differ");
    }
    assert!(
        3 * per_partition * value.len() > 2 * READ_IN_MEMORY_UP_TO,
        "the large fetch spans more than the in-memory share"
    );
    // The large response's records past the in-memory share left with sendfile, none streamed.
    let sent = file_bytes::SENT.with(|c| c.get()) - sent_before;
    // Partition 0 fills the in-memory share; partitions 1 and 2 stay in files.
    let in_files = 2 * (per_partition / 8 * 8) * value.len();
    assert!(
        sent as usize >= in_files,
        "{sent} bytes sent with sendfile, {in_files} expected"
    );
    assert_eq!(file_bytes::STREAMED.with(|c| c.get()), 0, "bytes streamed");
    drop(socket);
    server.stop().await;
}
