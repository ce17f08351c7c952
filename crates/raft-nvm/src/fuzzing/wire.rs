//! Fuzz bodies for the wire formats a hostile client or peer controls.
//!
//! - [`resp_decode`] (target `resp_decode`): the RESP request [`Decoder`] fed the
//!   input whole and in fuzz-chosen chunks, the command parser on every request it
//!   yields, and the client-side [`decode_reply`] on the same bytes.
//! - [`frame_decode`] (target `frame_decode`): the transport's frame payload
//!   decoder and its reader.
//! - [`membership_decode`] (target `membership_decode`): configuration entries
//!   and the typed machine's postcard decoder.
//! - [`metrics_http`] (target `metrics_http`): one connection of the metrics
//!   listener fed the input, and the Prometheus exposition parser.
//!
//! Each asserts what the crate promises, not only "no panic":
//!
//! - **chunking invariance**: a stream decodes to the same requests, and the same
//!   error, however it is cut into reads;
//! - **need more**: every strict prefix of a request asks for more bytes (never a
//!   request, never an error the whole request does not give);
//! - **bounded allocation**: while decoding, the bytes allocated stay under
//!   [`ALLOC_PER_BYTE`] times the bytes received, plus [`ALLOC_SLACK`]. It is
//!   measured by [`CountingAlloc`], which the fuzz target and the corpus test
//!   install as their global allocator (a library cannot); without it the check
//!   is skipped ([`counting_active`] tells);
//! - **roundtrip**: a decoded value re-encodes to what decodes to it again, and a
//!   frame to the very bytes it came from unless a varint in them was over-long
//!   (postcard accepts those; see [`frame_decode`]).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use crate::consensus::machine as typed;
use crate::consensus::raft::{Membership, MessageLimits};
use crate::server::net::frame::{self, Wire, LEN_PREFIX};
use crate::server::resp::{decode_reply, Args, Command, Decoder, Reply, RespError};

/// The bytes a decoder may allocate per byte it was given (an argument of one
/// byte costs its `Vec` header, 24 bytes, and the allocator's smallest block, 8;
/// vectors grow by doubling).
pub const ALLOC_PER_BYTE: usize = 128;
/// The bytes a decoder may allocate whatever its input (error texts, a first
/// small vector).
pub const ALLOC_SLACK: usize = 4096;

thread_local! {
    /// Bytes allocated and not yet freed by this thread (wrapping: a block freed
    /// by another thread than its allocator's skews one thread's count, which a
    /// single-threaded fuzz body never does).
    static LIVE: Cell<usize> = const { Cell::new(0) };
    /// The highest `LIVE` since the last [`measure`] started.
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

/// A global allocator that counts, per thread, the bytes live and their peak, so
/// a fuzz body can bound what a decoder allocates. Install it in the binary:
///
/// ```ignore
/// #[global_allocator]
/// static ALLOC: raft_nvm::fuzzing::wire::CountingAlloc = raft_nvm::fuzzing::wire::CountingAlloc;
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct CountingAlloc;

fn note_alloc(size: usize) {
    // `try_with`: during thread teardown the counters may be gone; then nothing
    // is counted (no decoder runs then).
    let _ = LIVE.try_with(|live| {
        let now = live.get().wrapping_add(size);
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

fn note_free(size: usize) {
    let _ = LIVE.try_with(|live| live.set(live.get().wrapping_sub(size)));
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged,
// so `System`'s guarantees hold; the counting touches only const-initialised
// thread-locals without destructors, which never allocate.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            note_alloc(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc_zeroed` is passed on as is.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            note_alloc(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note_free(layout.size());
        // SAFETY: the caller's contract for `dealloc` is passed on as is.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract for `realloc` is passed on as is.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // Counted as a new block beside the old one: a moving realloc holds both.
            note_alloc(new_size);
            note_free(layout.size());
        }
        p
    }
}

/// Whether [`CountingAlloc`] is this binary's allocator (allocations are counted).
pub fn counting_active() -> bool {
    let before = LIVE.with(Cell::get);
    let probe = std::hint::black_box(vec![0u8; 64]);
    let during = LIVE.with(Cell::get);
    drop(probe);
    during.wrapping_sub(before) >= 64
}

/// Runs `f` and returns its result with the most bytes it had allocated at once
/// (beyond what was live when it started).
pub fn measure<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let start = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(start));
    let out = f();
    let peak = PEAK.with(Cell::get);
    (out, peak.saturating_sub(start))
}

