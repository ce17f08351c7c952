//! The client side of the RESP2 wire format: encoding a command, and decoding the
//! server's replies into [`Reply`] values.
//!
//! [`decode_reply`] is a pure function of the bytes received so far: it returns the
//! first complete reply and how many bytes it took, or `None` while more are
//! needed, so a reader appends what arrives and asks again. A bulk reply's payload
//! is never scanned, so a large one arriving in pieces costs a length check per
//! piece. Limits ([`MAX_REPLY_LINE`], [`MAX_REPLY_BULK_LEN`], [`MAX_REPLY_ARRAY_LEN`],
//! [`MAX_REPLY_DEPTH`]) and malformed input are [`ReplyError`]s; after one the
//! connection's position in the stream is lost and it should be dropped.

use super::codec::{write_array_header, write_bulk, Reply};

/// The longest line (a `+`, `-` or `:` reply, or a header) accepted, without `\r\n`.
pub const MAX_REPLY_LINE: usize = 64 << 10;
/// The longest bulk reply accepted (512 MiB, as Redis allows).
pub const MAX_REPLY_BULK_LEN: usize = 512 << 20;
/// The most elements an array reply may announce.
pub const MAX_REPLY_ARRAY_LEN: usize = 1 << 20;
/// The deepest nesting of array replies accepted.
pub const MAX_REPLY_DEPTH: usize = 32;

/// Bytes that are not a RESP2 reply, or one beyond a limit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// A reply starts with a byte that is no reply type.
    #[error("unknown reply type {:?}", char::from(*.0))]
    UnknownType(u8),
    /// An integer reply, or a length, is not a decimal integer.
    #[error("bad integer {0:?}")]
    BadInteger(String),
    /// A bulk payload is not followed by `\r\n`.
    #[error("expected CRLF after a bulk reply")]
    ExpectedCrlf,
    /// No `\r\n` within [`MAX_REPLY_LINE`] bytes.
    #[error("reply line longer than {MAX_REPLY_LINE} bytes")]
    LineTooLong,
    /// A bulk reply announces more than [`MAX_REPLY_BULK_LEN`] bytes.
    #[error("bulk reply of {0} bytes (at most {MAX_REPLY_BULK_LEN})")]
    BulkTooLong(i64),
    /// An array reply announces more than [`MAX_REPLY_ARRAY_LEN`] elements.
    #[error("array reply of {0} elements (at most {MAX_REPLY_ARRAY_LEN})")]
    ArrayTooLong(i64),
    /// Arrays nest deeper than [`MAX_REPLY_DEPTH`].
    #[error("array replies nested deeper than {MAX_REPLY_DEPTH}")]
    TooDeep,
}

/// Appends `args` as a command: an array of bulk strings, as clients send.
pub fn encode_command(args: &[&[u8]], out: &mut Vec<u8>) {
    write_array_header(out, args.len());
    for arg in args {
        write_bulk(out, arg);
    }
}

/// Decodes the first reply in `buf`: `Some((reply, bytes used))`, or `None` if
/// `buf` holds only part of one. A null array (`*-1`) decodes as [`Reply::Nil`].
pub fn decode_reply(buf: &[u8]) -> Result<Option<(Reply, usize)>, ReplyError> {
    decode_at(buf, 0, 0)
}

/// Decodes the reply starting at `at`, nested `depth` arrays deep: the reply and
/// the offset just past it.
fn decode_at(buf: &[u8], at: usize, depth: usize) -> Result<Option<(Reply, usize)>, ReplyError> {
    let Some(line) = line_at(buf, at)? else {
        return Ok(None);
    };
    let next = at + line.len() + 2;
    let Some((&tag, rest)) = line.split_first() else {
        return Err(ReplyError::UnknownType(b'\r'));
    };
    let text = || String::from_utf8_lossy(rest).into_owned();
    let reply = match tag {
        b'+' => Reply::Simple(text().into()),
        b'-' => Reply::Error(text().into()),
        b':' => Reply::Integer(integer(rest)?),
        b'$' => {
            let Some(n) = length(rest, MAX_REPLY_BULK_LEN, ReplyError::BulkTooLong)? else {
                return Ok(Some((Reply::Nil, next)));
            };
            let end = next + n;
            let Some(crlf) = buf.get(end..end + 2) else {
                return Ok(None);
            };
            if crlf != b"\r\n" {
                return Err(ReplyError::ExpectedCrlf);
            }
            return Ok(Some((Reply::Bulk(buf[next..end].to_vec()), end + 2)));
        }
        b'*' => {
            let Some(n) = length(rest, MAX_REPLY_ARRAY_LEN, ReplyError::ArrayTooLong)? else {
                return Ok(Some((Reply::Nil, next)));
            };
            if n > 0 && depth >= MAX_REPLY_DEPTH {
                return Err(ReplyError::TooDeep);
            }
            // Capacity grows with the elements decoded, not with what was
            // announced, and nothing is reserved up front: a reservation per
            // level adds up over nested arrays (a fixed 64 elements was 2 KiB a
            // level, 64 KiB for 160 bytes of nested `*64` headers; room for what
            // the remaining bytes could hold is still quadratic in the depth).
            let mut items = Vec::new();
            let mut pos = next;
            for _ in 0..n {
                let Some((item, end)) = decode_at(buf, pos, depth + 1)? else {
                    return Ok(None);
                };
                items.push(item);
                pos = end;
            }
            return Ok(Some((Reply::Array(items), pos)));
        }
        other => return Err(ReplyError::UnknownType(other)),
    };
    Ok(Some((reply, next)))
}

