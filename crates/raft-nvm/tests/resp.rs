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

use raft_nvm::resp::{decode_reply, encode_command, serve, Reply};
use raft_nvm::service::{KvCall, KvHandle, KvReply, KvRequest};
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
    let mut seed = 0x1234_5678_9abc_def1_u64;
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
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let delay = Duration::from_micros(seed % 2000);
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
