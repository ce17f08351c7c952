//! The RESP2 wire format: an incremental request [`Decoder`] and a reply encoder.
//!
//! Requests come in two shapes, both accepted:
//!
//! * **arrays of bulk strings** (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`), which is what
//!   `redis-cli`, `redis-benchmark` and every client library send, pipelined batches
//!   included;
//! * **inline commands** (`PING\r\n`, `SET k "a b"\n`): one line of space-separated
//!   arguments with Redis's quoting rules (double quotes with `\n`, `\r`, `\t`, `\b`,
//!   `\a`, `\\`, `\"` and `\xHH` escapes; single quotes with `\'`), as sent by
//!   `redis-benchmark`'s `PING_INLINE` test and by people typing into `telnet`. A
//!   bare `\n` ends a line as well as `\r\n`; empty lines are skipped.
//!
//! The decoder is a small state machine in the manner of Redis's own query buffer: it
//! consumes the header lines and bulk payloads of a request as they arrive and keeps
//! the partially read argument vector, so a request split over any number of reads
//! costs no re-parsing. Limits ([`MAX_ARGS`], [`MAX_BULK_LEN`], [`MAX_INLINE_LEN`],
//! and a request's total size, [`DEFAULT_MAX_REQUEST`] unless set with
//! [`Decoder::with_max_request`]) and malformed input are reported as
//! [`RespError`]s; after an error the connection should be closed (the decoder's
//! position in the stream is lost). A request's size counts every byte of it, header
//! lines and line ends included, and is checked at each `$` header, against the
//! length it announces, before any of that bulk's bytes need to arrive.
//!
//! Replies are written into a caller-owned `Vec<u8>` by the `write_*` functions or
//! through the owned [`Reply`] value; nothing here allocates except by growing that
//! buffer.

use std::borrow::Cow;

/// The most arguments one request may have (the command name included).
pub const MAX_ARGS: usize = 1024;
/// The longest bulk string a request may carry (64 MiB).
pub const MAX_BULK_LEN: usize = 64 << 20;
/// The longest inline command line, without its line terminator (64 KiB).
pub const MAX_INLINE_LEN: usize = 64 << 10;
/// The default limit on one request's bytes, headers included (65 MiB): a `SET` of
/// a bulk of [`MAX_BULK_LEN`] fits, a request of many large bulks does not (without
/// it, one request could hold [`MAX_ARGS`] × [`MAX_BULK_LEN`] = 64 GiB).
pub const DEFAULT_MAX_REQUEST: usize = MAX_BULK_LEN + (1 << 20);
/// The longest `*<count>` or `$<length>` header line, without its `\r\n`.
///
/// A 64-bit count has at most 20 characters; anything longer is garbage.
const MAX_HEADER_LEN: usize = 32;

/// A request that violates the protocol or a limit.
///
/// The messages follow Redis's `Protocol error: ...` texts where Redis has one; a
/// server answers `-ERR Protocol error: <message>` and closes the connection.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RespError {
    /// The count of a `*` header is not an integer.
    #[error("invalid multibulk length")]
    InvalidMultibulkLength,
    /// The length of a `$` header is not an integer or is negative.
    #[error("invalid bulk length")]
    InvalidBulkLength,
    /// An array element does not start with `$` (requests are arrays of bulk strings).
    #[error("expected '$', got '{}'", char::from(*.0).escape_default())]
    ExpectedBulk(u8),
    /// A header line is longer than any integer could be.
    #[error("too big count string")]
    HeaderTooLong,
    /// A header line or bulk payload is not followed by `\r\n`.
    #[error("expected CRLF")]
    ExpectedCrlf,
    /// The request has more than [`MAX_ARGS`] arguments.
    #[error("too many arguments ({count}, at most {MAX_ARGS})")]
    TooManyArgs {
        /// The announced or counted number of arguments.
        count: u64,
    },
    /// A bulk string is longer than [`MAX_BULK_LEN`].
    #[error("bulk string too long ({len} bytes, at most {MAX_BULK_LEN})")]
    BulkTooLong {
        /// The announced length.
        len: u64,
    },
    /// An inline command line is longer than [`MAX_INLINE_LEN`].
    #[error("too big inline request")]
    InlineTooLong,
    /// An inline command has an unterminated quote, or a closing quote that is not
    /// followed by a space or the end of the line.
    #[error("unbalanced quotes in request")]
    UnbalancedQuotes,
    /// The request is larger than the decoder's limit ([`Decoder::with_max_request`]).
    #[error("request too large (at least {len} bytes, at most {max})")]
    RequestTooLarge {
        /// The request's size as far as known (announced lengths included).
        len: u64,
        /// The limit.
        max: usize,
    },
}

