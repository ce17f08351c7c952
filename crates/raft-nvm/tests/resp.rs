//! The RESP front end over TCP against fake nodes: a task owning a `HashMap` that
//! answers `KvCall`s (optionally completing them out of order), and a follower that
//! answers `NotLeader`. First with a small hand-written client, then with the real
//! `redis-cli` and `redis-benchmark` (Debian's `redis-tools`).
//!
//! The real-tool tests print a line and pass if the binaries are missing, unless
//! `PMKIT_REQUIRE_REDIS_TOOLS=1` is set (as in CI), in which case they fail.

#![cfg(feature = "server")]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use raft_nvm::node::{KvCall, KvHandle};
use raft_nvm::resp::{decode_reply, encode_command, serve, Reply, RespServer};
use raft_nvm::secret::Secret;
use raft_nvm::service::{KvReply, KvRequest};
use tokio::sync::{mpsc, watch};

/// How a fake node answers.
#[derive(Clone, Debug)]
enum Mode {
    /// Serves requests from a `HashMap` in arrival order, replying at once.
    Store,
    /// As `Store`, but each reply is sent after a pseudo-random delay of up to 2 ms,
    /// so replies complete out of request order.
    Jittery,
    /// A follower: `NotLeader { leader }` to everything.
    Follower(Option<String>),
}

/// What a fake node was asked.
#[derive(Default)]
struct Stats {
    gets: AtomicU64,
    sets: AtomicU64,
}

/// A fake node and the RESP server in front of it, on their own runtime.
struct Fixture {
    addr: SocketAddr,
    stats: Arc<Stats>,
    stop: watch::Sender<bool>,
    server: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    rt: tokio::runtime::Runtime,
}

impl Fixture {
    fn start(mode: Mode) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let (handle, calls) = mpsc::channel(1024);
        let stats = Arc::new(Stats::default());
        rt.spawn(fake_node(calls, mode, stats.clone()));
        Self::with_handle(rt, handle, stats)
    }

    /// A fake node in `mode` behind a server that `configure` set up.
    fn start_with(mode: Mode, configure: impl FnOnce(RespServer) -> RespServer) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let (handle, calls) = mpsc::channel(1024);
        let stats = Arc::new(Stats::default());
        rt.spawn(fake_node(calls, mode, stats.clone()));
        let (stop, shutdown) = watch::channel(false);
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let server = configure(RespServer::from_listener(listener, handle));
        let server = rt.spawn(server.run(shutdown));
        Self {
            addr,
            stats,
            stop,
            server: Some(server),
            rt,
        }
    }

    fn with_handle(rt: tokio::runtime::Runtime, handle: KvHandle, stats: Arc<Stats>) -> Self {
        let (stop, shutdown) = watch::channel(false);
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let server = rt.spawn(serve(listener, handle, shutdown));
        Self {
            addr,
            stats,
            stop,
            server: Some(server),
            rt,
        }
    }

    fn client(&self) -> Client {
        Client::connect(self.addr)
    }

    /// Signals shutdown and waits for `serve` to return.
    fn shut_down(&mut self) {
        self.stop.send(true).expect("server listening");
        if let Some(server) = self.server.take() {
            self.rt
                .block_on(async { tokio::time::timeout(Duration::from_secs(5), server).await })
                .expect("serve returns after shutdown")
                .expect("serve task")
                .expect("serve result");
        }
    }
}

