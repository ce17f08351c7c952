//! A corrupt, missing or foreign store is refused, never half-opened.
//!
//! Each case builds a store through a real node (one member, or three), has it
//! acknowledge 99 keys, stops it cleanly, damages the store as an operator or a
//! disk might, and restarts the node without `--bootstrap`
//! ([`StartMode::Existing`]). The start must fail with a one-line error that says
//! what is wrong, and leave every file in the data directory byte for byte as the
//! damage left it (a refused start writes nothing). Both engines, the persistent
//! list and the WAL baseline, go through every case that applies to them. The
//! undamaged store restarts with all 99 keys, so the refusals are the damage's.
//!
//! Starts run on a thread of their own with a deadline, so a start that hangs (a
//! FIFO opened for reading blocks until a writer appears) fails the test rather
//! than hang it.
#![cfg(feature = "server")]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use raft_nvm::node::{Member, Node, NodeConfig, NodeError};
use raft_nvm::replica::{Engine, StartMode};
use raft_nvm::service::{KvReply, KvRequest};
use raft_nvm::{HardState, ListOptions, WalOptions};

/// Keys every store acknowledged before it was damaged.
const KEYS: usize = 99;

/// The key and value of the `i`th write.
fn kv(i: usize) -> (Vec<u8>, Vec<u8>) {
    (
        format!("key-{i:03}").into_bytes(),
        format!("value-{i:03}-acknowledged").into_bytes(),
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    List,
    Wal,
}

const KINDS: [Kind; 2] = [Kind::List, Kind::Wal];

fn engine(kind: Kind, dir: &Path, id: u16) -> Engine {
    match kind {
        Kind::List => Engine::List {
            path: dir.join(format!("node{id}.pool")),
            pool_size: 4 << 20,
            opts: ListOptions::default(),
        },
        Kind::Wal => Engine::Wal {
            dir: dir.join(format!("node{id}.wal")),
            opts: WalOptions::default(),
        },
    }
}

#[path = "loopback/port.rs"]
mod port;
use port::free_port;

/// Members `1..=n` on loopback, on free ports (port 0 for a lone member).
fn members(n: u16) -> BTreeMap<u16, Member> {
    (1..=n)
        .map(|id| {
            let port = |p| -> SocketAddr { format!("127.0.0.1:{p}").parse().expect("address") };
            let (raft, client) = if n == 1 {
                (port(0), port(0))
            } else {
                (port(free_port()), port(free_port()))
            };
            (id, Member { raft, client })
        })
        .collect()
}

fn config(
    kind: Kind,
    dir: &Path,
    id: u16,
    members: &BTreeMap<u16, Member>,
    start: StartMode,
) -> NodeConfig {
    let mut cfg = NodeConfig::new(id, members.clone(), engine(kind, dir, id));
    cfg.start = start;
    cfg
}

/// Sets the [`KEYS`] keys through whichever of `nodes` leads, each acknowledged.
fn write_keys(rt: &tokio::runtime::Runtime, nodes: &[Node]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    for i in 0..KEYS {
        let (key, value) = kv(i);
        'retry: loop {
            for node in nodes {
                let req = KvRequest::Set {
                    key: key.clone(),
                    value: value.clone(),
                };
                match rt.block_on(node.call(req)) {
                    KvReply::Done => break 'retry,
                    KvReply::NotLeader { .. } | KvReply::Unavailable(_) => {}
                    other => panic!("SET {i}: {other:?}"),
                }
            }
            assert!(Instant::now() < deadline, "no leader took SET {i}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A data directory holding node 1's store of [`KEYS`] acknowledged keys,
/// stopped cleanly: a one-member cluster, or (`three`) node 1 of three.
fn acknowledged_store(kind: Kind, three: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    let n = if three { 3 } else { 1 };
    let nodes = bootstrap_all(&rt, kind, dir.path(), n);
    write_keys(&rt, &nodes);
    if three {
        // Node 1 holds every acknowledged key before it stops (a follower may
        // acknowledge later than the majority that committed them).
        let deadline = Instant::now() + Duration::from_secs(20);
        while !has_applied(&rt, &nodes[0]) {
            assert!(Instant::now() < deadline, "node 1 did not catch up");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    for node in nodes {
        rt.block_on(node.shutdown()).expect("clean stop");
    }
    dir
}

/// Starts members `1..=n` (bootstrapping) in `dir` on fresh loopback ports. A port
/// picked free can be taken by another test before its node binds it: a start
/// that finds its port taken stops what it started, empties `dir` and starts
/// again on new ports (a few times).
fn bootstrap_all(rt: &tokio::runtime::Runtime, kind: Kind, dir: &Path, n: u16) -> Vec<Node> {
    const ATTEMPTS: usize = 5;
    for attempt in 1..=ATTEMPTS {
        let members = members(n);
        let mut nodes = Vec::new();
        let mut taken = false;
        for id in 1..=n {
            let cfg = config(kind, dir, id, &members, StartMode::Bootstrap);
            match rt.block_on(Node::start(cfg)) {
                Ok(node) => nodes.push(node),
                Err(e) if port_taken(&e) && attempt < ATTEMPTS => {
                    taken = true;
                    break;
                }
                Err(e) => panic!("bootstrap: {e}"),
            }
        }
        if !taken {
            return nodes;
        }
        for node in nodes {
            rt.block_on(node.shutdown()).expect("clean stop");
        }
        for e in std::fs::read_dir(dir).expect("read dir") {
            let p = e.expect("dir entry").path();
            if p.is_dir() {
                std::fs::remove_dir_all(&p).expect("remove a partial start's dir");
            } else {
                std::fs::remove_file(&p).expect("remove a partial start's file");
            }
        }
    }
    unreachable!("the last attempt returns or panics")
}

/// Whether a start failed because one of its addresses was taken.
fn port_taken(e: &NodeError) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::AddrInUse)
        {
            return true;
        }
        cur = err.source();
    }
    false
}

/// Whether `node`'s INFO shows an applied index covering every write (a write per
/// key, after the leader's no-op).
fn has_applied(rt: &tokio::runtime::Runtime, node: &Node) -> bool {
    let KvReply::Info(info) = rt.block_on(node.call(KvRequest::Info)) else {
        return false;
    };
    info.lines()
        .find_map(|l| l.strip_prefix("applied_index:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .is_some_and(|applied| applied > KEYS)
}

/// Every file under `dir`: its contents, or its kind for what is not a regular
/// file (never opened: a FIFO would block).
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("read dir") {
            let p = e.expect("dir entry").path();
            let meta = std::fs::symlink_metadata(&p).expect("metadata");
            if meta.is_dir() {
                todo.push(p.clone());
                out.insert(p, b"<directory>".to_vec());
            } else if meta.is_file() {
                out.insert(p.clone(), std::fs::read(&p).expect("read"));
            } else {
                out.insert(p, format!("<{:?}>", meta.file_type()).into_bytes());
            }
        }
    }
    out
}

/// Replaces every file under `dir` by `saved` (the pristine store).
fn restore(dir: &Path, saved: &BTreeMap<PathBuf, Vec<u8>>) {
    for e in std::fs::read_dir(dir).expect("read dir") {
        let p = e.expect("dir entry").path();
        if std::fs::symlink_metadata(&p).expect("metadata").is_dir() {
            std::fs::remove_dir_all(&p).expect("remove dir");
        } else {
            std::fs::remove_file(&p).expect("remove");
        }
    }
    for (p, bytes) in saved {
        if bytes == b"<directory>" {
            std::fs::create_dir_all(p).expect("mkdir");
        }
    }
    for (p, bytes) in saved {
        if bytes != b"<directory>" {
            std::fs::write(p, bytes).expect("write");
        }
    }
}

/// Starts `cfg` on a thread of its own; the start's outcome, or `None` if it did
/// not end within ten seconds (it hangs). A node that started is stopped.
fn start(cfg: NodeConfig) -> Option<Result<(), NodeError>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = runtime();
        let started = rt.block_on(Node::start(cfg));
        let outcome = match started {
            Ok(node) => {
                let _ = rt.block_on(node.shutdown());
                Ok(())
            }
            Err(e) => Err(e),
        };
        let _ = tx.send(outcome);
    });
    rx.recv_timeout(Duration::from_secs(10)).ok()
}