/// Panics if `allocated` bytes exceed the bound for `received` input bytes.
fn check_bound(what: &str, allocated: usize, received: usize) {
    let bound = received.saturating_mul(ALLOC_PER_BYTE) + ALLOC_SLACK;
    assert!(
        allocated <= bound,
        "{what} allocated {allocated} bytes for {received} bytes of input (bound {bound})"
    );
}

/// What a stream of requests decoded to.
#[derive(Debug, PartialEq, Eq)]
pub struct RespOutcome {
    /// The requests, in order.
    pub requests: Vec<Args>,
    /// The error that ended the stream, if one did.
    pub error: Option<RespError>,
    /// The bytes left unconsumed at the end (part of an unfinished request); 0
    /// after an error.
    pub leftover: usize,
}

/// Splits a fuzz input into chunk lengths and the stream: the first byte gives the
/// number of cuts (modulo 8), each following byte one chunk's length (0 means 1);
/// the last chunk takes the rest.
pub fn split_chunks(data: &[u8]) -> (Vec<usize>, &[u8]) {
    let Some((&n, rest)) = data.split_first() else {
        return (Vec::new(), data);
    };
    let n = usize::from(n % 8).min(rest.len());
    let (cuts, stream) = rest.split_at(n);
    (
        cuts.iter().map(|&c| usize::from(c).max(1)).collect(),
        stream,
    )
}

/// The `resp_decode` body: see the module docs. Returns the outcome of the whole
/// stream (the input after its chunk header).
///
/// # Panics
///
/// When a promise is broken (that is the finding), or on a bug that panics.
pub fn resp_decode(data: &[u8]) -> RespOutcome {
    let (cuts, stream) = split_chunks(data);
    let (whole, bounds) = decode_stream(stream, &[]);
    let (chunked, _) = decode_stream(stream, &cuts);
    assert_eq!(
        whole, chunked,
        "cut at {cuts:?}, the stream decodes differently"
    );
    // A strict prefix of each request asks for more, from a fresh decoder (the
    // decoder is back at its start between requests).
    for &(start, end) in &bounds {
        let (part, _) = decode_stream(&stream[start..end - 1], &[]);
        assert!(
            part.requests.is_empty() && part.error.is_none(),
            "a strict prefix of the request at {start}..{end} gave {part:?}"
        );
    }
    for args in &whole.requests {
        // Never panics; an error is an answer to the client.
        let _ = Command::parse_with(args.clone(), None);
    }
    replies(stream, &cuts);
    whole
}

