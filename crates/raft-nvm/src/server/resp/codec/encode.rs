//! Replies: the owned [`Reply`] value and the `write_*` functions that append the
//! same bytes to a caller-owned buffer.

use std::borrow::Cow;

/// A reply as an owned value (the `write_*` functions write the same bytes without
/// building one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+text` (line breaks in the text are replaced by spaces).
    Simple(Cow<'static, str>),
    /// `-text`: the text starts with the error code (`ERR`, `MOVED`, ...); line
    /// breaks are replaced by spaces.
    Error(Cow<'static, str>),
    /// `:n`.
    Integer(i64),
    /// `$len` and the bytes.
    Bulk(Vec<u8>),
    /// The nil bulk string `$-1`.
    Nil,
    /// `*len` and the elements.
    Array(Vec<Reply>),
}

impl Reply {
    /// Appends the encoding of the reply to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Reply::Simple(s) => write_simple(out, s.as_bytes()),
            Reply::Error(s) => write_error(out, s.as_bytes()),
            Reply::Integer(n) => write_integer(out, *n),
            Reply::Bulk(b) => write_bulk(out, b),
            Reply::Nil => write_nil(out),
            Reply::Array(items) => {
                write_array_header(out, items.len());
                for item in items {
                    item.encode(out);
                }
            }
        }
    }

    /// The encoding of the reply.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }
}

/// Appends `+text\r\n` (`\r` and `\n` in `text` become spaces).
pub fn write_simple(out: &mut Vec<u8>, text: &[u8]) {
    out.push(b'+');
    push_line(out, text);
}

/// Appends `-text\r\n`; `text` starts with the error code (`ERR ...`). `\r` and `\n`
/// in `text` become spaces, so any message is safe to send.
pub fn write_error(out: &mut Vec<u8>, text: &[u8]) {
    out.push(b'-');
    push_line(out, text);
}

/// Appends `:n\r\n`.
pub fn write_integer(out: &mut Vec<u8>, n: i64) {
    out.push(b':');
    push_decimal(out, n.unsigned_abs(), n < 0);
    out.extend_from_slice(b"\r\n");
}

/// Appends the bulk string `$len\r\nbytes\r\n`.
pub fn write_bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    out.reserve(bytes.len() + 16);
    out.push(b'$');
    push_decimal(out, bytes.len() as u64, false);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// Appends the nil bulk string `$-1\r\n`.
pub fn write_nil(out: &mut Vec<u8>) {
    out.extend_from_slice(b"$-1\r\n");
}

/// Appends an array header `*len\r\n`; the caller then appends `len` elements.
pub fn write_array_header(out: &mut Vec<u8>, len: usize) {
    out.push(b'*');
    push_decimal(out, len as u64, false);
    out.extend_from_slice(b"\r\n");
}

/// Appends `text` with line breaks replaced by spaces, then `\r\n`.
fn push_line(out: &mut Vec<u8>, text: &[u8]) {
    out.reserve(text.len() + 2);
    out.extend(text.iter().map(|&b| match b {
        b'\r' | b'\n' => b' ',
        b => b,
    }));
    out.extend_from_slice(b"\r\n");
}

/// Appends the decimal digits of `n`, after a `-` if `negative`.
fn push_decimal(out: &mut Vec<u8>, mut n: u64, negative: bool) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if negative {
        out.push(b'-');
    }
    out.extend_from_slice(&digits[at..]);
}