/// Restarts node `id` (of `members`) over the damaged store in `dir` and checks it
/// is refused with an error containing `expect`, on one line, and that no file
/// changed.
fn refused(
    kind: Kind,
    dir: &Path,
    id: u16,
    members: &BTreeMap<u16, Member>,
    case: &str,
    expect: &str,
) {
    let before = files(dir);
    let cfg = config(kind, dir, id, members, StartMode::Existing);
    let msg = match start(cfg) {
        None => panic!("{kind:?}, {case}: the start hangs"),
        Some(Ok(())) => panic!("{kind:?}, {case}: the node started on a damaged store"),
        Some(Err(e)) => e.to_string(),
    };
    assert!(
        msg.contains(expect),
        "{kind:?}, {case}: the error should say {expect:?}: {msg}"
    );
    assert!(!msg.contains('\n'), "{kind:?}, {case}: not one line: {msg}");
    let after = files(dir);
    assert!(
        before == after,
        "{kind:?}, {case}: a refused start changed the files: {:?}",
        after
            .iter()
            .filter(|(p, b)| before.get(*p) != Some(b))
            .map(|(p, _)| p)
            .chain(before.keys().filter(|p| !after.contains_key(*p)))
            .collect::<Vec<_>>()
    );
}

/// The store's main file: the list's pool, the WAL's log.
fn main_file(kind: Kind, dir: &Path) -> PathBuf {
    match kind {
        Kind::List => dir.join("node1.pool"),
        Kind::Wal => {
            let wal = dir.join("node1.wal");
            std::fs::read_dir(&wal)
                .expect("wal dir")
                .map(|e| e.expect("entry").path())
                .find(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("wal-") && n.ends_with(".log"))
                })
                .expect("a log file")
        }
    }
}