/// One request: its arguments, the command name first (never empty).
pub type Args = Vec<Vec<u8>>;

/// An incremental RESP2 request decoder.
///
/// Feed it the unconsumed bytes of a connection: [`Decoder::decode`] returns how
/// many bytes it consumed (the caller drops them from its buffer) and the next
/// complete request, if there is one. Bytes of an incomplete request are consumed as
/// far as they can be (headers and complete bulk strings); the rest stays in the
/// caller's buffer until more arrives.
///
/// ```
/// use raft_nvm::resp::Decoder;
///
/// let mut dec = Decoder::new();
/// let mut buf = b"*2\r\n$3\r\nGET\r\n$1".to_vec();
/// let (used, req) = dec.decode(&buf)?;
/// assert_eq!(req, None);
/// buf.drain(..used);
/// buf.extend_from_slice(b"\r\nk\r\nPING\r\n");
/// let (used, req) = dec.decode(&buf)?;
/// assert_eq!(req, Some(vec![b"GET".to_vec(), b"k".to_vec()]));
/// buf.drain(..used);
/// let (used, req) = dec.decode(&buf)?;
/// assert_eq!(req, Some(vec![b"PING".to_vec()]));
/// assert_eq!(used, buf.len());
/// # Ok::<(), raft_nvm::resp::RespError>(())
/// ```
#[derive(Debug)]
pub struct Decoder {
    /// Arguments still to read in the current array (0: between requests).
    remaining: usize,
    /// The length of the bulk string whose header is consumed but not its payload.
    bulk: Option<usize>,
    /// The arguments of the current array read so far.
    args: Args,
    /// How many bytes of an incomplete inline line are known to hold no `\n`.
    scanned: usize,
    /// The current array's size so far: its consumed header lines, and for each
    /// bulk whose header is consumed, its header and announced length with `\r\n`.
    request_bytes: usize,
    /// The bytes of the decoded arguments in `args`.
    held: usize,
    /// The limit on `request_bytes` (and on an inline line).
    max_request: usize,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::with_max_request(DEFAULT_MAX_REQUEST)
    }
}

impl Decoder {
    /// A decoder at the start of a stream, with the default request limit
    /// ([`DEFAULT_MAX_REQUEST`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// A decoder whose requests may hold at most `max_request` bytes (headers
    /// included; the other limits apply as well).
    pub fn with_max_request(max_request: usize) -> Self {
        Decoder {
            remaining: 0,
            bulk: None,
            args: Args::new(),
            scanned: 0,
            request_bytes: 0,
            held: 0,
            max_request,
        }
    }

    /// Changes the request limit from the next header on (a server lifts its
    /// limit for unauthenticated clients once one authenticates).
    pub fn set_max_request(&mut self, max_request: usize) {
        self.max_request = max_request;
    }

    /// The request limit.
    pub fn max_request(&self) -> usize {
        self.max_request
    }

    /// The bytes of the current request's arguments that this decoder already
    /// took (the rest of the request is still in the caller's buffer).
    pub fn held_bytes(&self) -> usize {
        self.held
    }

    /// Adds `n` bytes to the current request's size, refusing it past the limit.
    fn grow_request(&mut self, n: usize) -> Result<(), RespError> {
        match self.request_bytes.checked_add(n) {
            Some(total) if total <= self.max_request => {
                self.request_bytes = total;
                Ok(())
            }
            total => Err(RespError::RequestTooLarge {
                len: total.map_or(u64::MAX, |t| t as u64),
                max: self.max_request,
            }),
        }
    }

    /// Whether the decoder holds part of a request (a later call must continue it).
    pub fn is_mid_request(&self) -> bool {
        self.remaining > 0 || self.scanned > 0
    }