/// Feeds `stream` to a fresh decoder as a server does: cut into reads of the
/// lengths in `cuts` (the rest in one), each appended to a buffer that is decoded
/// until it asks for more, consumed bytes dropped. Returns the outcome and where
/// each request began and ended in `stream`.
fn decode_stream(stream: &[u8], cuts: &[usize]) -> (RespOutcome, Vec<(usize, usize)>) {
    let mut dec = Decoder::new();
    let mut input: Vec<u8> = Vec::new();
    let mut out = RespOutcome {
        requests: Vec::new(),
        error: None,
        leftover: 0,
    };
    let mut bounds = Vec::new();
    // Bytes of `stream` appended, and consumed by the decoder so far.
    let mut fed = 0;
    let mut consumed = 0;
    // Where the current request began (after the last one).
    let mut start = 0;
    let mut chunks = cuts.iter().copied().chain(std::iter::once(usize::MAX));
    while fed < stream.len() {
        let take = chunks.next().unwrap_or(usize::MAX).min(stream.len() - fed);
        input.extend_from_slice(&stream[fed..fed + take]);
        fed += take;
        loop {
            // The bytes this request may have cost so far: what the decoder
            // consumed of it, and what it is given now.
            let received = consumed - start + input.len();
            let (result, allocated) = measure(|| dec.decode(&input));
            check_bound("the RESP decoder", allocated, received);
            match result {
                Ok((used, request)) => {
                    assert!(used <= input.len(), "consumed {used} of {}", input.len());
                    input.drain(..used);
                    consumed += used;
                    assert!(
                        dec.held_bytes() <= consumed - start,
                        "the decoder holds {} bytes of a request that has sent {}",
                        dec.held_bytes(),
                        consumed - start
                    );
                    let Some(args) = request else { break };
                    assert!(!args.is_empty(), "a request without a command name");
                    bounds.push((start, consumed));
                    out.requests.push(args);
                    start = consumed;
                }
                Err(e) => {
                    // The stream is dead: where the decoder stopped within the
                    // bytes it was given (empty lines it skipped, say) is no
                    // promise, so `leftover` stays 0.
                    out.error = Some(e);
                    return (out, bounds);
                }
            }
        }
    }
    out.leftover = input.len();
    (out, bounds)
}

/// The client side on the same bytes: each reply decodes the same from every
/// prefix that holds it (a shorter one asks for more), within the allocation
/// bound, and re-encodes to bytes that decode to it again.
fn replies(stream: &[u8], cuts: &[usize]) {
    let mut at = 0;
    // A reply in 64 KiB of small elements makes this quadratic; a fuzz input is short.
    for _ in 0..64 {
        let rest = &stream[at..];
        let (whole, allocated) = measure(|| decode_reply(rest));
        check_bound("decode_reply", allocated, rest.len());
        let mut cut = 0;
        for &c in cuts {
            cut = (cut + c).min(rest.len());
            let part = decode_reply(&rest[..cut]);
            assert!(
                part == Ok(None) || part == whole,
                "the first {cut} bytes decode to {part:?}, all {} to {whole:?}",
                rest.len()
            );
        }
        let Ok(Some((reply, used))) = whole else {
            return;
        };
        assert!(used > 0 && used <= rest.len());
        let again = reply.to_bytes();
        assert_eq!(
            decode_reply(&again),
            Ok(Some((normalized(&reply), again.len()))),
            "{reply:?} does not decode from its encoding"
        );
        at += used;
    }
}

/// `reply` as its encoding decodes back: line breaks in simple and error texts
/// become spaces (the encoder's rule).
fn normalized(reply: &Reply) -> Reply {
    let text = |s: &str| s.replace(['\r', '\n'], " ");
    match reply {
        Reply::Simple(s) => Reply::Simple(text(s).into()),
        Reply::Error(s) => Reply::Error(text(s).into()),
        Reply::Array(items) => Reply::Array(items.iter().map(normalized).collect()),
        other => other.clone(),
    }
}