async fn fake_node(mut calls: mpsc::Receiver<KvCall>, mode: Mode, stats: Arc<Stats>) {
    let mut map: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    let mut rng = pmem_core::SplitMix64::new(0x1234_5678_9abc_def1);
    while let Some(KvCall { req, reply }) = calls.recv().await {
        let answer = match (&mode, req) {
            (Mode::Follower(leader), _) => KvReply::NotLeader {
                leader: leader.clone(),
            },
            (_, KvRequest::Get { key }) => {
                stats.gets.fetch_add(1, Ordering::Relaxed);
                KvReply::Value(map.get(&key).cloned())
            }
            (_, KvRequest::Set { key, value }) => {
                stats.sets.fetch_add(1, Ordering::Relaxed);
                map.insert(key, value);
                KvReply::Done
            }
            (_, KvRequest::Delete { key }) => KvReply::Deleted(map.remove(&key).is_some()),
            (_, KvRequest::Cas { key, expected, new }) => {
                let swap = map.get(&key) == expected.as_ref();
                if swap {
                    map.insert(key, new);
                }
                KvReply::Swapped(swap)
            }
            (_, KvRequest::Info) => KvReply::Info(format!(
                "# Replication\r\nrole:leader\r\nkeys:{}\r\n",
                map.len()
            )),
            // The fake node runs no state machine (the RESP server without one
            // never sends such calls).
            (_, KvRequest::Machine(_)) => KvReply::Rejected("no state machine".into()),
            (
                _,
                KvRequest::TransferLeader { .. }
                | KvRequest::ChangeMembership(_)
                | KvRequest::ShowMembership,
            ) => KvReply::Rejected("one node".into()),
        };
        if let Mode::Jittery = mode {
            let delay = Duration::from_micros(rng.below(2000));
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let _ = reply.send(answer);
            });
        } else {
            let _ = reply.send(answer);
        }
    }
}

/// A blocking RESP client (replies decoded by the library's own decoder).
struct Client {
    stream: TcpStream,
    /// Bytes received and not yet decoded.
    input: Vec<u8>,
}

impl Client {
    fn connect(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        Self {
            stream,
            input: Vec::new(),
        }
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    fn send(&mut self, args: &[&[u8]]) {
        let mut out = Vec::new();
        encode_command(args, &mut out);
        self.send_raw(&out);
    }

    fn call(&mut self, args: &[&str]) -> Reply {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.send(&args);
        self.read()
    }

    fn read(&mut self) -> Reply {
        loop {
            if let Some((reply, used)) = decode_reply(&self.input).expect("a RESP reply") {
                self.input.drain(..used);
                return reply;
            }
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk).expect("read reply");
            assert!(n > 0, "connection closed while a reply was expected");
            self.input.extend_from_slice(&chunk[..n]);
        }
    }

    /// Whether the server closed the connection (after any replies already read).
    fn is_closed(&mut self) -> bool {
        let mut byte = [0u8];
        self.input.is_empty() && matches!(self.stream.read(&mut byte), Ok(0))
    }
}

fn ok() -> Reply {
    Reply::Simple("OK".into())
}

fn bulk(s: &str) -> Reply {
    Reply::Bulk(s.as_bytes().to_vec())
}

fn err(s: &str) -> Reply {
    Reply::Error(s.to_owned().into())
}

