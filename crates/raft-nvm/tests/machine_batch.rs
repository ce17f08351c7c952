//! Machine commands proposed in one round are applied as one batch, on a
//! single-voter replica (it leads alone, so a round's proposals are appended,
//! committed and answered in one process): each command sees the writes of the
//! commands before it in the batch, for a one-at-a-time [`StateMachine`] (the
//! default `apply_batch`) and for a [`TypedMachine`]; a command that does not
//! decode, and a write the replica refuses, change nothing and leave the rest
//! of the batch as it would be alone.

use std::sync::{Arc, Mutex};

use raft_nvm::machine::{
    decode, encode, Answer, Applied, BatchState, MachineCall, MachineReply, StateMachine,
    StateView, Typed, TypedMachine,
};
use raft_nvm::raft::{Config, Role};
use raft_nvm::replica::{Engine, FileStoreProvider, Output, Replica, ReplicaConfig, StartMode};
use raft_nvm::service::{KvReply, KvRequest};
use raft_nvm::{ListOptions, StoreError};
use serde::{Deserialize, Serialize};

/// A single-voter replica on a list store in `dir`, leading, running `machine`.
fn leader(dir: &std::path::Path, machine: Arc<dyn StateMachine>) -> Replica {
    let mut cfg = ReplicaConfig::new(
        Config::new(1, vec![1]),
        [(1, "127.0.0.1:7001".to_string())].into_iter().collect(),
    );
    cfg.machine = Some(machine);
    let engine = Engine::List {
        path: dir.join("node1.pool"),
        pool_size: 8 << 20,
        opts: ListOptions::default(),
    };
    let provider = FileStoreProvider::with_start(engine, StartMode::Bootstrap);
    let mut r = Replica::open(cfg, Box::new(provider)).expect("open");
    for _ in 0..1000 {
        r.tick();
        r.process(&mut Output::default()).expect("process");
        if r.core().role() == Role::Leader && r.core().commit_index() == r.core().last_index() {
            return r;
        }
    }
    panic!("no leader");
}

/// Submits every request, then processes until each is answered; the replies
/// in the requests' order.
fn round(r: &mut Replica, reqs: Vec<KvRequest>) -> Vec<KvReply> {
    let n = reqs.len();
    let mut replies: Vec<Option<KvReply>> = vec![None; n];
    for (token, req) in reqs.into_iter().enumerate() {
        if let Some(reply) = r.request(token as u64, req) {
            replies[token] = Some(reply);
        }
    }
    for _ in 0..100 {
        let mut out = Output::default();
        r.process(&mut out).expect("process");
        for (token, reply) in out.replies {
            replies[token as usize] = Some(reply);
        }
        if replies.iter().all(Option::is_some) {
            return replies.into_iter().flatten().collect();
        }
    }
    panic!("unanswered: {replies:?}");
}

/// `INCR key` one command at a time (the bytes are the key), counting calls.
#[derive(Debug, Default)]
struct Incr;

impl StateMachine for Incr {
    fn name(&self) -> &str {
        "incr"
    }
    fn parse(&self, _: &[Vec<u8>]) -> Option<Result<MachineCall, String>> {
        None
    }
    fn apply(&self, state: &StateView<'_>, key: &[u8]) -> Result<Applied, StoreError> {
        let now: i64 = state
            .get(key)?
            .and_then(|v| String::from_utf8(v).ok()?.parse().ok())
            .unwrap_or(0);
        Ok(Applied::put(
            key,
            (now + 1).to_string(),
            MachineReply::Integer(now + 1),
        ))
    }
    fn query(&self, _: &StateView<'_>, _: &[u8]) -> Result<MachineReply, StoreError> {
        Ok(MachineReply::Nil)
    }
}

fn incr(key: &str) -> KvRequest {
    KvRequest::Machine(MachineCall::Write(key.as_bytes().to_vec()))
}

#[test]
fn a_one_at_a_time_machine_sees_the_earlier_commands_of_its_batch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut r = leader(dir.path(), Arc::new(Incr));
    let keys = ["k", "j", "k", "k", "j", "k", "k"];
    let replies = round(&mut r, keys.iter().map(|k| incr(k)).collect());
    let want = [1, 1, 2, 3, 2, 4, 5].map(|n| KvReply::Machine(MachineReply::Integer(n)));
    assert_eq!(replies, want);
    let store = r.store();
    assert_eq!(
        store.get(b"k", store.last_index()).expect("get"),
        Some(b"5".to_vec())
    );
}

/// A typed machine's command: numbers, not strings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
enum Op {
    /// Adds `by` to counter `id`.
    Add { id: u32, by: i64 },
    /// Writes `value` under the raw `key` (to try a refused write).
    Raw { key: Vec<u8>, value: Vec<u8> },
    /// Writes `len` bytes to counter `id` (to try a write over the entry limit).
    Fill { id: u32, len: usize },
}

