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

mod encode;
mod inline;
#[cfg(test)]
mod tests;

pub use encode::{
    write_array_header, write_bulk, write_error, write_integer, write_nil, write_simple, Reply,
};
use inline::split_args;

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
/// The fewest bytes an argument of an array request takes: `$0\r\n\r\n`.
const MIN_BULK_BYTES: usize = 6;

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
                // Room for the arguments the bytes in hand can hold (each takes
                // at least `$0\r\n\r\n`), not for all that were announced: a
                // 7-byte `*1024\r\n` must not cost 24 KiB (found by the
                // `resp_decode` fuzz target). The vector grows as arguments come.
                let fit = (buf.len() - pos) / MIN_BULK_BYTES;
                self.args = Vec::with_capacity(self.remaining.min(fit));
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
