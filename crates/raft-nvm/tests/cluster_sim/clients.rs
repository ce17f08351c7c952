//! Simulated clients and the history they leave for the linearizability checker.
//!
//! Each client has at most one request outstanding. It sends to the node it believes
//! leads, follows `NotLeader` redirections (the reply names the leader's client
//! address; the client maps it back to a node id), and gives up after a timeout.
//! Values are unique (`<client>.<seq>`), so a read pins down the write it saw;
//! compare-and-set expects a value someone wrote recently, the client's last read,
//! or absence.
//!
//! Replies become the checker's outcomes:
//!
//! | request | reply | history |
//! | --- | --- | --- |
//! | any | `NotLeader`, node down | not executed: left out |
//! | any | `Rejected` | not executed, but requests are small: a failure |
//! | GET | `Value(v)` | `Get -> Value(v)` |
//! | GET | `Unavailable`, timeout | did not happen / says nothing: left out |
//! | SET | `Done` | `Set -> Ok` |
//! | CAS | `Swapped(b)` | `Cas -> Swapped(b)` |
//! | DEL | `Deleted(true)` | `Delete -> Ok` |
//! | DEL | `Deleted(false)` | `Get -> Value(None)`: deleting an absent key changes nothing and saw it absent |
//! | SET, CAS, DEL | `Unavailable`, timeout | `Unknown`, never completed (it may still commit) |

use std::collections::{BTreeMap, BTreeSet};

use raft_nvm::linearizability::{Call, Op, Outcome};
use raft_nvm::machine::{KvMachine, MachineReply};
use raft_nvm::service::{KvReply, KvRequest};

use super::events::{record, Ev};
use super::rng::Rng;

/// Client counts and timing.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// How many clients.
    pub clients: u64,
    /// The keys they use.
    pub keys: Vec<Vec<u8>>,
    /// Steps before a client gives up on a request.
    pub timeout: u64,
    /// The most steps a client waits between requests.
    pub think: u64,
}

/// What a client is waiting for.
#[derive(Clone, Debug)]
struct Pending {
    token: u64,
    node: u16,
    invoke: u64,
    deadline: u64,
    key: Vec<u8>,
    req: KvRequest,
}

#[derive(Clone, Debug)]
struct Client {
    id: u64,
    guess: u16,
    next_at: u64,
    pending: Option<Pending>,
    seq: u64,
    last_read: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// A final reader: reads this key until it gets an answer, then stops.
    script: Option<Vec<u8>>,
}

/// Counts for the run's summary.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClientStats {
    pub ok: u64,
    pub unknown: u64,
    pub redirected: u64,
    pub reads_failed: u64,
    /// Writes refused with `OutOfMemory` (the store full; not executed).
    pub oom: u64,
    /// Requests answered through the generic state machine path ([`KvMachine`]).
    pub via_machine: u64,
}

/// The clients of a run and their history.
pub struct Clients {
    cfg: ClientConfig,
    nodes: Vec<u16>,
    clients: Vec<Client>,
    /// Recent values written (or attempted) per key.
    written: BTreeMap<Vec<u8>, Vec<Vec<u8>>>,
    /// The history so far.
    pub history: Vec<Call>,
    live: BTreeMap<u64, usize>,
    late: BTreeSet<u64>,
    answered: BTreeSet<u64>,
    next_token: u64,
    addrs: BTreeMap<String, u16>,
    /// Whether clients start new requests.
    pub issuing: bool,
    /// Counts.
    pub stats: ClientStats,
}

impl Clients {
    /// The clients of a cluster of `nodes` whose client addresses are `addrs`.
    pub fn new(cfg: ClientConfig, nodes: Vec<u16>, addrs: &BTreeMap<u16, String>) -> Clients {
        let clients = (1..=cfg.clients)
            .map(|id| Client {
                id,
                guess: nodes[(id as usize) % nodes.len()],
                next_at: id,
                pending: None,
                seq: 0,
                last_read: BTreeMap::new(),
                script: None,
            })
            .collect();
        Clients {
            cfg,
            nodes,
            clients,
            written: BTreeMap::new(),
            history: Vec::new(),
            live: BTreeMap::new(),
            late: BTreeSet::new(),
            answered: BTreeSet::new(),
            next_token: 1,
            addrs: addrs.iter().map(|(&id, a)| (a.clone(), id)).collect(),
            issuing: true,
            stats: ClientStats::default(),
        }
    }

    /// Adds one final reader per key (after settling, to pin down the final state).
    pub fn final_reads(&mut self, now: u64, leader: u16) {
        for key in self.cfg.keys.clone() {
            let id = 1000 + self.clients.len() as u64;
            self.clients.push(Client {
                id,
                guess: leader,
                next_at: now,
                pending: None,
                seq: 0,
                last_read: BTreeMap::new(),
                script: Some(key),
            });
        }
    }

    /// Whether no request is outstanding and no final reader is left.
    pub fn idle(&self) -> bool {
        self.clients
            .iter()
            .all(|c| c.pending.is_none() && c.script.is_none())
    }

