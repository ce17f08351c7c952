//! Scenario tests of the core, driven message by message through a tiny network
//! whose links can be cut.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::storage::store::{HardState, SnapshotItem, SnapshotMeta};

use super::*;

/// A cluster of cores; every node syncs its store at once unless in `no_sync`.
/// Each node's "store" is the log its Readies handed out; leaders read entries back
/// from it when `stores_keep_log`, else the driver reports them compacted.
struct Net {
    stores: BTreeMap<u16, BTreeMap<u64, Entry>>,
    stores_keep_log: bool,
    log_reads: usize,
    /// Log reads answered per `process` of a node while no message is queued
    /// (`None`: all at once, always); the rest wait in `unanswered`, in order, as a
    /// driver with a read budget keeps them.
    read_budget: Option<usize>,
    unanswered: BTreeMap<u16, VecDeque<LogRead>>,
    /// Every message any node sent, in order.
    sent: Vec<Message>,
    nodes: BTreeMap<u16, RaftCore>,
    queue: VecDeque<Message>,
    cut: BTreeSet<(u16, u16)>,
    no_sync: BTreeSet<u16>,
    /// Nodes whose store is full: they append nothing (see `on_store_full`).
    full: BTreeSet<u16>,
    truncations: Vec<(u16, u64)>,
    snapshot_requests: Vec<(u16, SnapshotRequest)>,
    reads: Vec<(u16, ReadState)>,
    dropped: Vec<(u16, u64)>,
    chunks: Vec<(u16, IncomingChunk)>,
}

fn config(id: u16, n: u16) -> Config {
    let mut c = Config::new(id, (1..=n).collect());
    c.seed = u64::from(id) * 7919;
    c
}

impl Net {
    fn new(n: u16, tweak: impl Fn(&mut Config)) -> Net {
        let nodes = (1..=n)
            .map(|id| {
                let mut c = config(id, n);
                tweak(&mut c);
                (id, RaftCore::new(c).expect("valid config"))
            })
            .collect();
        Net {
            stores: BTreeMap::new(),
            stores_keep_log: false,
            log_reads: 0,
            read_budget: None,
            unanswered: BTreeMap::new(),
            sent: Vec::new(),
            nodes,
            queue: VecDeque::new(),
            cut: BTreeSet::new(),
            no_sync: BTreeSet::new(),
            full: BTreeSet::new(),
            truncations: Vec::new(),
            snapshot_requests: Vec::new(),
            reads: Vec::new(),
            dropped: Vec::new(),
            chunks: Vec::new(),
        }
    }

    fn node(&mut self, id: u16) -> &mut RaftCore {
        self.nodes.get_mut(&id).expect("node exists")
    }

    fn isolate(&mut self, id: u16) {
        for &o in self.nodes.keys() {
            if o != id {
                self.cut.insert((id, o));
                self.cut.insert((o, id));
            }
        }
    }

    fn heal(&mut self) {
        self.cut.clear();
    }