/// The `frame_decode` body: the input is one frame's payload. Decoding it gives a
/// typed error or a [`Wire`] value that encodes back to the input (up to
/// over-long varints, which postcard accepts: see the body), within
/// the allocation bound; a message is then validated as a reader does (never a
/// panic). The same bytes behind a length prefix go through [`frame::read_frame`]
/// with the same outcome, and with a limit below their length are refused.
///
/// Returns the decoded value, if any.
///
/// # Panics
///
/// When a promise is broken, or on a bug that panics.
pub fn frame_decode(data: &[u8]) -> Option<Wire> {
    let (decoded, allocated) = measure(|| frame::decode(data));
    check_bound("the frame decoder", allocated, data.len());
    let mut framed = Vec::with_capacity(LEN_PREFIX + data.len());
    framed.extend_from_slice(&u32::try_from(data.len()).ok()?.to_le_bytes());
    framed.extend_from_slice(data);
    let read = read_now(&framed, data.len());
    assert_eq!(
        read.map_err(|e| e.to_string()),
        decoded
            .as_ref()
            .map(|w| Some(w.clone()))
            .map_err(ToString::to_string),
        "read_frame and decode disagree"
    );
    if !data.is_empty() {
        assert!(
            matches!(
                read_now(&framed, data.len() - 1),
                Err(frame::FrameError::TooLarge { .. })
            ),
            "a frame above the limit was not refused"
        );
    }
    let wire = decoded.ok()?;
    let mut again = Vec::new();
    frame::encode(&wire, &mut again).expect("a decoded frame encodes");
    let again = &again[LEN_PREFIX..];
    // postcard accepts over-long varints (`0xb0 0x00` for 48), so the format is
    // canonical only up to them: the encoding is the shortest form, decodes to the
    // same value, and is the input itself when no varint was over-long (then the
    // lengths are equal). Nothing relies on a frame's exact bytes (the Hello's
    // authentication tag covers its fields, not its encoding).
    assert_eq!(
        frame::decode(again).ok().as_ref(),
        Some(&wire),
        "{wire:?} roundtrip"
    );
    assert!(
        again.len() <= data.len(),
        "{wire:?} encodes longer than it came"
    );
    if again.len() == data.len() {
        assert_eq!(again, data, "{wire:?} does not encode back to its bytes");
    }
    if let Wire::Msg(msg) = &wire {
        let _ = msg.validate(&MessageLimits::default());
    }
    Some(wire)
}

/// [`frame::read_frame`] of `framed` (an in-memory reader, always ready): polled
/// once, it completes.
fn read_now(framed: &[u8], max_frame: usize) -> Result<Option<Wire>, frame::FrameError> {
    let mut reader = framed;
    let mut buf = Vec::new();
    let mut fut = pin!(frame::read_frame(&mut reader, &mut buf, max_frame));
    let mut cx = Context::from_waker(Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        Poll::Ready(result) => result,
        Poll::Pending => panic!("reading from memory must not wait"),
    }
}

/// The `membership_decode` body: the first byte picks the decoder, the rest is its
/// input. `0`: [`Membership::decode`] (a configuration entry: a valid one
/// re-encodes to its shortest form, which decodes to it again); otherwise the typed machine's [`typed::decode`]
/// of a command shaped like the `counter` example's, and of a `Vec<String>`.
/// Typed errors, never a panic, within the allocation bound.
///
/// Returns whether the input decoded.
///
/// # Panics
///
/// When a promise is broken, or on a bug that panics.
pub fn membership_decode(data: &[u8]) -> bool {
    let Some((&which, bytes)) = data.split_first() else {
        return false;
    };
    if which == 0 {
        let (decoded, allocated) = measure(|| Membership::decode(bytes));
        check_bound("Membership::decode", allocated, bytes.len());
        let Ok(m) = decoded else { return false };
        // Not byte for byte: postcard takes over-long varints and sets in any
        // order (with repeats), and the encoding is the sorted, shortest form.
        let again = m.encode();
        assert_eq!(
            Membership::decode(&again).as_ref(),
            Ok(&m),
            "{m:?} roundtrip"
        );
        assert!(
            again.len() <= bytes.len(),
            "{m:?} encodes longer than it came"
        );
        return true;
    }
    let (command, allocated) = measure(|| typed::decode::<TypedCommand>("command", bytes));
    check_bound("typed::decode", allocated, bytes.len());
    let (list, allocated) = measure(|| typed::decode::<Vec<String>>("list", bytes));
    check_bound("typed::decode", allocated, bytes.len());
    if let Ok(c) = &command {
        let again = typed::encode("command", c).expect("a decoded command encodes");
        assert_eq!(
            typed::decode::<TypedCommand>("command", &again).as_ref(),
            Ok(c)
        );
    }
    command.is_ok() || list.is_ok()
}

/// A typed machine's command, as an application would declare one.
#[derive(Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum TypedCommand {
    Add { name: String, by: i64 },
    Reset(Vec<String>),
    Batch(Vec<(u32, Option<Vec<u8>>)>),
}