    fn request(&mut self, c: usize, rng: &mut Rng) -> (Vec<u8>, KvRequest) {
        let client = &mut self.clients[c];
        if let Some(key) = &client.script {
            return (key.clone(), KvRequest::Get { key: key.clone() });
        }
        client.seq += 1;
        let key = self.cfg.keys[rng.below(self.cfg.keys.len() as u64) as usize].clone();
        let value = format!("{}.{}", client.id, client.seq).into_bytes();
        let req = match rng.below(100) {
            0..=34 => KvRequest::Get { key: key.clone() },
            35..=59 => KvRequest::Set {
                key: key.clone(),
                value,
            },
            60..=86 => {
                let recent = self.written.get(&key).map_or(&[][..], Vec::as_slice);
                let expected = match rng.below(10) {
                    0..=2 => None,
                    3..=5 => client.last_read.get(&key).cloned().flatten(),
                    _ if recent.is_empty() => None,
                    _ => Some(recent[rng.below(recent.len() as u64) as usize].clone()),
                };
                KvRequest::Cas {
                    key: key.clone(),
                    expected,
                    new: value,
                }
            }
            _ => KvRequest::Delete { key: key.clone() },
        };
        if let KvRequest::Set { value, .. } | KvRequest::Cas { new: value, .. } = &req {
            let w = self.written.entry(key.clone()).or_default();
            w.push(value.clone());
            if w.len() > 4 {
                w.remove(0);
            }
        }
        (key, req)
    }

    /// The requests clients send at `now`: `(node, token, request)`.
    pub fn send(&mut self, now: u64, rng: &mut Rng) -> Vec<(u16, u64, KvRequest)> {
        let mut out = Vec::new();
        for c in 0..self.clients.len() {
            let cl = &self.clients[c];
            if cl.pending.is_some() || cl.next_at > now || (!self.issuing && cl.script.is_none()) {
                continue;
            }
            let (key, req) = self.request(c, rng);
            let token = self.next_token;
            self.next_token += 1;
            let cl = &mut self.clients[c];
            cl.pending = Some(Pending {
                token,
                node: cl.guess,
                invoke: now,
                deadline: now + self.cfg.timeout,
                key,
                req: req.clone(),
            });
            self.live.insert(token, c);
            record(
                now,
                Ev::Invoke {
                    client: cl.id,
                    node: cl.guess,
                    req: req.clone(),
                },
            );
            // Every third request goes through the generic state machine path
            // (the same commands as `KvMachine` calls; every node runs it), chosen
            // by token so the schedule does not change. Its reply is mapped back.
            let req = match (token % 3, KvMachine::call(&req)) {
                (0, Some(call)) => KvRequest::Machine(call),
                _ => req,
            };
            out.push((cl.guess, token, req));
        }
        out
    }

    fn other_node(&self, rng: &mut Rng, not: u16) -> u16 {
        let others: Vec<u16> = self.nodes.iter().copied().filter(|&n| n != not).collect();
        if others.is_empty() {
            not
        } else {
            rng.pick(&others)
        }
    }

    /// Ends client `c`'s request with `outcome` (`None`: leave it out).
    fn finish(&mut self, c: usize, entry: Option<(Op, Outcome, Option<u64>)>) {
        let cl = &mut self.clients[c];
        let Some(p) = cl.pending.take() else { return };
        self.live.remove(&p.token);
        if let Some((op, outcome, complete)) = entry {
            if let (Op::Get, Outcome::Value(v)) = (&op, &outcome) {
                cl.last_read.insert(p.key.clone(), v.clone());
                if cl.script.is_some() {
                    cl.script = None;
                }
            }
            self.history.push(Call {
                client: cl.id,
                key: p.key,
                op,
                outcome,
                invoke: p.invoke,
                complete,
            });
        }
    }

    /// A [`KvMachine`] reply to `req` (sent as a machine call) as the native path
    /// words it.
    fn native_reply(req: &KvRequest, reply: MachineReply) -> KvReply {
        match (req, reply) {
            (KvRequest::Get { .. }, MachineReply::Bulk(v)) => KvReply::Value(Some(v)),
            (KvRequest::Get { .. }, MachineReply::Nil) => KvReply::Value(None),
            (KvRequest::Set { .. }, MachineReply::Ok) => KvReply::Done,
            (KvRequest::Delete { .. }, MachineReply::Integer(n)) => KvReply::Deleted(n == 1),
            (KvRequest::Cas { .. }, MachineReply::Integer(n)) => KvReply::Swapped(n == 1),
            (req, reply) => panic!("{req:?} answered with the machine's {reply:?}"),
        }
    }

    /// The linearizability op of a request.
    fn op_of(req: &KvRequest) -> Op {
        match req {
            KvRequest::Get { .. }
            | KvRequest::Info
            | KvRequest::Machine(_)
            | KvRequest::TransferLeader { .. }
            | KvRequest::ChangeMembership(_)
            | KvRequest::ShowMembership => Op::Get,
            KvRequest::Set { value, .. } => Op::Set(value.clone()),
            KvRequest::Delete { .. } => Op::Delete,
            KvRequest::Cas { expected, new, .. } => Op::Cas {
                expected: expected.clone(),
                new: new.clone(),
            },
        }
    }