    /// Processes every node's Ready once.
    fn process(&mut self) {
        let ids: Vec<u16> = self.nodes.keys().copied().collect();
        for id in ids {
            let sync = !self.no_sync.contains(&id);
            let node = self.nodes.get_mut(&id).expect("node");
            let mut rd = node.ready();
            let store = self.stores.entry(id).or_default();
            if let Some(t) = rd.truncate_after {
                self.truncations.push((id, t));
                store.split_off(&(t + 1));
            }
            match rd.entries.first() {
                // A full store takes none: the driver tells the core and sends none
                // of them.
                Some(first) if self.full.contains(&id) => {
                    let kept = first.index - 1;
                    node.on_store_full(kept, false);
                    super::unsent_above(&mut rd.messages, kept);
                }
                _ => store.extend(rd.entries.iter().map(|e| (e.index, e.clone()))),
            }
            self.sent.extend(rd.messages.iter().cloned());
            self.queue.extend(rd.messages);
            let waiting = self.unanswered.entry(id).or_default();
            waiting.extend(rd.log_reads);
            // With a budget, the store is the slow part: reads are answered only
            // once the network is quiet.
            let answer = match self.read_budget {
                None => waiting.len(),
                Some(b) if self.queue.is_empty() => b.min(waiting.len()),
                Some(_) => 0,
            };
            for read in waiting.drain(..answer) {
                let prev_term = match read.from - 1 {
                    0 => Some(0),
                    p => store.get(&p).map(|e| e.term),
                };
                let entries: Option<Vec<Entry>> = (read.from..=read.last)
                    .map(|i| store.get(&i).cloned())
                    .collect();
                match (prev_term, entries) {
                    (Some(t), Some(entries)) if self.stores_keep_log => {
                        node.send_stored_entries(read, t, entries)
                            .expect("the read is answered as asked");
                        self.log_reads += 1;
                    }
                    _ => node.report_entries_unavailable(read),
                }
            }
            self.snapshot_requests
                .extend(rd.snapshots_to_send.into_iter().map(|r| (id, r)));
            self.reads
                .extend(rd.read_states.into_iter().map(|r| (id, r)));
            self.dropped
                .extend(rd.dropped_reads.into_iter().map(|c| (id, c)));
            self.chunks
                .extend(rd.snapshot_chunks.into_iter().map(|c| (id, c)));
            if sync {
                let last = node.last_index();
                node.on_persisted(last);
            }
        }
    }

    /// Delivers messages until the network is quiet.
    fn settle(&mut self) {
        for _ in 0..10_000 {
            self.process();
            let Some(m) = self.queue.pop_front() else {
                if self.nodes.values().all(|n| !n.has_ready())
                    && self.unanswered.values().all(VecDeque::is_empty)
                {
                    return;
                }
                continue;
            };
            if self.cut.contains(&(m.from, m.to)) {
                continue;
            }
            let to = m.to;
            match self.node(to).step(m) {
                // A removed node still talks until it learns of its removal (a
                // pre-vote, a late heartbeat): the members refuse it, as the
                // network would lose it.
                Ok(()) | Err(RaftError::NotAMember { .. }) => {}
                Err(e) => panic!("message refused: {e}"),
            }
        }
        panic!("network did not settle");
    }

    fn tick(&mut self, id: u16, n: u32) {
        for _ in 0..n {
            self.node(id).tick();
            self.settle();
        }
    }

    fn tick_all(&mut self, n: u32) {
        let ids: Vec<u16> = self.nodes.keys().copied().collect();
        for _ in 0..n {
            for &id in &ids {
                self.node(id).tick();
            }
            self.settle();
        }
    }

    fn elect(&mut self, id: u16) {
        self.node(id).campaign();
        self.settle();
        assert_eq!(self.node(id).role(), Role::Leader, "node {id} should lead");
    }

    fn leaders(&self) -> Vec<(u16, u64)> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.role() == Role::Leader)
            .map(|(&id, n)| (id, n.term()))
            .collect()
    }
}

fn put(k: &str) -> Command {
    Command::Put {
        key: k.as_bytes().to_vec(),
        value: b"v".to_vec(),
    }
}

/// The vote-related messages `from` sent since `n.sent` was cleared.
fn campaign_messages(n: &Net, from: u16) -> usize {
    n.sent
        .iter()
        .filter(|m| {
            m.from == from
                && matches!(
                    m.body,
                    MessageBody::PreVote { .. }
                        | MessageBody::RequestVote { .. }
                        | MessageBody::PreVoteResp { .. }
                        | MessageBody::VoteResp { .. }
                )
        })
        .count()
}

/// The kinds of message sent since `from_msg`, as `(from, to, kind)`.
fn kinds_since(n: &Net, from_msg: usize) -> Vec<(u16, u16, &'static str)> {
    n.sent[from_msg..]
        .iter()
        .map(|m| (m.from, m.to, m.body.kind()))
        .collect()
}

mod election;
mod full_store;
mod joining;
mod lease;
mod membership;
mod peers;
mod replication;
mod transfer;