/// The line starting at `at`, without its `\r\n`; `None` if it has not all arrived.
fn line_at(buf: &[u8], at: usize) -> Result<Option<&[u8]>, ReplyError> {
    let rest = buf.get(at..).unwrap_or_default();
    let window = &rest[..rest.len().min(MAX_REPLY_LINE + 2)];
    match window.windows(2).position(|w| w == b"\r\n") {
        Some(end) => Ok(Some(&rest[..end])),
        None if window.len() == MAX_REPLY_LINE + 2 => Err(ReplyError::LineTooLong),
        None => Ok(None),
    }
}

/// The length of a `$` or `*` header: `None` for a negative one (nil), an error
/// above `max`.
fn length(
    digits: &[u8],
    max: usize,
    too_long: fn(i64) -> ReplyError,
) -> Result<Option<usize>, ReplyError> {
    let len = integer(digits)?;
    if len < 0 {
        return Ok(None);
    }
    usize::try_from(len)
        .ok()
        .filter(|&n| n <= max)
        .map(Some)
        .ok_or(too_long(len))
}

fn integer(digits: &[u8]) -> Result<i64, ReplyError> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| ReplyError::BadInteger(String::from_utf8_lossy(digits).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn reply() -> impl Strategy<Value = Reply> {
        // Simple and error texts without line breaks (the encoder replaces them).
        let text = "[ -~]{0,20}";
        let leaf = prop_oneof![
            text.prop_map(|s| Reply::Simple(s.into())),
            text.prop_map(|s| Reply::Error(s.into())),
            any::<i64>().prop_map(Reply::Integer),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(Reply::Bulk),
            Just(Reply::Nil),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            proptest::collection::vec(inner, 0..6).prop_map(Reply::Array)
        })
    }

    proptest! {
        /// Every reply decodes from its encoding, using all of it; every strict
        /// prefix asks for more; what follows it is left alone.
        #[test]
        fn replies_decode_from_their_encoding_and_prefixes_ask_for_more(r in reply()) {
            let bytes = r.to_bytes();
            prop_assert_eq!(decode_reply(&bytes), Ok(Some((r.clone(), bytes.len()))));
            for cut in 0..bytes.len() {
                prop_assert_eq!(decode_reply(&bytes[..cut]), Ok(None));
            }
            let mut two = bytes.clone();
            two.extend_from_slice(b"+next\r\n");
            prop_assert_eq!(decode_reply(&two), Ok(Some((r, bytes.len()))));
        }

        /// Arbitrary bytes give a reply, a request for more, or an error; never a
        /// panic, and never a claim to have used more bytes than there are.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(Some((_, used))) = decode_reply(&bytes) {
                prop_assert!(used <= bytes.len());
            }
        }
    }

    #[test]
    fn malformed_replies_are_errors() {
        let cases: [(&[u8], ReplyError); 6] = [
            (b"?x\r\n", ReplyError::UnknownType(b'?')),
            (b":12a\r\n", ReplyError::BadInteger("12a".into())),
            (b"$3\r\nabcd\r\n", ReplyError::ExpectedCrlf),
            (b"$600000000\r\n", ReplyError::BulkTooLong(600_000_000)),
            (b"*2000000\r\n", ReplyError::ArrayTooLong(2_000_000)),
            (b"\r\n", ReplyError::UnknownType(b'\r')),
        ];
        for (bytes, err) in cases {
            assert_eq!(decode_reply(bytes), Err(err), "{bytes:?}");
        }
        let long = vec![b'+'; MAX_REPLY_LINE + 2];
        assert_eq!(decode_reply(&long), Err(ReplyError::LineTooLong));
        let deep = b"*1\r\n".repeat(MAX_REPLY_DEPTH + 1);
        assert_eq!(decode_reply(&deep), Err(ReplyError::TooDeep));
        assert_eq!(decode_reply(b"*-1\r\n"), Ok(Some((Reply::Nil, 5))));
    }

    #[test]
    fn a_command_is_an_array_of_bulk_strings() {
        let mut out = Vec::new();
        encode_command(&[b"SET", b"k", b""], &mut out);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
    }
}
