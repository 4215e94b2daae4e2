//! Length-prefixed frames: `i32` big-endian size, then the payload.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame size {size} is not in 1..={max} (socket.request.max.bytes)")]
    InvalidSize { size: i64, max: usize },
    #[error("connection closed in the middle of a frame")]
    Truncated,
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads one frame. `Ok(None)` means the peer closed the connection cleanly between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    max_size: usize,
) -> Result<Option<Bytes>, FrameError> {
    let mut len_buf = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        let n = reader.read(&mut len_buf[got..]).await?;
        if n == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(FrameError::Truncated)
            };
        }
        got += n;
    }
    let size = i32::from_be_bytes(len_buf);
    if size <= 0 || size as usize > max_size {
        return Err(FrameError::InvalidSize {
            size: size as i64,
            max: max_size,
        });
    }
    let size = size as usize;
    let mut buf = BytesMut::with_capacity(size);
    while buf.len() < size {
        let n = reader.read_buf(&mut buf).await?;
        if n == 0 {
            return Err(FrameError::Truncated);
        }
        // read_buf may read past `size` only if capacity allows; we reserved exactly `size`.
    }
    Ok(Some(buf.freeze()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_frames_and_clean_eof() {
        let mut data: &[u8] = &[0, 0, 0, 3, b'a', b'b', b'c'];
        let f = read_frame(&mut data, 100).await.unwrap().unwrap();
        assert_eq!(&f[..], b"abc");
        assert!(read_frame(&mut data, 100).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn rejects_oversized_negative_and_zero_sizes() {
        for header in [
            [0x7f, 0xff, 0xff, 0xff],
            [0xff, 0xff, 0xff, 0xfe],
            [0, 0, 0, 0],
        ] {
            let mut data: &[u8] = &header;
            assert!(matches!(
                read_frame(&mut data, 1024).await,
                Err(FrameError::InvalidSize { .. })
            ));
        }
    }

    #[tokio::test]
    async fn truncated_frame_is_an_error() {
        let mut data: &[u8] = &[0, 0, 0, 10, 1, 2];
        assert!(matches!(
            read_frame(&mut data, 100).await,
            Err(FrameError::Truncated)
        ));
        let mut data: &[u8] = &[0, 0];
        assert!(matches!(
            read_frame(&mut data, 100).await,
            Err(FrameError::Truncated)
        ));
    }
}