#[test]
fn set_get_del_cas() {
    let fx = Fixture::start(Mode::Store);
    let mut c = fx.client();
    assert_eq!(c.call(&["GET", "k"]), Reply::Nil);
    assert_eq!(c.call(&["SET", "k", "v1"]), ok());
    assert_eq!(c.call(&["get", "k"]), bulk("v1"));
    // CAS compares with a present value.
    assert_eq!(c.call(&["CAS", "k", "nope", "v2"]), Reply::Integer(0));
    assert_eq!(c.call(&["CAS", "k", "v1", "v2"]), Reply::Integer(1));
    assert_eq!(c.call(&["GET", "k"]), bulk("v2"));
    assert_eq!(c.call(&["DEL", "k"]), Reply::Integer(1));
    assert_eq!(c.call(&["DEL", "k"]), Reply::Integer(0));
    // An absent key never matches, not even an empty expected value.
    assert_eq!(c.call(&["CAS", "k", "", "v3"]), Reply::Integer(0));
    assert_eq!(c.call(&["GET", "k"]), Reply::Nil);
    // Binary-safe keys and values.
    c.send(&[b"SET", b"\0\r\n", b"\xff\r\n\0"]);
    assert_eq!(c.read(), ok());
    c.send(&[b"GET", b"\0\r\n"]);
    assert_eq!(c.read(), Reply::Bulk(b"\xff\r\n\0".to_vec()));
    match c.call(&["INFO"]) {
        Reply::Bulk(text) => {
            let text = String::from_utf8(text).expect("text");
            assert!(text.contains("role:leader"), "{text}");
        }
        other => panic!("INFO: {other:?}"),
    }
    assert_eq!(c.call(&["PING"]), Reply::Simple("PONG".into()));
    assert_eq!(c.call(&["ping", "hello"]), bulk("hello"));
    assert_eq!(
        c.call(&["CONFIG", "GET", "save"]),
        Reply::Array(vec![bulk("save"), bulk("")])
    );
    assert_eq!(
        c.call(&["CONFIG", "GET", "maxmemory"]),
        Reply::Array(vec![])
    );
    assert_eq!(c.call(&["COMMAND", "DOCS"]), Reply::Array(vec![]));
    assert_eq!(c.call(&["SELECT", "0"]), ok());
    assert_eq!(
        c.call(&["SELECT", "1"]),
        err("ERR DB index is out of range")
    );
    assert_eq!(c.call(&["CLIENT", "SETNAME", "me"]), ok());
    assert_eq!(
        c.call(&["SET", "k", "v", "EX", "10"]),
        err("ERR SET option 'EX' is not supported")
    );
    assert_eq!(
        c.call(&["GET"]),
        err("ERR wrong number of arguments for 'get' command")
    );
    // An unknown command keeps the connection.
    assert_eq!(c.call(&["FLUSHALL"]), err("ERR unknown command 'FLUSHALL'"));
    // Inline commands.
    c.send_raw(b"PING\r\nset k2 \"two words\"\nGET k2\r\n");
    assert_eq!(c.read(), Reply::Simple("PONG".into()));
    assert_eq!(c.read(), ok());
    assert_eq!(c.read(), bulk("two words"));
    // QUIT answers, then closes; what follows it is not served.
    c.send_raw(b"PING\r\nQUIT\r\nSET k3 v\r\n");
    assert_eq!(c.read(), Reply::Simple("PONG".into()));
    assert_eq!(c.read(), ok());
    assert!(c.is_closed());
    let mut c = fx.client();
    assert_eq!(c.call(&["GET", "k3"]), Reply::Nil);
}

#[test]
fn pipelined_replies_keep_request_order() {
    // Replies complete out of order at the node; they must leave in order.
    let fx = Fixture::start(Mode::Jittery);
    let mut c = fx.client();
    let mut batch = Vec::new();
    let mut expected = Vec::new();
    for i in 0..600 {
        // Six requests per key in a row: SET, GET, PING, SET, CAS, unknown.
        let key = format!("key{}", (i / 6) % 50);
        let value = format!("value{i}");
        match i % 6 {
            0 | 3 => {
                encode_command(&[b"SET", key.as_bytes(), value.as_bytes()], &mut batch);
                expected.push(ok());
            }
            1 => {
                encode_command(&[b"GET", key.as_bytes()], &mut batch);
                expected.push(Reply::Bulk(format!("value{}", i - 1).into_bytes()));
            }
            2 => {
                encode_command(&[b"PING", value.as_bytes()], &mut batch);
                expected.push(Reply::Bulk(value.into_bytes()));
            }
            4 => {
                let prev = format!("value{}", i - 1);
                encode_command(&[b"CAS", key.as_bytes(), prev.as_bytes(), b"x"], &mut batch);
                expected.push(Reply::Integer(1));
            }
            _ => {
                encode_command(&[b"NOPE"], &mut batch);
                expected.push(err("ERR unknown command 'NOPE'"));
            }
        }
    }
    // One write holds the whole pipeline (and more than one read's worth).
    assert!(batch.len() > 16 << 10);
    c.send_raw(&batch);
    for (i, want) in expected.iter().enumerate() {
        assert_eq!(&c.read(), want, "reply {i}");
    }
    assert_eq!(c.call(&["GET", "key3"]), bulk("x"));
}

