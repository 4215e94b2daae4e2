//! Bytes that arrived in pieces (a GET body's buffers, a slice over them), as one buffer.

use bytes::{Bytes, BytesMut};

/// `pieces` laid end to end in one buffer: the piece itself when there is one (no copy), else a
/// joined copy.
pub fn join_pieces(pieces: &[Bytes]) -> Bytes {
    match pieces {
        [] => Bytes::new(),
        [one] => one.clone(),
        many => {
            let mut out = BytesMut::with_capacity(many.iter().map(Bytes::len).sum());
            for p in many {
                out.extend_from_slice(p);
            }
            out.freeze()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_piece_is_shared_and_several_are_joined_in_order() {
        assert!(join_pieces(&[]).is_empty());
        let one = Bytes::from_static(b"abc");
        let joined = join_pieces(std::slice::from_ref(&one));
        assert_eq!(joined.as_ptr(), one.as_ptr(), "one piece is not copied");
        let many = [
            Bytes::from_static(b"ab"),
            Bytes::new(),
            Bytes::from_static(b"cde"),
        ];
        assert_eq!(join_pieces(&many), Bytes::from_static(b"abcde"));
    }
}