/// The exposition parser the tests read the metrics text back with (test-only in
/// the crate; compiled here for the `metrics_http` target).
#[cfg(not(test))]
#[path = "../server/metrics/parse.rs"]
#[allow(dead_code)] // Only `parse` is called here; the rest serves the tests.
mod exposition_parse;
// The crate's own test build has it already.
#[cfg(test)]
use crate::server::metrics::parse as exposition_parse;

/// What one metrics connection did.
#[derive(Debug, PartialEq, Eq)]
pub struct HttpOutcome {
    /// The status of the response, if the server wrote one.
    pub status: Option<u16>,
    /// Whether the server ended the connection within its timeout.
    pub in_time: bool,
}

/// The `metrics_http` body. The first byte picks: odd, the rest is read as
/// Prometheus text by the exposition parser (an error or samples, never a panic,
/// allocation bounded); even, the rest is what a client sends on one connection
/// of the metrics listener, which is served in memory with its timeout cut to
/// [`FUZZ_HTTP_TIMEOUT`] (a fuzzer cannot wait 5 s an input). With bit 1 set the
/// client then closes its side; otherwise it stays, silent, as a slow-loris
/// client would. Either way the server must end the connection by itself within
/// its timeout (and some scheduling slack), and what it wrote must be an HTTP/1.x
/// response (or nothing).
///
/// # Panics
///
/// When a promise is broken, or on a bug that panics.
pub fn metrics_http(data: &[u8]) -> Option<HttpOutcome> {
    let (&mode, rest) = data.split_first()?;
    if mode & 1 == 1 {
        let text = String::from_utf8_lossy(rest);
        let (parsed, allocated) = measure(|| exposition_parse::parse(&text));
        check_bound("the exposition parser", allocated, text.len());
        if let Ok(samples) = parsed {
            assert!(samples.len() <= text.lines().count());
        }
        return None;
    }
    Some(serve_in_memory(rest, mode & 2 == 2))
}

/// The metrics connection timeout in the `metrics_http` target.
pub const FUZZ_HTTP_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(20);

/// Serves one metrics connection whose client sends `request` (then closes its
/// side if `close`); the node's text is a fixed one.
fn serve_in_memory(request: &[u8], close: bool) -> HttpOutcome {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime");
    rt.block_on(async {
        let (mut client, server) = tokio::io::duplex(crate::server::metrics::MAX_HEAD * 2);
        let (requests, mut asked) =
            tokio::sync::mpsc::channel::<tokio::sync::oneshot::Sender<String>>(1);
        let node = tokio::spawn(async move {
            while let Some(reply) = asked.recv().await {
                let _ = reply.send("# TYPE raftnvm_up gauge\nraftnvm_up 1\n".to_string());
            }
        });
        let started = tokio::time::Instant::now();
        let served = tokio::spawn(crate::server::metrics::serve_within_timeout(
            server,
            requests,
            FUZZ_HTTP_TIMEOUT,
        ));
        // The server's timeout, and room for a loaded machine's scheduling.
        let bound = FUZZ_HTTP_TIMEOUT + std::time::Duration::from_secs(1);
        // The server reads at most its head limit before answering; what does
        // not fit in the pipe then is never read, as on a real socket.
        let _ = tokio::time::timeout(bound, client.write_all(request)).await;
        if close {
            let _ = client.shutdown().await;
        }
        let mut response = Vec::new();
        let _ = tokio::time::timeout(bound, client.read_to_end(&mut response)).await;
        let in_time = matches!(tokio::time::timeout(bound, served).await, Ok(Ok(_)))
            && started.elapsed() <= bound * 2;
        node.abort();
        assert!(in_time, "the metrics connection outlived its timeout");
        let status = (!response.is_empty()).then(|| {
            assert!(
                response.starts_with(b"HTTP/1.1 ") || response.starts_with(b"HTTP/1.0 "),
                "not an HTTP/1.x response: {:?}",
                String::from_utf8_lossy(&response[..response.len().min(64)])
            );
            std::str::from_utf8(&response[9..12.min(response.len())])
                .ok()
                .and_then(|s| s.parse().ok())
                .expect("a status code")
        });
        HttpOutcome { status, in_time }
    })
}
