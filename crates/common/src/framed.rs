//! `varint length ++ prost message`: the framing of ferry's own records in internal topics (the
//! remote WAL's and the long-term tier's metadata). Decoding checks the length prefix exactly,
//! so a truncated or padded record is refused even when the cut falls between two fields, and
//! refuses records above a bound before decoding them. Errors are plain text; each caller wraps
//! them in its own error type.

use bytes::{Bytes, BytesMut};
use prost::Message;

/// Frames `msg`, refusing a frame longer than `max` bytes.
pub fn encode<M: Message>(msg: &M, max: usize) -> Result<Bytes, String> {
    let len = msg.encoded_len();
    let framed = prost::length_delimiter_len(len) + len;
    if framed > max {
        return Err(format!("{framed} bytes exceeds {max}"));
    }
    let mut buf = BytesMut::with_capacity(framed);
    msg.encode_length_delimited(&mut buf)
        .map_err(|e| e.to_string())?;
    Ok(buf.freeze())
}

/// Decodes one frame that must fill `buf` exactly.
pub fn decode<M: Message + Default>(mut buf: &[u8], max: usize) -> Result<M, String> {
    if buf.len() > max {
        return Err(format!("{} bytes exceeds {max}", buf.len()));
    }
    let len =
        prost::decode_length_delimiter(&mut buf).map_err(|e| format!("length prefix: {e}"))?;
    if len != buf.len() {
        return Err(format!(
            "length prefix says {len} bytes but {} follow (truncated or padded)",
            buf.len()
        ));
    }
    M::decode(buf).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, PartialEq, prost::Message)]
    struct P {
        #[prost(int64, tag = "1")]
        a: i64,
        #[prost(string, tag = "2")]
        b: String,
    }

    #[test]
    fn a_frame_round_trips_and_a_cut_or_padded_one_is_refused() {
        let p = P {
            a: 300,
            b: "x".repeat(20),
        };
        let f = encode(&p, 64).unwrap();
        assert_eq!(decode::<P>(&f, 64).unwrap(), p);
        assert!(decode::<P>(&f[..f.len() - 1], 64).is_err());
        let mut padded = f.to_vec();
        padded.push(0);
        assert!(decode::<P>(&padded, 64).is_err());
        assert!(encode(&p, 10).is_err());
        assert!(decode::<P>(&f, 10).is_err());
    }
}