/// Counters `0..` as 8 little-endian bytes under `c/<id>`; records each batch's
/// size.
#[derive(Debug, Default)]
struct Counters {
    batches: Mutex<Vec<usize>>,
}

fn key(id: u32) -> Vec<u8> {
    format!("c/{id}").into_bytes()
}

fn count(bytes: Option<Vec<u8>>) -> i64 {
    bytes
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map_or(0, i64::from_le_bytes)
}

impl TypedMachine for Counters {
    type Command = Op;
    type Response = i64;
    type Query = u32;
    type Answer = i64;

    fn name(&self) -> &str {
        "counters"
    }

    fn apply(&self, state: &mut BatchState<'_>, batch: &[Op]) -> Result<Vec<i64>, StoreError> {
        if let Ok(mut b) = self.batches.lock() {
            b.push(batch.len());
        }
        let mut out = Vec::new();
        for (pos, op) in batch.iter().enumerate() {
            match op {
                Op::Add { id, by } => {
                    let next = count(state.get(&key(*id))?) + by;
                    state.put(pos, key(*id), next.to_le_bytes());
                    out.push(next);
                }
                Op::Raw { key, value } => {
                    state.put(pos, key.clone(), value.clone());
                    out.push(-1);
                }
                Op::Fill { id, len } => {
                    state.put(pos, key(*id), vec![1; *len]);
                    out.push(-1);
                }
            }
        }
        Ok(out)
    }

    fn query(&self, state: &StateView<'_>, id: &u32) -> Result<i64, StoreError> {
        Ok(count(state.get(&key(*id))?))
    }
}

fn write(op: &Op) -> KvRequest {
    KvRequest::Machine(MachineCall::Write(encode("command", op).expect("encode")))
}

/// The typed answer in `reply`.
fn answer(reply: &KvReply) -> Answer<i64> {
    match reply {
        KvReply::Machine(MachineReply::Bulk(b)) => decode("answer", b).expect("decode"),
        other => panic!("not a typed answer: {other:?}"),
    }
}

#[test]
fn a_typed_machine_applies_a_round_as_one_batch_in_log_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let machine = Arc::new(Typed::new(Counters::default()));
    let mut r = leader(dir.path(), machine.clone());
    let reqs = vec![
        write(&Op::Add { id: 7, by: 2 }),
        write(&Op::Add { id: 7, by: 3 }),
        // Not an `Op`: nothing happens, the batch goes on.
        KvRequest::Machine(MachineCall::Write(vec![0xff, 0xff, 0xff])),
        write(&Op::Add { id: 7, by: 1 }),
        // One of the cluster's own keys: refused.
        write(&Op::Raw {
            key: b"\x00raft-nvm/membership".to_vec(),
            value: 5i64.to_le_bytes().to_vec(),
        }),
        // Over the entry limit: refused, and not seen by the next command.
        write(&Op::Fill {
            id: 7,
            len: 1 << 20,
        }),
        write(&Op::Add { id: 7, by: 10 }),
        write(&Op::Add { id: 8, by: -4 }),
    ];
    let replies = round(&mut r, reqs);
    assert_eq!(answer(&replies[0]), Answer::Done(2));
    assert_eq!(answer(&replies[1]), Answer::Done(5));
    assert!(matches!(answer(&replies[2]), Answer::Undecodable(_)));
    assert_eq!(answer(&replies[3]), Answer::Done(6));
    assert!(
        matches!(&replies[4], KvReply::Machine(MachineReply::Error(e)) if e.contains("cluster's own keys")),
        "{:?}",
        replies[4]
    );
    assert!(
        matches!(&replies[5], KvReply::Machine(MachineReply::Error(e)) if e.contains("entry limit")),
        "{:?}",
        replies[5]
    );
    assert_eq!(answer(&replies[6]), Answer::Done(16));
    assert_eq!(answer(&replies[7]), Answer::Done(-4));
    // The decodable runs around the undecodable command: 2 then 5 commands, one
    // call each (the round was one batch of 8 entries).
    let batches = machine.machine().batches.lock().map(|b| b.clone());
    assert_eq!(batches.expect("lock"), vec![2, 5]);
    // A typed read at the applied index.
    let query = encode("query", &7u32).expect("encode");
    let replies = round(&mut r, vec![KvRequest::Machine(MachineCall::Read(query))]);
    assert_eq!(answer(&replies[0]), Answer::Done(16));
    let store = r.store();
    assert_eq!(
        count(store.get(&key(7), store.last_index()).expect("get")),
        16
    );
}