    /// Decodes the next request from `buf`, the bytes after those consumed so far.
    ///
    /// Returns the number of bytes of `buf` consumed and the request, or `None` if
    /// `buf` ends before the request does (the consumed count may still be
    /// non-zero). The next call must be given the unconsumed rest of `buf` followed
    /// by whatever arrived since. Empty arrays (`*0`, `*-1`) and empty inline lines
    /// are consumed and skipped, as Redis does.
    ///
    /// # Errors
    ///
    /// A [`RespError`] for malformed input or a violated limit; the stream cannot be
    /// resumed after one.
    pub fn decode(&mut self, buf: &[u8]) -> Result<(usize, Option<Args>), RespError> {
        let mut pos = 0;
        loop {
            if self.remaining == 0 {
                let Some(&first) = buf.get(pos) else {
                    return Ok((pos, None));
                };
                if first != b'*' {
                    match self.inline(&buf[pos..])? {
                        (used, Some(args)) => return Ok((pos + used, Some(args))),
                        (0, None) => return Ok((pos, None)),
                        // An empty line: skip it.
                        (used, None) => {
                            pos += used;
                            continue;
                        }
                    }
                }
                let Some((line, used)) = header_line(&buf[pos..])? else {
                    return Ok((pos, None));
                };
                let count = parse_int(&line[1..]).ok_or(RespError::InvalidMultibulkLength)?;
                pos += used;
                if count <= 0 {
                    continue;
                }
                if count > MAX_ARGS as i64 {
                    return Err(RespError::TooManyArgs {
                        count: count.unsigned_abs(),
                    });
                }
                self.request_bytes = 0;
                self.held = 0;
                self.grow_request(used)?;
                // The bound above makes the conversion lossless.
                self.remaining = count as usize;
                self.args = Vec::with_capacity(self.remaining);
            }
            while self.remaining > 0 {
                let len = match self.bulk {
                    Some(len) => len,
                    None => {
                        let Some(&first) = buf.get(pos) else {
                            return Ok((pos, None));
                        };
                        if first != b'$' {
                            return Err(RespError::ExpectedBulk(first));
                        }
                        let Some((line, used)) = header_line(&buf[pos..])? else {
                            return Ok((pos, None));
                        };
                        let len = parse_int(&line[1..]).ok_or(RespError::InvalidBulkLength)?;
                        if len < 0 {
                            return Err(RespError::InvalidBulkLength);
                        }
                        if len > MAX_BULK_LEN as i64 {
                            return Err(RespError::BulkTooLong {
                                len: len.unsigned_abs(),
                            });
                        }
                        // Non-negative and bounded above: lossless.
                        let len = len as usize;
                        // Before the payload arrives: a client announcing more than
                        // the limit is refused at once.
                        self.grow_request(used + len + 2)?;
                        pos += used;
                        self.bulk = Some(len);
                        len
                    }
                };
                let rest = &buf[pos..];
                if rest.len() < len + 2 {
                    return Ok((pos, None));
                }
                if &rest[len..len + 2] != b"\r\n" {
                    return Err(RespError::ExpectedCrlf);
                }
                self.args.push(rest[..len].to_vec());
                self.held += len;
                pos += len + 2;
                self.bulk = None;
                self.remaining -= 1;
            }
            self.request_bytes = 0;
            self.held = 0;
            return Ok((pos, Some(std::mem::take(&mut self.args))));
        }
    }

    /// Decodes an inline line at the start of `buf`: `(0, None)` if it is
    /// incomplete, `(n, None)` for an empty line of `n` bytes.
    fn inline(&mut self, buf: &[u8]) -> Result<(usize, Option<Args>), RespError> {
        // `\r` + `\n` may follow the longest line allowed.
        let window = &buf[..buf.len().min(MAX_INLINE_LEN + 2)];
        let start = self.scanned.min(window.len());
        let Some(nl) = window[start..].iter().position(|&b| b == b'\n') else {
            if window.len() > MAX_INLINE_LEN + 1 {
                return Err(RespError::InlineTooLong);
            }
            if window.len() > self.max_request {
                return Err(RespError::RequestTooLarge {
                    len: window.len() as u64,
                    max: self.max_request,
                });
            }
            self.scanned = window.len();
            return Ok((0, None));
        };
        self.scanned = 0;
        let end = start + nl;
        let line = match window[..end].last() {
            Some(b'\r') => &window[..end - 1],
            _ => &window[..end],
        };
        if line.len() > MAX_INLINE_LEN {
            return Err(RespError::InlineTooLong);
        }
        if end + 1 > self.max_request {
            return Err(RespError::RequestTooLarge {
                len: end as u64 + 1,
                max: self.max_request,
            });
        }
        let args = split_args(line)?;
        Ok((end + 1, (!args.is_empty()).then_some(args)))
    }
}