    /// Node `node` answered request `token` at `now`.
    pub fn reply(&mut self, now: u64, node: u16, token: u64, reply: KvReply, rng: &mut Rng) {
        assert!(
            self.answered.insert(token),
            "request {token} answered twice (now {reply:?})"
        );
        if self.late.remove(&token) {
            return; // the client gave up on it already
        }
        let Some(&c) = self.live.get(&token) else {
            panic!("a reply to request {token}, which nobody sent: {reply:?}");
        };
        let (id, req) = {
            let p = self.clients[c].pending.as_ref().expect("pending request");
            assert_eq!(p.node, node, "request {token} answered by another node");
            (self.clients[c].id, p.req.clone())
        };
        record(
            now,
            Ev::Reply {
                client: id,
                node,
                reply: reply.clone(),
            },
        );
        let write = req.is_write();
        let reply = match reply {
            KvReply::Machine(r) => {
                self.stats.via_machine += 1;
                Self::native_reply(&req, r)
            }
            other => other,
        };
        let entry = match (&req, reply) {
            (_, KvReply::NotLeader { leader }) => {
                self.stats.redirected += 1;
                let guess = match leader {
                    Some(addr) => *self
                        .addrs
                        .get(&addr)
                        .unwrap_or_else(|| panic!("unknown leader address {addr}")),
                    None => self.other_node(rng, node),
                };
                self.clients[c].guess = guess;
                self.clients[c].next_at = now + rng.range(1, 4);
                self.finish(c, None);
                return;
            }
            (_, KvReply::Rejected(why)) => panic!("a small request was rejected: {why}"),
            (_, KvReply::OutOfMemory(_)) => {
                // Refused before it was proposed, or dropped before any replica had
                // it: the write did not and will not happen. Try again later.
                assert!(write, "a read refused for lack of space: {req:?}");
                self.stats.oom += 1;
                self.clients[c].next_at = now + rng.range(1, 4);
                self.finish(c, None);
                return;
            }
            (_, KvReply::Unavailable(_)) if write => {
                self.stats.unknown += 1;
                Some((Self::op_of(&req), Outcome::Unknown, None))
            }
            (_, KvReply::Unavailable(_)) => {
                self.stats.reads_failed += 1;
                None
            }
            (KvRequest::Get { .. }, KvReply::Value(v)) => {
                Some((Op::Get, Outcome::Value(v), Some(now)))
            }
            (KvRequest::Set { value, .. }, KvReply::Done) => {
                Some((Op::Set(value.clone()), Outcome::Ok, Some(now)))
            }
            (KvRequest::Cas { .. }, KvReply::Swapped(b)) => {
                Some((Self::op_of(&req), Outcome::Swapped(b), Some(now)))
            }
            (KvRequest::Delete { .. }, KvReply::Deleted(true)) => {
                Some((Op::Delete, Outcome::Ok, Some(now)))
            }
            (KvRequest::Delete { .. }, KvReply::Deleted(false)) => {
                Some((Op::Get, Outcome::Value(None), Some(now)))
            }
            (req, reply) => panic!("{req:?} answered with {reply:?}"),
        };
        if entry.as_ref().is_some_and(|e| e.2.is_some()) {
            self.stats.ok += 1;
        } else {
            // Leadership was lost: look elsewhere.
            self.clients[c].guess = self.other_node(rng, node);
        }
        self.clients[c].next_at = now + rng.range(0, self.cfg.think);
        self.finish(c, entry);
    }

    /// Request `token` could not reach its node (down): not executed.
    pub fn unreachable(&mut self, now: u64, token: u64, rng: &mut Rng) {
        let Some(&c) = self.live.get(&token) else {
            return;
        };
        let node = self.clients[c].guess;
        record(
            now,
            Ev::Unreachable {
                client: self.clients[c].id,
                node,
            },
        );
        self.clients[c].guess = self.other_node(rng, node);
        self.clients[c].next_at = now + rng.range(1, 4);
        self.finish(c, None);
    }

    /// Gives up on requests past their deadline.
    pub fn timeouts(&mut self, now: u64, rng: &mut Rng) {
        for c in 0..self.clients.len() {
            let Some(p) = &self.clients[c].pending else {
                continue;
            };
            if p.deadline > now {
                continue;
            }
            let (token, node, write, op) = (p.token, p.node, p.req.is_write(), Self::op_of(&p.req));
            record(
                now,
                Ev::Timeout {
                    client: self.clients[c].id,
                    node,
                },
            );
            self.late.insert(token);
            self.clients[c].guess = self.other_node(rng, node);
            self.clients[c].next_at = now;
            if write {
                self.stats.unknown += 1;
                self.finish(c, Some((op, Outcome::Unknown, None)));
            } else {
                self.stats.reads_failed += 1;
                self.finish(c, None);
            }
        }
    }
}