/// Flips a byte of the last acknowledged value in the store's main file.
fn flip_last_value(kind: Kind, dir: &Path) {
    let path = main_file(kind, dir);
    let mut bytes = std::fs::read(&path).expect("read");
    let (_, value) = kv(KEYS - 1);
    let at = bytes
        .windows(value.len())
        .rposition(|w| w == value)
        .expect("the last value is in the file");
    bytes[at + 2] ^= 0x01;
    std::fs::write(&path, bytes).expect("write");
}

/// Replaces `path` by a FIFO.
fn fifo(path: &Path) {
    if path.exists() {
        std::fs::remove_file(path).expect("remove");
    }
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// Rewrites node 1's hard state as `hs`, with a valid checksum: in the list's
/// control block (the word and its `hard_check`), in the WAL's `hardstate` file.
fn write_hard_state(kind: Kind, dir: &Path, word: u64) {
    match kind {
        Kind::List => {
            let path = dir.join("node1.pool");
            let mut bytes = std::fs::read(&path).expect("read");
            let cb = control_block(&bytes);
            let old = u64::from_le_bytes(bytes[cb + 56..cb + 64].try_into().expect("8 bytes"));
            let crc = |w: u64| u64::from(crc32c::crc32c(&w.to_le_bytes()));
            bytes[cb + 56..cb + 64].copy_from_slice(&word.to_le_bytes());
            bytes[cb + 72..cb + 80].copy_from_slice(&(crc(old) << 32 | crc(word)).to_le_bytes());
            std::fs::write(&path, bytes).expect("write");
        }
        Kind::Wal => {
            let mut bytes = b"RAFTHRD2".to_vec();
            bytes.extend_from_slice(&word.to_le_bytes());
            let crc = u64::from(crc32c::crc32c(&bytes));
            bytes.extend_from_slice(&crc.to_le_bytes());
            std::fs::write(dir.join("node1.wal").join("hardstate"), bytes).expect("write");
        }
    }
}

/// The undamaged store restarts with every acknowledged key.
fn restarts_whole(kind: Kind, dir: &Path, members: &BTreeMap<u16, Member>) {
    let rt = runtime();
    let cfg = config(kind, dir, 1, members, StartMode::Existing);
    let node = rt
        .block_on(Node::start(cfg))
        .expect("the undamaged store restarts");
    let deadline = Instant::now() + Duration::from_secs(20);
    for i in 0..KEYS {
        let (key, value) = kv(i);
        loop {
            match rt.block_on(node.call(KvRequest::Get { key: key.clone() })) {
                KvReply::Value(v) => {
                    assert_eq!(v, Some(value), "{kind:?}: key {i}");
                    break;
                }
                other => {
                    assert!(Instant::now() < deadline, "{kind:?}: GET {i}: {other:?}");
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
    rt.block_on(node.shutdown()).expect("clean stop");
}

/// For each engine: a clean one-member store, `damage` done to it, and the
/// restart refused with an error saying `expect` (per engine), nothing written;
/// then the undamaged store restarts whole.
fn one_node_case(case: &str, damage: impl Fn(Kind, &Path), expect: impl Fn(Kind) -> &'static str) {
    for kind in KINDS {
        let store = acknowledged_store(kind, false);
        let dir = store.path();
        let pristine = files(dir);
        let one = members(1);
        damage(kind, dir);
        refused(kind, dir, 1, &one, case, expect(kind));
        restore(dir, &pristine);
        restarts_whole(kind, dir, &one);
    }
}

/// The list's control block in the pool file `bytes`.
fn control_block(bytes: &[u8]) -> usize {
    (0..bytes.len())
        .step_by(64)
        .find(|&at| bytes[at..].starts_with(b"RAFTLIST"))
        .expect("the control block")
}

/// The store's main file deleted, the rest of the node's files left: for the list
/// that is no store at all; for the WAL, a hard state without its log, which
/// must not start empty.
#[test]
fn a_deleted_store_file_is_refused() {
    one_node_case(
        "store file deleted",
        |kind, dir| std::fs::remove_file(main_file(kind, dir)).expect("remove"),
        |kind| match kind {
            Kind::List => "no store at",
            Kind::Wal => "missing",
        },
    );
}

/// One flipped byte in the last acknowledged record: below the durable end a
/// clean stop recorded, so it is damage, not a torn tail.
#[test]
fn a_flipped_byte_in_the_last_record_is_refused() {
    one_node_case("last record flipped", flip_last_value, |kind| match kind {
        Kind::List => "checksum",
        Kind::Wal => "below the",
    });
}

/// The WAL cut in the middle, below its synced end.
#[test]
fn a_log_cut_in_the_middle_is_refused() {
    let kind = Kind::Wal;
    let store = acknowledged_store(kind, false);
    let dir = store.path();
    let pristine = files(dir);
    let one = members(1);
    cut_in_half(&main_file(kind, dir));
    refused(kind, dir, 1, &one, "log cut in half", "truncated");
    restore(dir, &pristine);
    restarts_whole(kind, dir, &one);
}

/// Truncates `path` to half its length.
fn cut_in_half(path: &Path) {
    let len = std::fs::metadata(path).expect("metadata").len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open");
    file.set_len(len / 2).expect("truncate");
}

/// Node 1's files started as node 2's: refused, whatever the mode.
#[test]
fn another_nodes_store_is_refused() {
    for kind in KINDS {
        let store = acknowledged_store(kind, false);
        let dir = store.path();
        let one = members(1);
        let two: BTreeMap<u16, Member> = one.values().map(|m| (2, *m)).collect();
        for mode in [StartMode::Existing, StartMode::Bootstrap, StartMode::Join] {
            let mut cfg = config(kind, dir, 2, &two, mode);
            cfg.engine = engine(kind, dir, 1);
            let before = files(dir);
            match start(cfg) {
                Some(Err(e)) => {
                    let msg = e.to_string();
                    assert!(
                        msg.contains("belongs to node 1"),
                        "{kind:?} {mode:?}: {msg}"
                    )
                }
                other => panic!("{kind:?} {mode:?}: node 2 on node 1's store: {other:?}"),
            }
            assert!(
                before == files(dir),
                "{kind:?} {mode:?}: node 2's start wrote"
            );
        }
        restarts_whole(kind, dir, &one);
    }
}

/// A hard state of term 0 below a log of term 1: refused by the Raft core, after
/// recovery, and still nothing written (a list open writes its epoch, a WAL open
/// cuts its tail: both only once the core accepted the store).
#[test]
fn a_refused_start_writes_nothing() {
    one_node_case(
        "term 0",
        |kind, dir| write_hard_state(kind, dir, 0),
        |_| "below the last entry's term",
    );
}

/// A term the next election cannot count past: refused at open, rather than a
/// node that dies at its first election on every restart.
#[test]
fn an_implausible_term_is_refused() {
    let word = HardState {
        term: HardState::MAX_TERM,
        vote: Some(1),
    }
    .pack()
    .expect("packs");
    one_node_case(
        "term 2^48-1",
        |kind, dir| write_hard_state(kind, dir, word),
        |_| "implausible hard state",
    );
}

/// A WAL whose snapshot starts the log at an index near `u64::MAX` (as a damaged
/// or forged snapshot file would): refused at open, before any index arithmetic.
#[test]
fn an_implausible_log_index_is_refused() {
    let kind = Kind::Wal;
    let store = acknowledged_store(kind, false);
    let dir = store.path();
    let wal = dir.join("node1.wal");
    std::fs::remove_dir_all(&wal).expect("remove");
    let s = raft_nvm::WalStore::open(&wal, &WalOptions::default()).expect("open");
    let meta = raft_nvm::SnapshotMeta {
        index: u64::MAX - 1,
        term: 1,
    };
    raft_nvm::Store::install_snapshot(&s, meta, &mut std::iter::empty()).expect("install");
    raft_nvm::Store::set_hard_state(
        &s,
        HardState {
            term: 1,
            vote: None,
        },
    )
    .expect("hard state");
    drop(s);
    refused(
        kind,
        dir,
        1,
        &members(1),
        "index u64::MAX - 1",
        "implausible log",
    );
}

/// A flipped bit in the hard state: its checksum fails.
#[test]
fn a_damaged_hard_state_is_refused() {
    one_node_case(
        "hard state flipped",
        |kind, dir| match kind {
            Kind::Wal => {
                let path = dir.join("node1.wal").join("hardstate");
                let mut bytes = std::fs::read(&path).expect("read");
                bytes[9] ^= 0x04;
                std::fs::write(&path, bytes).expect("write");
            }
            Kind::List => {
                let path = dir.join("node1.pool");
                let mut bytes = std::fs::read(&path).expect("read");
                let cb = control_block(&bytes);
                bytes[cb + 57] ^= 0x04;
                std::fs::write(&path, bytes).expect("write");
            }
        },
        |_| "checksum",
    );
}

/// A garbage join marker: refused, rather than a node that never elects.
#[test]
fn a_garbage_join_marker_is_refused() {
    one_node_case(
        "garbage join marker",
        |kind, dir| {
            let marker = match kind {
                Kind::List => dir.join("node1.pool.joining"),
                Kind::Wal => dir.join("node1.wal.joining"),
            };
            std::fs::write(marker, b"\x00garbage\xff").expect("write");
        },
        |_| "not a join marker",
    );
}

/// A join marker (as a join writes it, or empty as the first ones were) on a
/// one-member cluster: its only voter has no leader to catch up with, so the
/// marker is dropped with a warning and the node elects itself, rather than wait
/// for ever.
#[test]
fn a_join_marker_on_the_only_voter_does_not_wedge_it() {
    for kind in KINDS {
        let store = acknowledged_store(kind, false);
        let dir = store.path();
        let marker = match kind {
            Kind::List => dir.join("node1.pool.joining"),
            Kind::Wal => dir.join("node1.wal.joining"),
        };
        std::fs::write(&marker, b"").expect("write");
        restarts_whole(kind, dir, &members(1));
        assert!(!marker.exists(), "{kind:?}: the marker is gone");
    }
}

/// A store from before the node id file and the hard state's checksum (the list's
/// `hard_check` word zero, the WAL's `RAFTHRD1` file) opens, adopts the node id,
/// and its hard state is checksummed from its next update (the election).
#[test]
fn a_store_from_before_the_checks_opens_and_adopts_them() {
    for kind in KINDS {
        let store = acknowledged_store(kind, false);
        let dir = store.path();
        let (node_file, hard_file) = match kind {
            Kind::List => (dir.join("node1.pool.node"), dir.join("node1.pool")),
            Kind::Wal => (
                dir.join("node1.wal.node"),
                dir.join("node1.wal").join("hardstate"),
            ),
        };
        std::fs::remove_file(&node_file).expect("remove the node file");
        let mut bytes = std::fs::read(&hard_file).expect("read");
        match kind {
            Kind::List => {
                let cb = control_block(&bytes);
                bytes[cb + 72..cb + 80].fill(0);
            }
            Kind::Wal => {
                bytes[..8].copy_from_slice(b"RAFTHRD1");
                bytes.truncate(16);
            }
        }
        std::fs::write(&hard_file, &bytes).expect("write");
        restarts_whole(kind, dir, &members(1));
        assert_eq!(
            std::fs::read(&node_file).expect("the node id is recorded"),
            b"raft-nvm node 1\n"
        );
        let bytes = std::fs::read(&hard_file).expect("read");
        match kind {
            Kind::List => {
                let cb = control_block(&bytes);
                assert_ne!(&bytes[cb + 72..cb + 80], &[0; 8], "a hard_check");
            }
            Kind::Wal => assert!(bytes.starts_with(b"RAFTHRD2"), "the new format"),
        }
    }
}

/// A FIFO in place of each file the node opens: refused before it is opened,
/// never a hang.
#[test]
fn a_fifo_in_place_of_any_file_is_refused() {
    for kind in KINDS {
        let store = acknowledged_store(kind, false);
        let dir = store.path();
        let pristine = files(dir);
        let one = members(1);
        let store_name = match kind {
            Kind::List => "node1.pool",
            Kind::Wal => "node1.wal",
        };
        let mut targets = vec![
            dir.join(format!("{store_name}.cluster")),
            dir.join(format!("{store_name}.node")),
            dir.join(format!("{store_name}.joining")),
            main_file(kind, dir),
        ];
        if kind == Kind::Wal {
            targets.push(dir.join("node1.wal").join("hardstate"));
            targets.push(dir.join("node1.wal").join("synced"));
        }
        for target in targets {
            fifo(&target);
            let case = format!("FIFO at {}", target.display());
            refused(kind, dir, 1, &one, &case, "FIFO");
            restore(dir, &pristine);
        }
        restarts_whole(kind, dir, &one);
    }
}

/// A member of three whose last records were damaged, or whose log was cut,
/// does not rejoin with a shorter log than it acknowledged: it refuses to start
/// (an operator who accepts the loss restarts it with `--join` over a fresh
/// data directory).
#[test]
fn a_member_of_three_with_damaged_last_records_refuses_to_rejoin() {
    for kind in KINDS {
        let store = acknowledged_store(kind, true);
        let dir = store.path();
        let pristine = files(dir);
        let three = members(3);
        flip_last_value(kind, dir);
        let expect = match kind {
            Kind::List => "checksum",
            Kind::Wal => "below the",
        };
        refused(kind, dir, 1, &three, "last record flipped", expect);
        if kind == Kind::Wal {
            restore(dir, &pristine);
            cut_in_half(&main_file(kind, dir));
            refused(kind, dir, 1, &three, "log cut in half", "truncated");
        }
    }
}

/// The bootstrap helper's retry recognises a start whose port another process or
/// test took between its pick and its bind (the race that made this file flaky).
#[test]
fn a_start_on_a_taken_port_is_recognised() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    let held = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let mut members = members(3);
    if let Some(m) = members.get_mut(&1) {
        m.client = held.local_addr().expect("address");
    }
    let cfg = config(Kind::List, dir.path(), 1, &members, StartMode::Bootstrap);
    match rt.block_on(Node::start(cfg)) {
        Ok(_) => panic!("a node started on a taken port"),
        Err(e) => assert!(port_taken(&e), "not recognised as a taken port: {e}"),
    }
}