#[test]
fn follower_redirects_with_moved_and_tryagain() {
    let fx = Fixture::start(Mode::Follower(Some("127.0.0.1:7001".into())));
    let mut c = fx.client();
    assert_eq!(c.call(&["GET", "k"]), err("MOVED 0 127.0.0.1:7001"));
    assert_eq!(c.call(&["SET", "k", "v"]), err("MOVED 0 127.0.0.1:7001"));
    // Local commands are served by any node.
    assert_eq!(c.call(&["PING"]), Reply::Simple("PONG".into()));
    let fx = Fixture::start(Mode::Follower(None));
    let mut c = fx.client();
    assert_eq!(
        c.call(&["SET", "k", "v"]),
        err("TRYAGAIN no leader elected yet")
    );
}

#[test]
fn protocol_error_closes_only_that_connection() {
    let fx = Fixture::start(Mode::Store);
    let mut good = fx.client();
    assert_eq!(good.call(&["SET", "k", "v"]), ok());
    let mut bad = fx.client();
    // The requests before the garbage are answered first.
    bad.send_raw(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$x\r\n");
    assert_eq!(bad.read(), bulk("v"));
    assert_eq!(bad.read(), err("ERR Protocol error: invalid bulk length"));
    assert!(bad.is_closed());
    let mut big = fx.client();
    big.send_raw(format!("*1\r\n${}\r\n", (64 << 20) + 1).as_bytes());
    assert_eq!(
        big.read(),
        err("ERR Protocol error: bulk string too long (67108865 bytes, at most 67108864)")
    );
    assert!(big.is_closed());
    let mut long = fx.client();
    long.send_raw(&vec![b'a'; (64 << 10) + 10]);
    assert_eq!(
        long.read(),
        err("ERR Protocol error: too big inline request")
    );
    assert!(long.is_closed());
    assert_eq!(good.call(&["GET", "k"]), bulk("v"));
}

#[test]
fn closed_node_queue_and_shutdown() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let (handle, calls) = mpsc::channel::<KvCall>(8);
    drop(calls);
    let mut fx = Fixture::with_handle(rt, handle, Arc::default());
    let mut c = fx.client();
    assert_eq!(c.call(&["GET", "k"]), err("ERR node is shutting down"));
    assert_eq!(c.call(&["PING"]), Reply::Simple("PONG".into()));
    // Shutdown closes idle connections and makes `serve` return.
    fx.shut_down();
    assert!(c.is_closed());
    assert!(
        TcpStream::connect(fx.addr).is_err(),
        "the listener is closed"
    );
}

#[test]
fn large_values_round_trip() {
    let fx = Fixture::start(Mode::Store);
    let mut c = fx.client();
    let value = vec![b'z'; 8 << 20];
    c.send(&[b"SET", b"big", &value]);
    assert_eq!(c.read(), ok());
    c.send(&[b"GET", b"big"]);
    assert_eq!(c.read(), Reply::Bulk(value));
}

/// The bytes of a request whose last bulk is announced as `len` bytes but only
/// `sent` of them are there.
fn partial_set(key: &str, len: usize, sent: usize) -> Vec<u8> {
    let mut out = format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${len}\r\n", key.len()).into_bytes();
    out.resize(out.len() + sent, b'p');
    out
}

/// Reads what the server sends until it closes the connection (a reset counts as
/// closed: a server closing with unread bytes resets).
fn read_to_close(c: &mut Client) -> Vec<u8> {
    let mut got = std::mem::take(&mut c.input);
    let mut chunk = [0u8; 4096];
    loop {
        match c.stream.read(&mut chunk) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return got,
            Err(e) => panic!("the server did not close the connection: {e}"),
        }
    }
}