/// The `*`/`$` header line at the start of `buf` (without its `\r\n`) and its length
/// with the `\r\n`, or `None` if it is incomplete.
fn header_line(buf: &[u8]) -> Result<Option<(&[u8], usize)>, RespError> {
    let window = &buf[..buf.len().min(MAX_HEADER_LEN + 2)];
    match window.iter().position(|&b| b == b'\r') {
        Some(cr) => match window.get(cr + 1) {
            Some(b'\n') => Ok(Some((&window[..cr], cr + 2))),
            Some(_) => Err(RespError::ExpectedCrlf),
            None => Ok(None),
        },
        None if window.len() > MAX_HEADER_LEN => Err(RespError::HeaderTooLong),
        None => Ok(None),
    }
}

/// A decimal `i64` (optional `-`, at least one digit, nothing else), or `None`.
fn parse_int(digits: &[u8]) -> Option<i64> {
    let (negative, digits) = match digits.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, digits),
    };
    if digits.is_empty() {
        return None;
    }
    let mut value: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        let d = i64::from(d - b'0');
        value = value.checked_mul(10)?;
        value = if negative {
            value.checked_sub(d)?
        } else {
            value.checked_add(d)?
        };
    }
    Some(value)
}

/// Splits an inline line into arguments the way Redis's `sdssplitargs` does.
fn split_args(line: &[u8]) -> Result<Args, RespError> {
    let mut args = Args::new();
    let mut i = 0;
    loop {
        while line.get(i).is_some_and(|b| b.is_ascii_whitespace()) {
            i += 1;
        }
        if i == line.len() {
            return Ok(args);
        }
        if args.len() == MAX_ARGS {
            return Err(RespError::TooManyArgs {
                count: MAX_ARGS as u64 + 1,
            });
        }
        let mut arg = Vec::new();
        match line[i] {
            b'"' => {
                i += 1;
                loop {
                    match line.get(i) {
                        None => return Err(RespError::UnbalancedQuotes),
                        Some(b'\\') if line.get(i + 1) == Some(&b'x') => {
                            match (hex(line.get(i + 2)), hex(line.get(i + 3))) {
                                (Some(hi), Some(lo)) => {
                                    arg.push(hi << 4 | lo);
                                    i += 4;
                                }
                                _ => {
                                    arg.push(b'x');
                                    i += 2;
                                }
                            }
                        }
                        Some(b'\\') => {
                            let Some(&c) = line.get(i + 1) else {
                                return Err(RespError::UnbalancedQuotes);
                            };
                            arg.push(match c {
                                b'n' => b'\n',
                                b'r' => b'\r',
                                b't' => b'\t',
                                b'b' => 0x08,
                                b'a' => 0x07,
                                other => other,
                            });
                            i += 2;
                        }
                        Some(b'"') => {
                            i += 1;
                            break;
                        }
                        Some(&c) => {
                            arg.push(c);
                            i += 1;
                        }
                    }
                }
                if line.get(i).is_some_and(|b| !b.is_ascii_whitespace()) {
                    return Err(RespError::UnbalancedQuotes);
                }
            }
            b'\'' => {
                i += 1;
                loop {
                    match line.get(i) {
                        None => return Err(RespError::UnbalancedQuotes),
                        Some(b'\\') if line.get(i + 1) == Some(&b'\'') => {
                            arg.push(b'\'');
                            i += 2;
                        }
                        Some(b'\'') => {
                            i += 1;
                            break;
                        }
                        Some(&c) => {
                            arg.push(c);
                            i += 1;
                        }
                    }
                }
                if line.get(i).is_some_and(|b| !b.is_ascii_whitespace()) {
                    return Err(RespError::UnbalancedQuotes);
                }
            }
            _ => {
                let end = line[i..]
                    .iter()
                    .position(|b| b.is_ascii_whitespace())
                    .map_or(line.len(), |n| i + n);
                arg.extend_from_slice(&line[i..end]);
                i = end;
            }
        }
        args.push(arg);
    }
}

