//! The writer's two ways of sending a frame with file pieces, against the frame encoded in
//! memory: `sendfile` on a plaintext socket, streamed (`pread` a chunk at a time and write) on
//! any stream; and a file that comes up short.

use std::io::Write;
use std::sync::Arc;

use bytes::Bytes;
use ferry_protocol::{encode_response, encode_response_with_files, FileRecords, FileRegion};
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{ApiKey, FetchResponse, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use tokio::io::AsyncReadExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};

use super::{send_frame, stream_frame, STREAM_CHUNK};

/// A Fetch response of one partition whose records are `records`.
fn response(records: Bytes) -> ResponseKind {
    ResponseKind::Fetch(FetchResponse::default().with_responses(vec![
        FetchableTopicResponse::default()
            .with_topic(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(vec![PartitionData::default()
                .with_high_watermark(9)
                .with_records(Some(records))]),
    ]))
}

/// A file holding `content` after 10 other bytes.
fn file_of(content: &[u8]) -> Arc<std::fs::File> {
    let mut f = tempfile::tempfile().unwrap();
    f.write_all(b"0123456789").unwrap();
    f.write_all(content).unwrap();
    Arc::new(f)
}

/// The frame whose records are `len` bytes at 10 in `file`, in two file pieces.
fn frame_from(file: &Arc<std::fs::File>, len: usize) -> ferry_protocol::ResponseFrame {
    let half = len / 2;
    let mut files = FileRecords::new();
    let placeholder = files
        .placeholder(vec![
            FileRegion::new(file.clone(), 10, half),
            FileRegion::new(file.clone(), 10 + half as u64, len - half),
        ])
        .unwrap();
    encode_response_with_files(ApiKey::Fetch, 12, 7, &response(placeholder), files).unwrap()
}

/// A connected pair: the server side's write half, and the client.
async fn pair() -> (OwnedWriteHalf, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (server, _) = listener.accept().await.unwrap();
    (server.into_split().1, client)
}

#[tokio::test]
async fn a_frame_sent_with_sendfile_is_the_bytes_of_the_in_memory_frame() {
    // Larger than a socket buffer: sendfile comes back short and waits for the reader.
    let content: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let file = file_of(&content);
    let want = encode_response(
        ApiKey::Fetch,
        12,
        7,
        &response(Bytes::from(content.clone())),
    )
    .unwrap()
    .to_bytes()
    .unwrap();
    let mut frame = frame_from(&file, content.len());
    assert_eq!(frame.file_piece_count(), 2);
    let (mut half, mut client) = pair().await;
    let sender = tokio::spawn(async move {
        send_frame(&mut half, &mut frame)
            .await
            .map(|()| frame.len())
    });
    let mut got = Vec::new();
    client.read_to_end(&mut got).await.unwrap();
    assert_eq!(sender.await.unwrap().unwrap(), 0, "all sent");
    assert!(
        got == want,
        "{} bytes received, {} expected",
        got.len(),
        want.len()
    );

    // The streaming writer sends the same bytes, over many chunks, on a socket and on any
    // stream (a small duplex: every chunk waits for the reader).
    assert!(content.len() > 4 * STREAM_CHUNK);
    let mut frame = frame_from(&file, content.len());
    let (mut half, mut client) = pair().await;
    let sender = tokio::spawn(async move { stream_frame(&mut half, &mut frame).await });
    let mut streamed = Vec::new();
    client.read_to_end(&mut streamed).await.unwrap();
    sender.await.unwrap().unwrap();
    assert!(streamed == want);
    let mut frame = frame_from(&file, content.len());
    let (mut w, mut r) = tokio::io::duplex(64 * 1024);
    let copier = tokio::spawn(async move { stream_frame(&mut w, &mut frame).await });
    let mut copied = Vec::new();
    r.read_to_end(&mut copied).await.unwrap();
    copier.await.unwrap().unwrap();
    assert!(copied == want);
}

#[tokio::test]
async fn a_file_piece_that_comes_up_short_is_an_error_and_nothing_else_is_sent() {
    let content = vec![5u8; 100_000];
    let file = file_of(&content);
    let want = encode_response(
        ApiKey::Fetch,
        12,
        7,
        &response(Bytes::from(content.clone())),
    )
    .unwrap()
    .to_bytes()
    .unwrap();
    let records_start = want.len() - content.len() - trailing(&want, &content);
    // The segment is truncated under the fetch, inside the second piece.
    let frame = frame_from(&file, content.len());
    file.set_len(10 + 70_000).unwrap();
    for streamed in [false, true] {
        let mut frame = frame.clone();
        let (mut half, mut client) = pair().await;
        let sent = if streamed {
            stream_frame(&mut half, &mut frame).await
        } else {
            send_frame(&mut half, &mut frame).await
        };
        assert_eq!(sent.unwrap_err().kind(), std::io::ErrorKind::UnexpectedEof);
        drop(half);
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        // What arrived is the frame's beginning, up to where the file ended.
        assert_eq!(got.len(), records_start + 70_000, "streamed {streamed}");
        assert!(got[..] == want[..got.len()]);
    }
}

/// Bytes of `frame` after its record set (`records`, found by content).
fn trailing(frame: &[u8], records: &[u8]) -> usize {
    let start = frame
        .windows(records.len())
        .position(|w| w == records)
        .unwrap();
    frame.len() - start - records.len()
}
