//! Writing a response frame to a connection: in-memory pieces with vectored writes; file pieces
//! (a consumer Fetch's record sets left in their segment files, issue 16) with `sendfile` on a
//! plaintext socket, so record bytes never pass through user space, and read with `pread` and
//! written on any other stream (TLS must encrypt them in user space anyway).
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
    /// Whether a consumer Fetch's records may stay in files for this stream: only when it
    /// sends them with `sendfile` (otherwise reading them here, later, gains nothing).
    const SENDS_FILES: bool;

    /// Writes all of `frame` (consuming it) and flushes.
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

/// TLS: file pieces are read and encrypted like any bytes.
impl<S> FrameWrite for WriteHalf<tokio_rustls::server::TlsStream<S>>
where
    S: tokio::io::AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    const SENDS_FILES: bool = false;

    fn write_frame<'a>(
        &'a mut self,
        frame: &'a mut ResponseFrame,
    ) -> impl Future<Output = io::Result<()>> + Send + 'a {
        copy_frame(self, frame)
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

/// Writes `frame` on any stream, reading its file pieces into memory first.
pub(crate) async fn copy_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    frame: &mut ResponseFrame,
) -> io::Result<()> {
    while !frame.is_empty() {
        match frame.front_file() {
            Some(file) => {
                let bytes = file.read()?;
                w.write_all(&bytes).await?;
                frame.advance(bytes.len());
            }
            None => write_memory(w, frame).await?,
        }
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
        frame.advance(sent);
    }
    Ok(())
}

#[cfg(test)]
#[path = "frame_writer_test.rs"]
mod tests;