/// The value of a hexadecimal digit.
fn hex(digit: Option<&u8>) -> Option<u8> {
    char::from(*digit?).to_digit(16).map(|d| d as u8)
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consensus::raft::rng::Rng;

    /// Every complete request in `input`, decoded with all of it at once.
    fn decode_all(input: &[u8]) -> Result<Vec<Args>, RespError> {
        decode_chunked_lenient(input, input.len())
    }

    /// Every request in `input`, fed to the decoder in the given chunk sizes the way
    /// a server does (unconsumed bytes stay in its buffer).
    fn decode_chunked(input: &[u8], cuts: &[usize]) -> Result<Vec<Args>, RespError> {
        let mut dec = Decoder::new();
        let mut buf = Vec::new();
        let mut out = Vec::new();
        let mut fed = 0;
        let mut bounds = cuts.to_vec();
        bounds.push(input.len());
        for &cut in &bounds {
            buf.extend_from_slice(&input[fed..cut]);
            fed = cut;
            loop {
                let (used, req) = dec.decode(&buf)?;
                buf.drain(..used);
                match req {
                    Some(args) => out.push(args),
                    None => break,
                }
            }
        }
        assert!(buf.is_empty() && !dec.is_mid_request());
        Ok(out)
    }

    fn args(items: &[&str]) -> Args {
        items.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    fn array(items: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        write_array_header(&mut out, items.len());
        for item in items {
            write_bulk(&mut out, item);
        }
        out
    }

    const PIPELINE: &[u8] = b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nva\r\nl\r\n\
        *2\r\n$3\r\nGET\r\n$3\r\nkey\r\n\
        PING\r\n\
        *0\r\n\
        \r\n\
        *1\r\n$0\r\n\r\n\
        set  k \"it''s\"\n\
        *1\r\n$4\r\nPING\r\n";

    fn pipeline_expected() -> Vec<Args> {
        vec![
            vec![b"SET".to_vec(), b"key".to_vec(), b"va\r\nl".to_vec()],
            args(&["GET", "key"]),
            args(&["PING"]),
            vec![Vec::new()],
            vec![b"set".to_vec(), b"k".to_vec(), b"it''s".to_vec()],
            args(&["PING"]),
        ]
    }

    #[test]
    fn pipeline_whole() {
        assert_eq!(decode_all(PIPELINE).expect("valid"), pipeline_expected());
        // 'it''s' is two single-quoted strings run together: unbalanced for Redis.
        assert_eq!(
            decode_all(b"set k 'it''s'\n"),
            Err(RespError::UnbalancedQuotes)
        );
    }

    #[test]
    fn pipeline_split_at_every_boundary() {
        let input = PIPELINE;
        let expected = pipeline_expected();
        for cut in 0..=input.len() {
            assert_eq!(
                decode_chunked(input, &[cut]).expect("valid"),
                expected,
                "cut at {cut}"
            );
        }
        for a in 0..=input.len() {
            for b in a..=input.len() {
                assert_eq!(
                    decode_chunked(input, &[a, b]).expect("valid"),
                    expected,
                    "cuts at {a}, {b}"
                );
            }
        }
        // One byte at a time.
        let cuts: Vec<usize> = (1..input.len()).collect();
        assert_eq!(decode_chunked(input, &cuts).expect("valid"), expected);
    }

    #[test]
    fn inline_commands() {
        assert_eq!(decode_all(b"PING\r\n").expect("ok"), vec![args(&["PING"])]);
        assert_eq!(decode_all(b"PING\n").expect("ok"), vec![args(&["PING"])]);
        assert_eq!(
            decode_all(b"  set\tk   v  \r\n\r\n\n").expect("ok"),
            vec![args(&["set", "k", "v"])]
        );
        assert_eq!(
            decode_all(b"SET k \"a b\\r\\n\\x41\\\"\\\\\\t\\xzz\"\r\n").expect("ok"),
            vec![vec![
                b"SET".to_vec(),
                b"k".to_vec(),
                b"a b\r\nA\"\\\txzz".to_vec()
            ]]
        );
        assert_eq!(
            decode_all(b"SET k 'it\\'s \"x\"' \"\"\r\n").expect("ok"),
            vec![args(&["SET", "k", "it's \"x\"", ""])]
        );
        assert_eq!(decode_all(b"PING").expect("incomplete"), Vec::<Args>::new());
        for bad in [
            &b"SET k \"abc\r\n"[..],
            b"SET k 'abc\r\n",
            b"SET k \"a\"b\r\n",
            b"SET k 'a'b\r\n",
            b"SET k \"a\\\r\n",
        ] {
            assert_eq!(decode_all(bad), Err(RespError::UnbalancedQuotes), "{bad:?}");
        }
    }

    #[test]
    fn inline_limits() {
        let mut line = vec![b'a'; MAX_INLINE_LEN];
        line.extend_from_slice(b"\r\n");
        assert_eq!(decode_all(&line).expect("at the limit").len(), 1);
        let mut lf = vec![b'a'; MAX_INLINE_LEN];
        lf.push(b'\n');
        assert_eq!(decode_all(&lf).expect("at the limit, bare LF").len(), 1);
        let mut long = vec![b'a'; MAX_INLINE_LEN + 1];
        long.extend_from_slice(b"\r\n");
        assert_eq!(decode_all(&long), Err(RespError::InlineTooLong));
        // Without a line end: an error as soon as the line cannot fit.
        assert_eq!(
            decode_all(&vec![b'a'; MAX_INLINE_LEN + 1]).expect("may still end"),
            Vec::<Args>::new()
        );
        assert_eq!(
            decode_all(&vec![b'a'; MAX_INLINE_LEN + 2]),
            Err(RespError::InlineTooLong)
        );
        // Fed in pieces (the scanned prefix is remembered).
        let cuts: Vec<usize> = (1..line.len()).step_by(4093).collect();
        assert_eq!(decode_chunked(&line, &cuts).expect("ok").len(), 1);
        assert_eq!(decode_chunked(&long, &cuts), Err(RespError::InlineTooLong));
        // Argument count.
        let mut many = b"x".repeat(MAX_ARGS * 2 - 1);
        for i in (1..many.len()).step_by(2) {
            many[i] = b' ';
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(decode_all(&many).expect("at the limit")[0].len(), MAX_ARGS);
        let mut too_many = many.clone();
        too_many.splice(0..0, b"x ".iter().copied());
        assert!(matches!(
            decode_all(&too_many),
            Err(RespError::TooManyArgs { .. })
        ));
    }

    #[test]
    fn array_limits() {
        let items: Vec<&[u8]> = vec![b"x"; MAX_ARGS];
        assert_eq!(
            decode_all(&array(&items)).expect("at the limit")[0].len(),
            MAX_ARGS
        );
        assert_eq!(
            decode_all(b"*1025\r\n"),
            Err(RespError::TooManyArgs { count: 1025 })
        );
        assert_eq!(
            decode_all(b"*9223372036854775807\r\n"),
            Err(RespError::TooManyArgs {
                count: i64::MAX as u64
            })
        );
        assert_eq!(
            decode_all(b"*99999999999999999999\r\n"),
            Err(RespError::InvalidMultibulkLength)
        );
        let big = vec![b'v'; MAX_BULK_LEN];
        let got = decode_all(&array(&[b"SET", b"k", &big])).expect("at the limit");
        assert_eq!(got[0][2].len(), MAX_BULK_LEN);
        assert_eq!(
            decode_all(format!("*1\r\n${}\r\n", MAX_BULK_LEN + 1).as_bytes()),
            Err(RespError::BulkTooLong {
                len: MAX_BULK_LEN as u64 + 1
            })
        );
        // A header without its line end is refused once it cannot be a number.
        assert_eq!(
            decode_all(b"*123456789").expect("incomplete"),
            Vec::<Args>::new()
        );
        assert_eq!(
            decode_all(&[b'*'; MAX_HEADER_LEN + 1]),
            Err(RespError::HeaderTooLong)
        );
        assert_eq!(
            decode_all(format!("*1\r\n${}", "1".repeat(40)).as_bytes()),
            Err(RespError::HeaderTooLong)
        );
    }

    #[test]
    fn a_request_is_capped_as_a_whole_before_its_bulks_arrive() {
        // "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123456789\r\n" is 4 + 9 + 7 + 17 = 37 bytes.
        let req = array(&[b"SET", b"k", b"0123456789"]);
        assert_eq!(req.len(), 37);
        let mut exact = Decoder::with_max_request(37);
        assert_eq!(exact.decode(&req).expect("at the limit").0, 37);
        // One byte less: refused at the last header, before its payload is there.
        let mut dec = Decoder::with_max_request(36);
        assert_eq!(
            dec.decode(&req[..25]),
            Err(RespError::RequestTooLarge { len: 37, max: 36 })
        );
        // Every bulk counts, not only the largest: two bulks under the limit each
        // but over it together.
        let mut dec = Decoder::with_max_request(100);
        let cas = array(&[b"CAS", b"k", &[b'a'; 40], &[b'b'; 40]]);
        let head = 4 + 9 + 7 + 4;
        let err = dec.decode(&cas).expect_err("over the limit");
        assert!(
            matches!(err, RespError::RequestTooLarge { len, max: 100 } if len > 100),
            "{err:?}"
        );
        // The limit is per request: many requests of the limit's size pass.
        let mut dec = Decoder::with_max_request(37);
        let many = req.repeat(10);
        let mut pos = 0;
        for _ in 0..10 {
            let (used, got) = dec.decode(&many[pos..]).expect("each fits");
            assert!(got.is_some());
            pos += used;
        }
        // The decoder reports the bytes of the arguments it took.
        let mut dec = Decoder::new();
        let (used, got) = dec.decode(&cas[..head + 44]).expect("partial");
        assert_eq!(got, None);
        assert_eq!(dec.held_bytes(), 3 + 1 + 40);
        assert!(used <= head + 44);
        let (_, got) = dec.decode(&cas[used..]).expect("rest");
        assert!(got.is_some());
        assert_eq!(dec.held_bytes(), 0);
        // Inline lines are capped too, complete or not.
        let mut dec = Decoder::with_max_request(8);
        assert!(matches!(
            dec.decode(b"PING 12345678\r\n"),
            Err(RespError::RequestTooLarge { max: 8, .. })
        ));
        let mut dec = Decoder::with_max_request(8);
        assert!(matches!(
            dec.decode(b"PING 1234"),
            Err(RespError::RequestTooLarge { max: 8, .. })
        ));
        assert!(Decoder::with_max_request(8).decode(b"PING\r\n").is_ok());
        // The default fits a SET of the largest bulk (see array_limits), and a
        // request of many large bulks is refused at its second one's header.
        let mut dec = Decoder::new();
        let huge = format!("*4\r\n$3\r\nCAS\r\n$1\r\nk\r\n${MAX_BULK_LEN}\r\n");
        let (used, _) = dec
            .decode(huge.as_bytes())
            .expect("first large bulk announced");
        assert_eq!(used, huge.len());
        let mut dec2 = Decoder::new();
        let two = format!("{huge}{}\r\n${MAX_BULK_LEN}\r\n", "v".repeat(MAX_BULK_LEN));
        assert!(matches!(
            dec2.decode(two.as_bytes()),
            Err(RespError::RequestTooLarge {
                max: DEFAULT_MAX_REQUEST,
                ..
            })
        ));
    }

    #[test]
    fn malformed_arrays() {
        let cases: &[(&[u8], RespError)] = &[
            (b"*x\r\n", RespError::InvalidMultibulkLength),
            (b"*\r\n", RespError::InvalidMultibulkLength),
            (b"*-\r\n", RespError::InvalidMultibulkLength),
            (b"*+1\r\n", RespError::InvalidMultibulkLength),
            (b"*1 \r\n", RespError::InvalidMultibulkLength),
            (b"*1\rx", RespError::ExpectedCrlf),
            (b"*1\r\n+OK\r\n", RespError::ExpectedBulk(b'+')),
            (b"*2\r\n$1\r\na\r\n:1\r\n", RespError::ExpectedBulk(b':')),
            (b"*1\r\n$x\r\n", RespError::InvalidBulkLength),
            (b"*1\r\n$-1\r\n", RespError::InvalidBulkLength),
            (b"*1\r\n$\r\n", RespError::InvalidBulkLength),
            (b"*1\r\n$1\r\nab\r\n", RespError::ExpectedCrlf),
            (b"*1\r\n$1\r\na\n\r", RespError::ExpectedCrlf),
        ];
        for (input, err) in cases {
            assert_eq!(decode_all(input).as_ref(), Err(err), "{input:?}");
            // The same error however the input is split.
            for cut in 0..input.len() {
                assert_eq!(
                    decode_chunked(input, &[cut]).as_ref(),
                    Err(err),
                    "{input:?} / {cut}"
                );
            }
        }
        assert_eq!(
            RespError::ExpectedBulk(b'\n').to_string(),
            "expected '$', got '\\n'"
        );
        // Empty and nil arrays are skipped, as Redis does.
        assert_eq!(
            decode_all(b"*0\r\n*-1\r\n*-5\r\n").expect("ok"),
            Vec::<Args>::new()
        );
    }

    #[test]
    fn random_bytes_never_panic() {
        const ALPHABET: &[u8] = b"*$:+-0123456789\r\n \"'\\xaZ";
        let mut rng = Rng::new(0x5eed_cafe_f00d_0001);
        for round in 0..20_000 {
            let len = rng.below(64);
            let input: Vec<u8> = (0..len)
                .map(|_| {
                    if round % 2 == 0 {
                        ALPHABET[rng.below(ALPHABET.len())]
                    } else {
                        rng.next_u64() as u8
                    }
                })
                .collect();
            let whole = decode_all(&input);
            let cut = rng.below(len + 1);
            let split = decode_chunked_lenient(&input, cut);
            // Splitting never changes the outcome.
            assert_eq!(whole.is_ok(), split.is_ok(), "{input:?} / {cut}");
            if let (Ok(a), Ok(b)) = (&whole, &split) {
                assert_eq!(a, b, "{input:?} / {cut}");
            }
        }
    }

    /// Like [`decode_chunked`] with one cut, without requiring the input to end at a
    /// request boundary.
    fn decode_chunked_lenient(input: &[u8], cut: usize) -> Result<Vec<Args>, RespError> {
        let mut dec = Decoder::new();
        let mut buf = Vec::new();
        let mut out = Vec::new();
        for part in [&input[..cut], &input[cut..]] {
            buf.extend_from_slice(part);
            loop {
                let (used, req) = dec.decode(&buf)?;
                buf.drain(..used);
                match req {
                    Some(args) => out.push(args),
                    None => break,
                }
            }
        }
        Ok(out)
    }

    #[test]
    fn random_requests_round_trip() {
        let mut rng = Rng::new(42);
        for _ in 0..500 {
            let mut input = Vec::new();
            let mut expected = Vec::new();
            for _ in 0..rng.below(8) + 1 {
                let n = rng.below(5) + 1;
                let req: Args = (0..n)
                    .map(|_| (0..rng.below(12)).map(|_| rng.next_u64() as u8).collect())
                    .collect();
                let refs: Vec<&[u8]> = req.iter().map(Vec::as_slice).collect();
                input.extend_from_slice(&array(&refs));
                expected.push(req);
            }
            let cut = rng.below(input.len() + 1);
            assert_eq!(decode_all(&input).expect("valid"), expected);
            assert_eq!(decode_chunked(&input, &[cut]).expect("valid"), expected);
        }
    }

    #[test]
    fn encoder() {
        let mut out = Vec::new();
        write_simple(&mut out, b"OK");
        write_error(&mut out, b"ERR bad\r\nthing");
        write_integer(&mut out, 0);
        write_integer(&mut out, -42);
        write_integer(&mut out, i64::MIN);
        write_bulk(&mut out, b"a\r\nb");
        write_bulk(&mut out, b"");
        write_nil(&mut out);
        write_array_header(&mut out, 0);
        assert_eq!(
            out,
            b"+OK\r\n-ERR bad  thing\r\n:0\r\n:-42\r\n:-9223372036854775808\r\n\
              $4\r\na\r\nb\r\n$0\r\n\r\n$-1\r\n*0\r\n"
        );
        let reply = Reply::Array(vec![
            Reply::Simple("PONG".into()),
            Reply::Integer(7),
            Reply::Nil,
            Reply::Bulk(b"x".to_vec()),
            Reply::Error("MOVED 0 127.0.0.1:7000".into()),
            Reply::Array(vec![]),
        ]);
        assert_eq!(
            reply.to_bytes(),
            b"*6\r\n+PONG\r\n:7\r\n$-1\r\n$1\r\nx\r\n-MOVED 0 127.0.0.1:7000\r\n*0\r\n"
        );
    }
}
