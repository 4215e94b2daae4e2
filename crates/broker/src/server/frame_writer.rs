//! Writing a response frame to a connection: in-memory pieces with vectored writes; file pieces
//! (a consumer Fetch's record sets left in their segment files, issue 16) with `sendfile` on a
//! plaintext socket, so record bytes never pass through user space, or streamed on any other
//! stream: read with `pread` a chunk at a time into one buffer and written, so that the first
//! bytes of a large response leave while later ones are still to be read.
//!
//! Which record sets stay in files is the Fetch handler's choice: all of them with
//! `fetch.sendfile.enable`, otherwise those after a response's first MB. The first ones are
//! then read by the request's task while this connection's writer may still be sending the
//! previous response, so the two cores share a consumer's small responses; a large response's
//! later record sets go out without the two copies (`pread`, then the socket write) that
//! streaming them would cost: at 1,000 partitions the broker's CPU per GB consumed fell by about
//! a third (docs/benchmarks.md, "Where the 1,000-partition cost is").
//!
//! A file piece that comes up short (its segment was truncated under the fetch: retention,
//! DeleteRecords, a follower's truncation) is an error: the bytes after it would not be what the
//! frame's length prefix promised, so the connection closes, as Kafka's `FileRecords.writeTo`
//! fails the send. Nothing else is ever sent in place of the missing bytes.

use std::future::Future;
use std::io::{self, IoSlice};
use std::os::fd::AsFd;

use ferry_protocol::ResponseFrame;
use tokio::io::{AsyncWrite, AsyncWriteExt, Interest, WriteHalf};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;

/// In-memory pieces passed to one vectored write, at most.
const MAX_SLICES: usize = 64;

/// The write half of a connection, as the writer task sends frames on it.
pub(crate) trait FrameWrite: AsyncWrite + Unpin + Send + 'static {
    /// Whether a consumer Fetch's records may stay in files for this stream (plaintext only:
    /// TLS connections keep the request task's copying read, as the issue asks).
    const SENDS_FILES: bool;

    /// Writes all of `frame` (consuming it) and flushes; file pieces with `sendfile` when the
    /// stream can, streamed otherwise.
    fn write_frame<'a>(
        &'a mut self,
        frame: &'a mut ResponseFrame,
    ) -> impl Future<Output = io::Result<()>> + Send + 'a;
}

/// Plaintext TCP: file pieces go out with `sendfile`.
impl FrameWrite for OwnedWriteHalf {
    const SENDS_FILES: bool = true;

    fn write_frame<'a>(
        &'a mut self,
        frame: &'a mut ResponseFrame,
    ) -> impl Future<Output = io::Result<()>> + Send + 'a {
        send_frame(self, frame)
    }
}

/// TLS: file pieces (none today) are read and encrypted like any bytes.
impl<S> FrameWrite for WriteHalf<tokio_rustls::server::TlsStream<S>>
where
    S: tokio::io::AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    const SENDS_FILES: bool = false;

    fn write_frame<'a>(
        &'a mut self,
        frame: &'a mut ResponseFrame,
    ) -> impl Future<Output = io::Result<()>> + Send + 'a {
        stream_frame(self, frame)
    }
}

/// Writes the in-memory pieces at the front of `frame` with one vectored write.
async fn write_memory<W: AsyncWrite + Unpin>(
    w: &mut W,
    frame: &mut ResponseFrame,
) -> io::Result<()> {
    let written = {
        let mut slices = [IoSlice::new(&[]); MAX_SLICES];
        let n = frame.memory_slices(&mut slices);
        w.write_vectored(&slices[..n]).await?
    };
    if written == 0 {
        return Err(io::ErrorKind::WriteZero.into());
    }
    frame.advance(written);
    Ok(())
}

/// Bytes of a file piece read at once by [`stream_frame`]: a few socket buffers' worth, in one
/// buffer reused for the whole frame (no fresh multi-MB buffer to fault in per fetch).
const STREAM_CHUNK: usize = 256 * 1024;

/// Writes `frame` on any stream, its file pieces read a chunk at a time into one buffer.
pub(crate) async fn stream_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    frame: &mut ResponseFrame,
) -> io::Result<()> {
    let mut chunk = Vec::new();
    while !frame.is_empty() {
        let Some(file) = frame.front_file() else {
            write_memory(w, frame).await?;
            continue;
        };
        if chunk.is_empty() {
            chunk = vec![0u8; STREAM_CHUNK];
        }
        let n = file.read_front(&mut chunk)?;
        if n == 0 {
            return Err(ferry_protocol::response_frame::short_file(file.len()));
        }
        w.write_all(&chunk[..n]).await?;
        #[cfg(test)]
        file_bytes::STREAMED.with(|c| c.set(c.get() + n as u64));
        frame.advance(n);
    }
    w.flush().await
}

/// Writes `frame` on a plaintext socket, file pieces with `sendfile`.
pub(crate) async fn send_frame(
    half: &mut OwnedWriteHalf,
    frame: &mut ResponseFrame,
) -> io::Result<()> {
    while !frame.is_empty() {
        let Some(file) = frame.front_file() else {
            write_memory(half, frame).await?;
            continue;
        };
        let stream: &TcpStream = half.as_ref();
        let sent = loop {
            stream.writable().await?;
            match stream.try_io(Interest::WRITABLE, || file.send_to(stream.as_fd())) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        };
        if sent == 0 {
            return Err(ferry_protocol::response_frame::short_file(file.len()));
        }
        #[cfg(test)]
        file_bytes::SENT.with(|c| c.set(c.get() + sent as u64));
        frame.advance(sent);
    }
    Ok(())
}

/// Test-only counts of the file bytes this thread's writers sent with `sendfile` and streamed
/// (a `#[tokio::test]` runs its server's tasks on its own thread, so tests do not mix).
#[cfg(test)]
pub(crate) mod file_bytes {
    use std::cell::Cell;

    thread_local! {
        pub(crate) static SENT: Cell<u64> = const { Cell::new(0) };
        pub(crate) static STREAMED: Cell<u64> = const { Cell::new(0) };
    }
}

#[cfg(test)]
#[path = "frame_writer_test.rs"]
mod tests;