#[test]
fn a_request_is_capped_as_a_whole_not_only_per_bulk() {
    // The default limits (65 MiB a request): each bulk is under MAX_BULK_LEN,
    // together they are over the request limit, refused at the header that
    // crosses it, before its payload is sent.
    let fx = Fixture::start(Mode::Store);
    let bulk_len = 40 << 20;
    let mut c = fx.client();
    let mut req = b"*4\r\n$3\r\nCAS\r\n$1\r\nk\r\n".to_vec();
    req.extend_from_slice(format!("${bulk_len}\r\n").as_bytes());
    req.resize(req.len() + bulk_len, b'a');
    req.extend_from_slice(format!("\r\n${bulk_len}\r\n").as_bytes());
    c.stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    c.send_raw(&req);
    match c.read() {
        Reply::Error(e) => assert!(
            e.starts_with("ERR Protocol error: request too large"),
            "{e}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(c.is_closed());
    // A smaller limit set by the server applies as well, and a request under it
    // passes.
    const MIB: usize = 1 << 20;
    let fx = Fixture::start_with(Mode::Store, |s| s.with_limits(MIB, 64 * MIB));
    let mut c = fx.client();
    let mut req = b"*4\r\n$3\r\nCAS\r\n$1\r\nk\r\n".to_vec();
    req.extend_from_slice(format!("${}\r\n", 600 << 10).as_bytes());
    req.resize(req.len() + (600 << 10), b'a');
    req.extend_from_slice(format!("\r\n${}\r\n", 600 << 10).as_bytes());
    c.send_raw(&req);
    match c.read() {
        Reply::Error(e) => assert!(
            e.starts_with("ERR Protocol error: request too large"),
            "{e}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(c.is_closed());
    let mut ok_client = fx.client();
    let value = vec![b'v'; 900 << 10];
    ok_client.send(&[b"SET", b"k", &value]);
    assert_eq!(ok_client.read(), ok());
    assert_eq!(fx.stats.sets.load(Ordering::Relaxed), 1);
}

#[test]
fn unfinished_requests_of_all_connections_share_a_budget() {
    const MIB: usize = 1 << 20;
    let fx = Fixture::start_with(Mode::Store, |s| s.with_limits(4 * MIB, 4 * MIB));
    // Two clients hold 1.9 MB of unfinished requests each: within 4 MiB.
    let mut a = fx.client();
    a.send_raw(&partial_set("a", 2_000_000, 1_900_000));
    let mut b = fx.client();
    b.send_raw(&partial_set("b", 2_000_000, 1_900_000));
    std::thread::sleep(Duration::from_millis(300));
    // A third one's 600 KB do not fit: it is answered with an error (unless the
    // reset of its unread bytes overtakes it) and closed.
    let mut c = fx.client();
    c.stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let _ = c.stream.write_all(&partial_set("c", 2_000_000, 600_000));
    let got = read_to_close(&mut c);
    if !got.is_empty() {
        let text = String::from_utf8_lossy(&got);
        assert!(
            text.starts_with("-ERR max client buffers reached"),
            "{text}"
        );
    }
    // The others are untouched: they finish their requests.
    a.send_raw(&vec![b'p'; 100_000]);
    a.send_raw(b"\r\n");
    assert_eq!(a.read(), ok());
    b.send_raw(&vec![b'p'; 100_000]);
    b.send_raw(b"\r\n");
    assert_eq!(b.read(), ok());
    // And with their bytes given back, a new client's request of the same size
    // fits again (c's share was released when it was closed).
    let mut d = fx.client();
    d.send_raw(&partial_set("d", 2_000_000, 2_000_000));
    d.send_raw(b"\r\n");
    assert_eq!(d.read(), ok());
    let mut e = fx.client();
    e.send_raw(&partial_set("e", 2_000_000, 1_900_000));
    let mut f = fx.client();
    f.send_raw(&partial_set("f", 2_000_000, 1_900_000));
    std::thread::sleep(Duration::from_millis(300));
    drop(e);
    drop(f);
    // Dropped connections release their shares: two more fit.
    std::thread::sleep(Duration::from_millis(300));
    let mut g = fx.client();
    g.send_raw(&partial_set("g", 2_000_000, 2_000_000));
    g.send_raw(b"\r\n");
    let mut h = fx.client();
    h.send_raw(&partial_set("h", 2_000_000, 2_000_000));
    h.send_raw(b"\r\n");
    assert_eq!(g.read(), ok());
    assert_eq!(h.read(), ok());
    assert_eq!(fx.stats.sets.load(Ordering::Relaxed), 5);
}

fn password(pw: &str) -> Option<Secret> {
    Some(Secret::new(pw.as_bytes().to_vec()).expect("a password"))
}

#[test]
fn a_password_is_required_before_any_command() {
    let fx = Fixture::start_with(Mode::Store, |s| s.with_password(password("s3cret")));
    let noauth = || err("NOAUTH Authentication required.");
    let wrongpass = || err("WRONGPASS invalid username-password pair or user is disabled.");
    let mut c = fx.client();
    for cmd in [
        &["PING"][..],
        &["GET", "k"],
        &["SET", "k", "v"],
        &["DEL", "k"],
        &["CAS", "k", "a", "b"],
        &["INFO"],
        &["CONFIG", "GET", "*"],
        &["RAFT.TRANSFER-LEADER"],
        &["FROB"],
    ] {
        assert_eq!(c.call(cmd), noauth(), "{cmd:?}");
    }
    assert_eq!(
        fx.stats.sets.load(Ordering::Relaxed),
        0,
        "nothing reached the node"
    );
    assert_eq!(fx.stats.gets.load(Ordering::Relaxed), 0);
    assert_eq!(c.call(&["AUTH", "guess"]), wrongpass());
    assert_eq!(c.call(&["AUTH", "s3cret\n"]), wrongpass());
    assert_eq!(c.call(&["AUTH", "alice", "s3cret"]), wrongpass());
    assert_eq!(
        c.call(&["AUTH"]),
        err("ERR wrong number of arguments for 'auth' command")
    );
    assert_eq!(c.call(&["GET", "k"]), noauth(), "still not authenticated");
    assert_eq!(c.call(&["AUTH", "s3cret"]), ok());
    assert_eq!(c.call(&["SET", "k", "v"]), ok());
    assert_eq!(c.call(&["GET", "k"]), bulk("v"));
    // A wrong AUTH later does not log the connection out.
    assert_eq!(c.call(&["AUTH", "nope"]), wrongpass());
    assert_eq!(c.call(&["GET", "k"]), bulk("v"));

    // The two-word form, pipelined with the commands after it in one write.
    let mut p = fx.client();
    p.send_raw(b"*3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$6\r\ns3cret\r\nGET k\r\n");
    assert_eq!(p.read(), ok());
    assert_eq!(p.read(), bulk("v"));
    // A wrong one pipelined: the command after it is refused.
    let mut w = fx.client();
    w.send_raw(b"AUTH wrong\r\nGET k\r\nQUIT\r\n");
    assert_eq!(w.read(), wrongpass());
    assert_eq!(w.read(), noauth());
    assert_eq!(w.read(), ok());
    assert!(w.is_closed());

    // Before authenticating, requests are small: a large one is refused and closes
    // the connection; after AUTH the same request passes.
    let mut big = fx.client();
    big.send_raw(&partial_set("x", 100_000, 0));
    match big.read() {
        Reply::Error(e) => assert!(
            e.starts_with("ERR Protocol error: request too large"),
            "{e}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(big.is_closed());
    let mut big = fx.client();
    assert_eq!(big.call(&["AUTH", "s3cret"]), ok());
    let value = vec![b'x'; 100_000];
    big.send(&[b"SET", b"x", &value]);
    assert_eq!(big.read(), ok());
}

#[test]
fn auth_without_a_password_answers_as_redis_does() {
    let fx = Fixture::start(Mode::Store);
    let mut c = fx.client();
    match c.call(&["AUTH", "pw"]) {
        Reply::Error(e) => assert!(
            e.starts_with("ERR AUTH <password> called without any password configured"),
            "{e}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(c.call(&["AUTH", "default", "anything"]), ok());
    assert_eq!(
        c.call(&["AUTH", "alice", "pw"]),
        err("WRONGPASS invalid username-password pair or user is disabled.")
    );
    assert_eq!(c.call(&["SET", "k", "v"]), ok());
}

// ---------------------------------------------------------------------------------
// The real redis-cli and redis-benchmark.

/// The path of a `redis-tools` binary, or `None` (after saying so) if it is not
/// installed and `PMKIT_REQUIRE_REDIS_TOOLS=1` is not set.
fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var("PMKIT_REQUIRE_REDIS_TOOLS").as_deref() != Ok("1"),
            "{name} not found on PATH but PMKIT_REQUIRE_REDIS_TOOLS=1 (apt-get install redis-tools)"
        );
        eprintln!("{name} not found (apt-get install redis-tools): skipping");
    }
    found
}

/// Runs a tool to completion (killing it after 20 s), returning its output.
fn run(mut cmd: Command) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        stdout.read_to_end(&mut v).map(|_| v)
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        stderr.read_to_end(&mut v).map(|_| v)
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().expect("kill");
            panic!("{cmd:?} timed out");
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    Output {
        status,
        stdout: out.join().expect("stdout thread").expect("stdout"),
        stderr: err.join().expect("stderr thread").expect("stderr"),
    }
}

/// `redis-cli -p <port> args...`: its stdout, trimmed, after checking it succeeded.
fn cli(bin: &PathBuf, addr: SocketAddr, extra: &[&str], args: &[&str]) -> String {
    let mut cmd = Command::new(bin);
    cmd.args(["-h", "127.0.0.1", "-p", &addr.port().to_string()])
        .args(extra)
        .args(args);
    let out = run(cmd);
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "redis-cli {args:?}: {stdout} {stderr}"
    );
    stdout
}

#[test]
fn redis_cli_commands() {
    let Some(bin) = tool("redis-cli") else { return };
    let fx = Fixture::start(Mode::Store);
    let a = fx.addr;
    assert_eq!(cli(&bin, a, &[], &["PING"]), "PONG");
    assert_eq!(cli(&bin, a, &[], &["SET", "k", "a"]), "OK");
    assert_eq!(cli(&bin, a, &[], &["GET", "k"]), "a");
    assert_eq!(cli(&bin, a, &[], &["CAS", "k", "x", "b"]), "0");
    assert_eq!(cli(&bin, a, &[], &["CAS", "k", "a", "b"]), "1");
    assert_eq!(cli(&bin, a, &[], &["GET", "k"]), "b");
    assert_eq!(cli(&bin, a, &[], &["DEL", "k"]), "1");
    assert_eq!(cli(&bin, a, &[], &["DEL", "k"]), "0");
    assert_eq!(cli(&bin, a, &[], &["GET", "k"]), "");
    let info = cli(&bin, a, &[], &["INFO"]);
    assert!(info.contains("role:leader"), "{info}");
    let unknown = cli(&bin, a, &[], &["FROB", "x"]);
    assert!(unknown.contains("unknown command 'FROB'"), "{unknown}");
}

#[test]
fn redis_cli_authenticates_with_a() {
    let Some(bin) = tool("redis-cli") else { return };
    let fx = Fixture::start_with(Mode::Store, |s| s.with_password(password("tool-pw")));
    let a = fx.addr;
    let quiet = ["--no-auth-warning"];
    assert_eq!(
        cli(&bin, a, &["-a", "tool-pw", quiet[0]], &["SET", "k", "v"]),
        "OK"
    );
    assert_eq!(
        cli(
            &bin,
            a,
            &["--user", "default", "--pass", "tool-pw", quiet[0]],
            &["GET", "k"]
        ),
        "v"
    );
    let denied = cli(&bin, a, &[], &["GET", "k"]);
    assert!(denied.contains("NOAUTH"), "{denied}");
    let wrong = cli(&bin, a, &["-a", "nope", quiet[0]], &["GET", "k"]);
    assert!(
        wrong.contains("WRONGPASS") || wrong.contains("NOAUTH"),
        "{wrong}"
    );
}

#[test]
fn redis_cli_cluster_mode_follows_moved() {
    let Some(bin) = tool("redis-cli") else { return };
    let leader = Fixture::start(Mode::Store);
    let follower = Fixture::start(Mode::Follower(Some(leader.addr.to_string())));
    let out = cli(&bin, follower.addr, &["-c"], &["SET", "k", "moved"]);
    assert!(out.ends_with("OK"), "{out}");
    let out = cli(&bin, follower.addr, &["-c"], &["GET", "k"]);
    assert!(out.ends_with("moved"), "{out}");
    assert_eq!(leader.stats.sets.load(Ordering::Relaxed), 1);
    // Without -c the redirection is shown as the error it is.
    let out = cli(&bin, follower.addr, &[], &["GET", "k"]);
    assert_eq!(out, format!("MOVED 0 {}", leader.addr));
}

/// Runs `redis-benchmark` with `args` and checks it succeeded without errors,
/// returning its report.
fn benchmark(bin: &PathBuf, addr: SocketAddr, args: &[&str]) -> String {
    let mut cmd = Command::new(bin);
    cmd.args(["-h", "127.0.0.1", "-p", &addr.port().to_string()])
        .args(args);
    let out = run(cmd);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "redis-benchmark {args:?} failed: {stdout} {stderr}"
    );
    let report = format!("{stdout}{stderr}");
    for bad in ["Error", "ERR", "WARNING", "error"] {
        assert!(!report.contains(bad), "redis-benchmark {args:?}: {report}");
    }
    eprintln!("redis-benchmark {}:\n{}", args.join(" "), report.trim());
    report
}

/// The requests per second of each test in a `-q` report, by test name.
fn rates(report: &str) -> HashMap<String, f64> {
    report
        .split(['\r', '\n'])
        .filter_map(|line| {
            let (name, rest) = line.split_once(": ")?;
            let rate = rest.split_whitespace().next()?.parse().ok()?;
            rest.contains("requests per second")
                .then(|| (name.trim().to_owned(), rate))
        })
        .collect()
}

#[test]
fn redis_benchmark_set_get() {
    let Some(bin) = tool("redis-benchmark") else {
        return;
    };
    let fx = Fixture::start(Mode::Store);
    for extra in [&[][..], &["-P", "16"][..]] {
        let sets = fx.stats.sets.load(Ordering::Relaxed);
        let gets = fx.stats.gets.load(Ordering::Relaxed);
        let mut args = vec!["-t", "set,get", "-n", "2000", "-c", "10", "-q"];
        args.extend_from_slice(extra);
        let report = benchmark(&bin, fx.addr, &args);
        let rates = rates(&report);
        assert!(
            rates.contains_key("SET") && rates.contains_key("GET"),
            "{report}"
        );
        assert!(fx.stats.sets.load(Ordering::Relaxed) - sets >= 2000);
        assert!(fx.stats.gets.load(Ordering::Relaxed) - gets >= 2000);
    }
    // PING_INLINE and PING_MBULK: inline commands and local replies.
    let report = benchmark(
        &bin,
        fx.addr,
        &["-t", "ping", "-n", "2000", "-c", "10", "-q"],
    );
    let rates = rates(&report);
    assert!(
        rates.contains_key("PING_INLINE") && rates.contains_key("PING_MBULK"),
        "{report}"
    );
}
