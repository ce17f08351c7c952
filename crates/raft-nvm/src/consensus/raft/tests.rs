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

#[test]
fn single_node_elects_itself_and_commits_after_sync() {
    let mut n = Net::new(1, |_| {});
    n.no_sync.insert(1);
    n.node(1).campaign();
    n.settle();
    assert_eq!(n.node(1).role(), Role::Leader);
    assert_eq!(n.node(1).commit_index(), 0, "noop not durable yet");
    n.no_sync.clear();
    n.settle();
    assert_eq!(n.node(1).commit_index(), 1);
}

#[test]
fn election_has_a_single_winner_per_term() {
    let mut n = Net::new(3, |c| c.pre_vote = false);
    // Two simultaneous candidates in term 1.
    n.node(1).campaign();
    n.node(2).campaign();
    n.settle();
    let leaders = n.leaders();
    assert!(leaders.len() <= 1, "two leaders: {leaders:?}");
    n.tick_all(60);
    let leaders = n.leaders();
    assert_eq!(leaders.len(), 1, "a leader emerges: {leaders:?}");
    let term = leaders[0].1;
    for node in n.nodes.values() {
        assert_eq!(node.term(), term);
        assert_eq!(node.leader(), Some(leaders[0].0));
    }
}

#[test]
fn hard_state_comes_before_the_vote_it_backs() {
    let mut n = Net::new(3, |c| c.pre_vote = false);
    n.node(1).campaign();
    let rd = n.node(1).ready();
    assert_eq!(
        rd.hard_state,
        Some(HardState {
            term: 1,
            vote: Some(1)
        })
    );
    let req = rd
        .messages
        .into_iter()
        .find(|m| m.to == 2)
        .expect("vote request");
    n.node(2).step(req).expect("routed");
    let rd = n.node(2).ready();
    assert_eq!(
        rd.hard_state,
        Some(HardState {
            term: 1,
            vote: Some(1)
        }),
        "the vote is handed out for persisting in the same Ready as the grant"
    );
    assert!(matches!(
        rd.messages[0].body,
        MessageBody::VoteResp { granted: true }
    ));
}

fn partitioned_node_term(pre_vote: bool) -> u64 {
    let mut n = Net::new(3, |c| {
        c.pre_vote = pre_vote;
        c.check_quorum = true;
    });
    n.elect(1);
    n.isolate(3);
    n.tick(3, 200);
    n.heal();
    n.tick_all(5);
    n.node(3).term()
}

#[test]
fn pre_vote_prevents_term_inflation_from_a_partitioned_node() {
    assert_eq!(partitioned_node_term(true), 1, "no term bump with pre-vote");
    assert!(
        partitioned_node_term(false) > 5,
        "without pre-vote the isolated node inflates its term"
    );
}

#[test]
fn rejoining_node_does_not_disrupt_the_leader() {
    let mut n = Net::new(3, |_| {});
    n.elect(1);
    n.isolate(3);
    n.tick(3, 100);
    n.heal();
    n.node(3).campaign();
    n.settle();
    assert_eq!(n.node(1).role(), Role::Leader);
    assert_eq!(n.node(1).term(), 1);
}

#[test]
fn check_quorum_steps_a_partitioned_leader_down() {
    let mut n = Net::new(3, |_| {});
    n.elect(1);
    n.isolate(1);
    n.node(1).read_index(42).expect("leader");
    n.tick(1, 25);
    assert_eq!(n.node(1).role(), Role::Follower);
    assert_eq!(n.dropped, vec![(1, 42)], "its pending read fails");
    let mut n = Net::new(3, |c| c.check_quorum = false);
    n.elect(1);
    n.isolate(1);
    n.tick(1, 25);
    assert_eq!(n.node(1).role(), Role::Leader, "control: no check-quorum");
}

#[test]
fn replication_rolls_back_a_conflicting_suffix() {
    let mut n = Net::new(3, |c| {
        c.pre_vote = false;
        c.check_quorum = false;
    });
    n.elect(1);
    n.isolate(1);
    for k in ["a", "b", "c"] {
        n.node(1).propose(put(k)).expect("leader");
    }
    n.settle();
    assert_eq!(n.node(1).last_index(), 4);
    assert_eq!(n.node(1).commit_index(), 1, "no quorum: nothing commits");
    n.elect(2);
    n.node(2).propose(put("x")).expect("leader");
    n.settle();
    assert_eq!(n.node(2).commit_index(), 3);
    n.heal();
    n.tick(2, 3);
    assert!(
        n.truncations.contains(&(1, 1)),
        "node 1 rolls back after index 1: {:?}",
        n.truncations
    );
    for id in 1..=3 {
        let node = n.node(id);
        assert_eq!(node.last_index(), 3);
        assert_eq!(node.term_at(2), Some(2));
        assert_eq!(node.commit_index(), 3);
    }
}

#[test]
fn commit_needs_a_durable_quorum() {
    let mut n = Net::new(3, |_| {});
    n.elect(1);
    n.no_sync.extend([2, 3]);
    let idx = n.node(1).propose(put("k")).expect("leader");
    n.settle();
    assert!(
        n.node(1).commit_index() < idx,
        "followers did not sync: no ack"
    );
    n.no_sync.remove(&2);
    n.settle();
    assert_eq!(n.node(1).commit_index(), idx);
}

/// A commit sends nothing by itself: followers learn it from the next
/// AppendEntries, or from the next heartbeat when the leader is idle. (A round of
/// its own would double the messages of a client writing one key at a time.)
#[test]
fn a_commit_reaches_followers_with_the_next_append_not_a_round_of_its_own() {
    let mut n = Net::new(3, |_| {});
    n.elect(1);
    n.sent.clear();
    let a = n.node(1).propose(put("a")).expect("leader");
    n.settle();
    assert_eq!(n.node(1).commit_index(), a);
    let kinds: Vec<(u16, u16, bool)> = n
        .sent
        .iter()
        .map(|m| {
            (
                m.from,
                m.to,
                matches!(m.body, MessageBody::Heartbeat { .. }),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [(1, 2, false), (1, 3, false), (2, 1, false), (3, 1, false)],
        "one append to each follower and its answer, nothing else"
    );
    assert!(n.node(2).commit_index() < a && n.node(3).commit_index() < a);

    let b = n.node(1).propose(put("b")).expect("leader");
    n.settle();
    assert!(n.node(2).commit_index() >= a && n.node(3).commit_index() >= a);

    let beat = n.node(1).config().heartbeat_ticks;
    n.tick(1, beat);
    assert_eq!((n.node(2).commit_index(), n.node(3).commit_index()), (b, b));
}

#[test]
fn only_current_term_entries_commit_by_counting() {
    // Node 2 restarts holding entry 2 of term 1 (uncommitted), then leads term 2.
    let mut cfg = config(2, 3);
    cfg.pre_vote = false;
    let facts = StoreFacts {
        hard_state: HardState {
            term: 1,
            vote: None,
        },
        applied: 1,
        applied_term: Some(1),
        tail_terms: vec![1],
        durable_index: 2,
        ..StoreFacts::default()
    };
    let mut core = RaftCore::restart(cfg, facts).expect("facts");
    core.campaign();
    let vote = |term| Message {
        from: 3,
        to: 2,
        term,
        body: MessageBody::VoteResp { granted: true },
    };
    let _ = core.ready();
    core.step(vote(2)).expect("routed");
    assert_eq!(core.role(), Role::Leader);
    let _ = core.ready();
    core.on_persisted(3);
    let ack = |index| Message {
        from: 3,
        to: 2,
        term: 2,
        body: MessageBody::AppendResp {
            success: true,
            index,
            hint: 0,
        },
    };
    core.step(ack(2)).expect("routed");
    assert_eq!(
        core.commit_index(),
        1,
        "entry 2 of term 1 is on a quorum but must not commit by counting"
    );
    core.step(ack(3)).expect("routed");
    assert_eq!(core.commit_index(), 3, "the noop of term 2 commits both");
    let rd = core.ready();
    assert_eq!(rd.apply_to, Some(3));
    assert_eq!(rd.committed.len(), 1, "entry 2 is known by term only");
}

#[test]
fn read_index_waits_for_the_noop_and_a_quorum() {
    let mut n = Net::new(3, |c| c.pre_vote = false);
    n.node(1).campaign();
    n.process();
    // Deliver the vote requests and answers only.
    while let Some(m) = n.queue.pop_front() {
        let to = m.to;
        n.node(to).step(m).expect("routed");
        n.process();
        if n.node(1).role() == Role::Leader {
            break;
        }
    }
    assert_eq!(n.node(1).role(), Role::Leader);
    n.queue.clear();
    n.isolate(1);
    n.node(1).read_index(7).expect("leader");
    n.settle();
    assert!(n.reads.is_empty(), "no read before the noop commits");
    n.heal();
    n.tick(1, 2);
    assert_eq!(n.reads, vec![(1, ReadState { ctx: 7, index: 1 })]);
    // A deposed-by-partition leader cannot confirm a read.
    n.isolate(1);
    n.node(1).read_index(8).expect("still thinks it leads");
    n.tick(1, 4);
    assert_eq!(n.reads.len(), 1, "no quorum, no read");
    assert_eq!(
        n.node(1).read_index(7),
        Ok(()),
        "ctx 7 was released, may be reused"
    );
    assert_eq!(n.node(1).read_index(8), Err(RaftError::DuplicateRead(8)));
}

/// Three nodes with a window of two entries; node 3 misses ten writes, then the
/// partition heals (nothing ticked yet).
fn follower_behind_the_window(stores_keep_log: bool) -> Net {
    let mut n = Net::new(3, |c| {
        c.window_entries = 2;
        c.max_entries_per_msg = 2;
    });
    n.stores_keep_log = stores_keep_log;
    n.elect(1);
    n.isolate(3);
    for i in 0..10 {
        n.node(1).propose(put(&format!("k{i}"))).expect("leader");
        n.settle();
    }
    assert_eq!(n.node(1).commit_index(), 11);
    assert!(n.snapshot_requests.is_empty());
    n.heal();
    n
}

#[test]
fn lagging_follower_outside_the_window_gets_a_snapshot() {
    let mut n = follower_behind_the_window(false);
    // Two heartbeats: the second finds the appends sent into the cut lost.
    n.tick(1, 4);
    let req = SnapshotRequest {
        to: 3,
        index: 11,
        resume: None,
    };
    assert_eq!(n.snapshot_requests, vec![(1, req)]);
    assert_eq!(
        n.node(1).progress(3).map(|p| p.state),
        Some(ProgressState::Snapshot { pending: 11 })
    );
    // The driver streams two chunks; the follower installs them.
    let meta = SnapshotMeta { index: 11, term: 1 };
    let item = |k: &str| SnapshotItem {
        key: k.as_bytes().to_vec(),
        value: b"v".to_vec(),
        index: 2,
    };
    for (seq, done) in [(0, false), (1, true)] {
        let m = n
            .node(1)
            .snapshot_chunk(3, meta, seq, vec![item("k0")], done);
        n.node(3).step(m).expect("routed");
    }
    n.process();
    assert_eq!(n.chunks.len(), 2);
    assert!(n.chunks[1].1.done);
    n.node(3).on_snapshot_installed(1, meta, None);
    assert_eq!(n.node(3).commit_index(), 11);
    n.settle();
    assert_eq!(n.node(1).progress(3).map(|p| p.matched), Some(11));
    n.node(1).propose(put("after")).expect("leader");
    n.settle();
    assert_eq!(n.node(3).last_index(), 12, "replication continues from 11");
}

#[test]
fn lagging_follower_outside_the_window_gets_entries_from_the_store() {
    let mut n = follower_behind_the_window(true);
    n.tick(1, 4);
    n.settle();
    assert!(n.snapshot_requests.is_empty(), "no snapshot needed");
    assert!(n.log_reads >= 4, "entries 1..=9 came from the store");
    assert_eq!(n.node(3).last_index(), 11);
    assert_eq!(n.node(1).progress(3).map(|p| p.matched), Some(11));
    assert_eq!(
        n.stores[&3], n.stores[&1],
        "the follower's log is the leader's"
    );
}

#[test]
fn a_lost_snapshot_ack_does_not_strand_the_follower() {
    let mut n = follower_behind_the_window(false);
    n.tick(1, 2);
    let meta = SnapshotMeta { index: 11, term: 1 };
    let m = n.node(1).snapshot_chunk(3, meta, 0, Vec::new(), true);
    n.node(3).step(m).expect("routed");
    n.process();
    n.node(3).on_snapshot_installed(1, meta, None);
    n.process();
    n.queue.clear(); // the acknowledgement is lost
    n.tick(1, 4);
    assert_eq!(
        n.node(1).progress(3).map(|p| p.state),
        Some(ProgressState::Snapshot { pending: 11 }),
        "without the driver's report the leader waits for the lost ack"
    );
    n.node(1).report_snapshot_sent(3);
    n.tick(1, 2);
    assert_eq!(n.node(1).progress(3).map(|p| p.matched), Some(11));
    n.node(1).propose(put("after")).expect("leader");
    n.settle();
    assert_eq!(
        n.node(3).last_index(),
        12,
        "replication resumed after the probe"
    );
}

#[test]
fn pipelining_respects_the_inflight_window() {
    let mut n = Net::new(3, |c| {
        c.max_entries_per_msg = 2;
        c.max_inflight_msgs = 3;
    });
    n.elect(1);
    for i in 0..20 {
        n.node(1).propose(put(&format!("k{i}"))).expect("leader");
    }
    let rd = n.node(1).ready();
    let to2: Vec<usize> = rd
        .messages
        .iter()
        .filter(|m| m.to == 2)
        .filter_map(|m| match &m.body {
            MessageBody::AppendEntries { entries, .. } => Some(entries.len()),
            _ => None,
        })
        .collect();
    assert_eq!(to2, vec![2, 2, 2], "three batches of two in flight");
    assert_eq!(
        rd.entries.len(),
        20,
        "the leader appends before replicating"
    );
    n.queue.extend(rd.messages);
    let last = n.node(1).last_index();
    n.node(1).on_persisted(last);
    n.settle();
    assert_eq!(n.node(1).commit_index(), 21);
}

#[test]
fn a_leader_greets_a_restarted_peer_at_once() {
    let mut n = Net::new(3, |_| {});
    n.elect(1);
    n.node(1).propose(put("k")).expect("leader");
    n.settle();
    // No tick passes: only peer_up makes the leader speak.
    n.node(1).peer_up(3);
    let rd = n.node(1).ready();
    let to3: Vec<_> = rd.messages.iter().filter(|m| m.to == 3).collect();
    assert!(
        matches!(
            to3.as_slice(),
            [
                Message {
                    body: MessageBody::Heartbeat { commit: 2, .. },
                    ..
                },
                Message {
                    body: MessageBody::AppendEntries {
                        prev_index: 2,
                        commit: 2,
                        ..
                    },
                    ..
                }
            ] if matches!(&to3[1].body, MessageBody::AppendEntries { entries, .. } if entries.is_empty())
        ),
        "a heartbeat carrying the commit index, and an empty append at the peer's \
         match (a peer that lost its store rejects it): {to3:?}"
    );
    assert!(rd.messages.iter().all(|m| m.to == 3));
    // Followers and unknown ids ignore it.
    n.node(2).peer_up(3);
    n.node(1).peer_up(9);
    assert!(n.node(2).ready().messages.is_empty());
    assert!(n.node(1).ready().messages.is_empty());
}

#[test]
fn a_wrong_answer_to_a_log_read_is_refused() {
    let mut n = follower_behind_the_window(false);
    let read = LogRead {
        to: 3,
        from: 2,
        last: 3,
        term: 1,
    };
    let e = |index| Entry {
        index,
        term: 1,
        cmd: Command::Noop,
    };
    let leader = n.node(1);
    for (prev, entries) in [
        (1, vec![e(2)]),
        (1, vec![e(2), e(4)]),
        (1, vec![e(2), e(3), e(4)]),
    ] {
        assert!(matches!(
            leader.send_stored_entries(read, prev, entries),
            Err(RaftError::LogRead(_))
        ));
    }
    let backwards = LogRead { from: 5, ..read };
    assert!(leader
        .send_stored_entries(backwards, 1, Vec::new())
        .is_err());
    let zero = LogRead {
        from: 0,
        last: 0,
        ..read
    };
    assert!(leader.send_stored_entries(zero, 0, vec![e(0)]).is_err());
    assert!(leader
        .send_stored_entries(read, 1, vec![e(2), e(3)])
        .is_ok());
}

/// The `AppendEntries` carrying entries that `from` sent `to`, as (prev, last).
fn appends(sent: &[Message], from: u16, to: u16) -> Vec<(u64, u64)> {
    sent.iter()
        .filter(|m| m.from == from && m.to == to)
        .filter_map(|m| match &m.body {
            MessageBody::AppendEntries {
                prev_index,
                entries,
                ..
            } if !entries.is_empty() => Some((*prev_index, prev_index + entries.len() as u64)),
            _ => None,
        })
        .collect()
}

#[test]
fn entries_read_from_the_store_reach_the_follower_in_order_when_answers_lag() {
    // The driver answers one log read per process, so the leader's acks free
    // in-flight slots while reads are still unanswered; the entries after them are
    // in the window by then, but must not overtake the reads.
    let mut n = Net::new(3, |c| {
        c.window_entries = 4;
        c.max_entries_per_msg = 1;
        c.max_inflight_msgs = 3;
    });
    n.stores_keep_log = true;
    n.read_budget = Some(1);
    n.elect(1);
    n.isolate(3);
    for i in 0..12 {
        n.node(1).propose(put(&format!("k{i}"))).expect("leader");
        n.settle();
    }
    n.heal();
    n.sent.clear();
    n.tick(1, 4);
    n.settle();
    let last = n.node(1).last_index();
    assert_eq!(n.node(3).commit_index(), last, "the follower caught up");
    assert!(n.log_reads > 3, "entries came from the store");
    let sent = appends(&n.sent, 1, 3);
    let from_store = sent
        .iter()
        .position(|&(prev, _)| prev + 1 < last - 4)
        .expect("a send from below the window");
    for pair in sent[from_store..].windows(2) {
        assert_eq!(
            pair[1].0, pair[0].1,
            "each send continues the one before: {sent:?}"
        );
    }
}

#[test]
fn a_late_answer_to_a_log_read_is_ignored_whatever_it_holds() {
    let mut n = follower_behind_the_window(true);
    let term = n.node(1).term();
    // Asked in an earlier term; the store has been rewritten by a later leader.
    let stale = LogRead {
        to: 3,
        from: 2,
        last: 3,
        term: term - 1,
    };
    let newer = |index| Entry {
        index,
        term: term + 1,
        cmd: Command::Noop,
    };
    let leader = n.node(1);
    assert!(leader
        .send_stored_entries(stale, term + 1, vec![newer(2), newer(3)])
        .is_ok());
    assert!(leader.ready().messages.is_empty(), "nothing sent");
}

/// A 3-node cluster led by node 1 with `writes` committed puts, whose node 3 then
/// loses its store and comes back empty and passive (joining).
fn cluster_with_a_wiped_joiner(writes: usize, tweak: impl Fn(&mut Config)) -> Net {
    let mut n = Net::new(3, &tweak);
    n.elect(1);
    for i in 0..writes {
        n.node(1).propose(put(&format!("k{i}"))).expect("leader");
    }
    n.settle();
    let mut cfg = config(3, 3);
    tweak(&mut cfg);
    cfg.passive_until_caught_up = true;
    n.nodes.insert(3, RaftCore::new(cfg).expect("valid config"));
    n.stores.remove(&3);
    n
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

#[test]
fn a_joining_node_ignores_vote_requests_until_caught_up() {
    // No leader lease: nothing but the joining rule keeps node 3 from answering.
    let mut n = cluster_with_a_wiped_joiner(5, |c| c.check_quorum = false);
    assert!(n.node(3).is_catching_up());
    // A candidate with a short log in a later term: the empty joiner would grant
    // it (any log is as up to date as an empty one); it must not even answer.
    for pre in [true, false] {
        let body = if pre {
            MessageBody::PreVote {
                last_index: 1,
                last_term: 1,
            }
        } else {
            MessageBody::RequestVote {
                last_index: 1,
                last_term: 1,
                transfer: false,
            }
        };
        n.node(3)
            .step(Message {
                from: 2,
                to: 3,
                term: 7,
                body,
            })
            .expect("routed");
        let rd = n.node(3).ready();
        assert!(rd.messages.is_empty(), "pre {pre}: no answer: {rd:?}");
        assert_eq!(
            rd.hard_state, None,
            "pre {pre}: neither term nor vote moved"
        );
        assert_eq!((n.node(3).term(), n.node(3).vote()), (0, None));
    }
    // Caught up (a write reaches it, and with it the leader's commit index)...
    n.node(1).propose(put("after")).expect("leader");
    n.settle();
    let leader_last = n.node(1).last_index();
    assert_eq!(
        n.node(3).last_index(),
        leader_last,
        "the joiner has the log"
    );
    assert!(!n.node(3).is_catching_up(), "caught up");
    // ... it answers vote requests again (and grants an up-to-date candidate).
    let term = n.node(3).term();
    n.node(3)
        .step(Message {
            from: 2,
            to: 3,
            term: term + 1,
            body: MessageBody::PreVote {
                last_index: leader_last,
                last_term: term,
            },
        })
        .expect("routed");
    let rd = n.node(3).ready();
    assert!(
        rd.messages
            .iter()
            .any(|m| matches!(m.body, MessageBody::PreVoteResp { .. })),
        "answered: {rd:?}"
    );
}

#[test]
fn a_joining_node_does_not_campaign_until_caught_up() {
    let mut n = cluster_with_a_wiped_joiner(5, |_| {});
    // Cut off from the leader: its election timeout passes again and again.
    n.isolate(3);
    n.sent.clear();
    n.tick(3, 200);
    n.node(3).campaign();
    n.settle();
    assert_eq!(
        campaign_messages(&n, 3),
        0,
        "no (pre-)vote request went out"
    );
    assert_eq!(n.node(3).role(), Role::Follower);
    assert_eq!(n.node(3).term(), 0);
    // Back in touch: heartbeats alone do not catch it up (they carry the commit
    // index only as far as the leader knows it matches), the next write does.
    n.heal();
    n.tick_all(5);
    n.node(1).propose(put("after")).expect("leader");
    n.settle();
    assert!(!n.node(3).is_catching_up(), "caught up");
    // Now it campaigns when its leader goes quiet.
    n.isolate(1);
    n.sent.clear();
    n.tick(3, 60);
    assert!(campaign_messages(&n, 3) > 0, "it campaigns once caught up");
}

#[test]
fn a_joining_node_is_caught_up_only_at_a_commit_of_the_leaders_term() {
    // Node 2 takes over in term 2 with node 1's vote; node 1 then never syncs, so
    // node 2's no-op commits only through the joiner's acknowledgement. The first
    // entries the joiner gets carry node 2's commit index from before that, an
    // index of term 1, which may lag what node 1 committed: reaching it is not
    // enough.
    let mut n = cluster_with_a_wiped_joiner(3, |c| {
        c.pre_vote = false;
        c.check_quorum = false;
    });
    n.no_sync.insert(1);
    n.elect(2);
    let noop = n.node(2).last_index();
    assert_eq!(n.node(2).term_at(noop), Some(2));
    assert_eq!(
        n.node(2).commit_index(),
        noop,
        "committed with the joiner's ack"
    );
    assert_eq!(n.node(3).last_index(), noop, "the joiner has the whole log");
    assert!(
        n.node(3).is_catching_up(),
        "no commit index of term 2 reached it yet"
    );
    // The next append carries the commit index of the no-op.
    n.node(2).propose(put("after")).expect("leader");
    n.settle();
    assert!(!n.node(3).is_catching_up(), "caught up");
}

#[test]
fn a_rejoining_node_is_found_when_it_comes_up_even_without_writes() {
    let mut n = cluster_with_a_wiped_joiner(5, |_| {});
    let leader_last = n.node(1).last_index();
    // The driver's transport saw node 3 dial in: an empty append at its old match
    // comes back rejected from an empty log, and the leader probes from its end.
    n.node(1).peer_up(3);
    n.settle();
    assert_eq!(
        n.node(3).last_index(),
        leader_last,
        "the joiner has the log"
    );
    assert!(!n.node(3).is_catching_up(), "and knows it caught up");
    assert_eq!(n.node(1).progress(3).map(|p| p.matched), Some(leader_last));
}

#[test]
fn a_leader_forgets_entries_its_full_store_refused_and_reuses_their_indexes() {
    let mut net = Net::new(3, |_| {});
    net.elect(1);
    let kept = net.node(1).last_index();
    net.node(1).propose(put("a")).expect("leader");
    net.node(1).propose(put("b")).expect("leader");
    net.full.insert(1);
    net.settle();
    assert_eq!(net.node(1).last_index(), kept, "a and b are forgotten");
    assert_eq!(net.node(1).role(), Role::Leader, "its no-op is stored");
    net.full.clear();
    let c = net.node(1).propose(put("c")).expect("leader");
    assert_eq!(c, kept + 1, "the index is proposed afresh");
    net.settle();
    net.tick_all(5);
    for id in 1..=3u16 {
        let store = &net.stores[&id];
        assert_eq!(
            store.get(&c).map(|e| e.cmd.clone()),
            Some(put("c")),
            "n{id}"
        );
        assert_eq!(store.keys().last(), Some(&c), "n{id}: nothing of a or b");
        assert_eq!(net.node(id).commit_index(), c, "n{id}");
    }
}

#[test]
fn a_leader_whose_noop_does_not_fit_steps_down() {
    let mut net = Net::new(1, |_| {});
    net.node(1).campaign();
    assert_eq!(net.node(1).role(), Role::Leader);
    let rd = net.node(1).ready();
    assert_eq!(rd.entries.len(), 1, "its no-op");
    // No entry of its term fits: it could commit nothing, nor serve a read.
    net.node(1).on_store_full(0, false);
    assert_eq!(net.node(1).role(), Role::Follower);
    assert_eq!(net.node(1).last_index(), 0);
    // Once the store has room again, it is elected anew.
    net.tick(1, 100);
    assert_eq!(net.node(1).role(), Role::Leader);
    assert_eq!(net.node(1).commit_index(), 1);
}

#[test]
fn a_follower_leaves_entries_its_full_store_refused_unacknowledged() {
    let mut net = Net::new(3, |_| {});
    net.elect(1);
    let kept = net.node(1).last_index();
    net.full.insert(3);
    let a = net.node(1).propose(put("a")).expect("leader");
    net.settle();
    let acked_by_3 = net.sent.iter().any(|m| {
        m.from == 3
            && matches!(m.body, MessageBody::AppendResp { success: true, index, .. } if index > kept)
    });
    assert!(!acked_by_3, "nothing it could not store is acknowledged");
    assert_eq!(net.node(3).last_index(), kept);
    assert_eq!(net.node(1).commit_index(), a, "two of three hold it");
    // The leader sends it again; once it fits, the follower takes it.
    net.full.clear();
    net.tick_all(10);
    assert_eq!(net.node(3).last_index(), a);
    assert_eq!(
        net.stores[&3].get(&a).map(|e| e.cmd.clone()),
        Some(put("a"))
    );
}

/// The kinds of message sent since `from_msg`, as `(from, to, kind)`.
fn kinds_since(n: &Net, from_msg: usize) -> Vec<(u16, u16, &'static str)> {
    n.sent[from_msg..]
        .iter()
        .map(|m| (m.from, m.to, m.body.kind()))
        .collect()
}

#[test]
fn transfer_to_an_up_to_date_follower_moves_leadership_in_one_round() {
    let mut n = Net::new(3, |_| {});
    n.elect(1);
    n.node(1).propose(put("a")).expect("leader");
    n.settle();
    let term = n.node(1).term();
    let mark = n.sent.len();
    n.node(1).transfer_leadership(2).expect("a voter");
    // Proposals are refused while the transfer runs.
    assert_eq!(
        n.node(1).propose(put("b")),
        Err(RaftError::Transferring { target: 2 })
    );
    n.settle();
    let kinds = kinds_since(&n, mark);
    // TimeoutNow first (node 2 already matches the last index), then node 2's
    // vote requests (no pre-vote), the votes, and the new leader's no-op.
    assert_eq!(kinds[0], (1, 2, "TimeoutNow"), "{kinds:?}");
    assert!(
        kinds[1..3].iter().all(|k| k.0 == 2 && k.2 == "RequestVote"),
        "{kinds:?}"
    );
    assert!(!kinds.iter().any(|k| k.2 == "PreVote"), "{kinds:?}");
    assert!(n.sent[mark..]
        .iter()
        .any(|m| matches!(m.body, MessageBody::RequestVote { transfer: true, .. })));
    assert_eq!(n.leaders(), vec![(2, term + 1)]);
    assert_eq!(
        n.node(1).transferring_to(),
        None,
        "the old leader's transfer is over"
    );
    // The new leader takes writes; everything committed before is kept.
    let i = n.node(2).propose(put("c")).expect("new leader");
    n.settle();
    assert_eq!(n.node(2).commit_index(), i);
}

#[test]
fn transfer_to_a_lagging_follower_waits_until_its_log_matches() {
    let mut n = Net::new(3, |_| {});
    n.elect(1);
    n.isolate(3);
    for i in 0..5 {
        n.node(1).propose(put(&format!("k{i}"))).expect("leader");
    }
    n.settle();
    let last = n.node(1).last_index();
    n.node(1).transfer_leadership(3).expect("a voter");
    n.settle();
    // Cut off: no TimeoutNow can go out before node 3 matches.
    assert!(!n.sent.iter().any(|m| m.body.kind() == "TimeoutNow"));
    let mark = n.sent.len();
    n.heal();
    // A few heartbeats (well inside the transfer's election timeout): the leader
    // finds node 3's match point and sends it the entries.
    n.tick(1, 3 * n.nodes[&1].cfg.heartbeat_ticks);
    let kinds = kinds_since(&n, mark);
    let first_append = kinds.iter().position(|k| *k == (1, 3, "AppendEntries"));
    let timeout_now = kinds.iter().position(|k| *k == (1, 3, "TimeoutNow"));
    assert!(
        matches!((first_append, timeout_now), (Some(a), Some(t)) if a < t),
        "entries before TimeoutNow: {kinds:?}"
    );
    assert_eq!(n.leaders().first().map(|l| l.0), Some(3));
    assert!(
        n.node(3).last_index() > last,
        "the new leader's no-op follows"
    );
}

#[test]
fn a_transfer_that_cannot_finish_is_abandoned_after_an_election_timeout() {
    let mut n = Net::new(3, |_| {});
    n.elect(1);
    n.isolate(3);
    n.node(1).propose(put("a")).expect("leader");
    n.settle();
    n.node(1).transfer_leadership(3).expect("a voter");
    assert!(n.node(1).propose(put("b")).is_err());
    let timeout = n.nodes[&1].cfg.election_ticks_min;
    // Node 2 keeps the leader's quorum (check-quorum holds); node 3 never answers.
    for _ in 0..timeout {
        n.node(1).tick();
        n.node(2).tick();
        n.settle();
    }
    assert_eq!(n.node(1).role(), Role::Leader);
    assert_eq!(n.node(1).transferring_to(), None);
    n.node(1).propose(put("b")).expect("proposals again");
}

#[test]
fn transfer_errors_and_a_stray_timeout_now() {
    let mut n = Net::new(3, |_| {});
    n.elect(1);
    assert_eq!(
        n.node(2).transfer_leadership(3),
        Err(RaftError::NotLeader { leader: Some(1) })
    );
    assert_eq!(
        n.node(1).transfer_leadership(1),
        Err(RaftError::NotAVoter(1))
    );
    assert_eq!(
        n.node(1).transfer_leadership(9),
        Err(RaftError::NotAVoter(9))
    );
    // The followers answered the new leader's first append (its no-op) before any
    // heartbeat round: both are live targets, the lowest id first. (A leader shut
    // down right after its election still hands over.)
    assert!(n.node(1).progress(2).is_some_and(|p| p.lease_sent == 0));
    assert_eq!(n.node(1).most_caught_up_follower(), Some(2));
    n.tick_all(n.nodes[&1].cfg.heartbeat_ticks);
    assert_eq!(n.node(1).most_caught_up_follower(), Some(2));
    // Node 2 silent for an election timeout: node 3 is the only live target.
    n.isolate(2);
    n.tick_all(n.nodes[&1].cfg.election_ticks_min + 1);
    assert_eq!(n.node(1).most_caught_up_follower(), Some(3));
    n.heal();
    // TimeoutNow from a node that is not the leader is ignored.
    let term = n.node(3).term();
    n.node(3)
        .step(Message {
            from: 2,
            to: 3,
            term,
            body: MessageBody::TimeoutNow,
        })
        .expect("routed");
    n.settle();
    assert_eq!(n.leaders(), vec![(1, term)]);
}

/// Three nodes with lease reads, and the first leader (fresh nodes ignore vote
/// requests for an election timeout, so the first election comes from the ticks).
fn lease_net() -> (Net, u16) {
    let mut n = Net::new(3, |c| c.lease_reads = true);
    for _ in 0..100 {
        n.tick_all(1);
        if let [(l, _)] = n.leaders()[..] {
            return (n, l);
        }
    }
    panic!("no leader");
}

#[test]
fn lease_reads_are_off_by_default_and_need_check_quorum() {
    let mut n = Net::new(3, |_| {});
    n.elect(1);
    n.tick_all(4);
    assert_eq!(n.node(1).lease_read_index(), None);
    let mut c = config(1, 3);
    c.lease_reads = true;
    c.check_quorum = false;
    assert!(matches!(c.validate(), Err(ConfigError::Lease(_))));
    c.check_quorum = true;
    c.lease_drift_ticks = c.election_ticks_min - 1;
    assert!(matches!(c.validate(), Err(ConfigError::Lease(_))));
}

#[test]
fn a_lease_holds_while_a_quorum_answers_heartbeats_and_lapses_before_check_quorum() {
    let (mut n, l) = lease_net();
    n.tick_all(n.nodes[&l].cfg.heartbeat_ticks);
    let commit = n.node(l).commit_index();
    assert_eq!(n.node(l).lease_read_index(), Some(commit));
    // Cut off: the lease runs out within election_min - 1 - drift ticks of the
    // last answered heartbeat's send, before check-quorum would step down.
    n.isolate(l);
    let (min, drift) = (
        n.nodes[&l].cfg.election_ticks_min,
        n.nodes[&l].cfg.lease_drift_ticks,
    );
    let mut held = 0;
    for _ in 0..min {
        n.tick(l, 1);
        if n.node(l).lease_read_index().is_some() {
            held += 1;
        }
    }
    assert!(held < min - 1 - drift, "held {held} ticks");
    assert_eq!(n.node(l).lease_read_index(), None);
}

#[test]
fn no_lease_during_or_after_a_transfer_in_the_same_term() {
    let (mut n, l) = lease_net();
    let target = if l == 3 { 2 } else { 3 };
    n.tick_all(n.nodes[&l].cfg.heartbeat_ticks);
    assert!(n.node(l).lease_read_index().is_some());
    let term = n.node(l).term();
    n.node(l).transfer_leadership(target).expect("a voter");
    assert_eq!(n.node(l).lease_read_index(), None, "during the transfer");
    // TimeoutNow goes out (the target is up to date) and is lost; the transfer
    // times out and the leader keeps leading, without a lease for this term.
    let mark = n.sent.len();
    n.cut.insert((l, target));
    n.settle();
    n.cut.clear();
    assert!(n.sent[mark..].iter().any(|m| m.body.kind() == "TimeoutNow"));
    for _ in 0..n.nodes[&l].cfg.election_ticks_min {
        n.tick(l, 1);
    }
    assert_eq!((n.node(l).role(), n.node(l).term()), (Role::Leader, term));
    assert_eq!(n.node(l).transferring_to(), None);
    n.tick_all(n.nodes[&l].cfg.heartbeat_ticks);
    assert_eq!(
        n.node(l).lease_read_index(),
        None,
        "void for the rest of the term"
    );
}

#[test]
fn a_restarted_node_with_leases_ignores_vote_requests_for_an_election_timeout() {
    let mut c = config(3, 3);
    c.lease_reads = true;
    let mut node = RaftCore::new(c.clone()).expect("valid");
    let ask = |term| Message {
        from: 2,
        to: 3,
        term,
        body: MessageBody::RequestVote {
            last_index: 5,
            last_term: 1,
            transfer: false,
        },
    };
    node.step(ask(2)).expect("routed");
    assert!(
        node.ready().messages.is_empty(),
        "ignored right after the start"
    );
    for _ in 0..c.election_ticks_min {
        node.tick();
    }
    let _ = node.ready();
    node.step(ask(3)).expect("routed");
    let rd = node.ready();
    assert!(
        rd.messages
            .iter()
            .any(|m| matches!(m.body, MessageBody::VoteResp { granted: true })),
        "granted after an election timeout: {:?}",
        rd.messages
    );
}

/// The lease's safety, directly: whatever the timing, while a leader's lease holds,
/// no other node leads a later term. The leader is cut off right after a
/// heartbeat round; the others tick on, each up to `lease_drift_ticks` ticks
/// faster than the leader over the run (the bound the lease assumes), elect a new
/// leader and commit; at every tick of every node the old leader's lease and the
/// new leadership must not overlap.
#[test]
fn a_lease_never_overlaps_a_newer_leader() {
    let mut cases = 0;
    for election_min in [4u32, 8, 12] {
        for heartbeat in [1u32, 2, 3] {
            if heartbeat >= election_min {
                continue;
            }
            for drift in 0..election_min.saturating_sub(1).min(3) {
                for seed in 0..16u64 {
                    let mut n = Net::new(3, |c| {
                        c.lease_reads = true;
                        c.lease_drift_ticks = drift;
                        c.election_ticks_min = election_min;
                        c.election_ticks_max = election_min * 2;
                        c.heartbeat_ticks = heartbeat;
                        c.seed = c.seed.wrapping_add(seed * 1_000_003);
                    });
                    let mut leader = None;
                    for _ in 0..200 {
                        n.tick_all(1);
                        if let [(l, _)] = n.leaders()[..] {
                            leader = Some(l);
                            break;
                        }
                    }
                    let Some(old) = leader else { continue };
                    n.tick_all(heartbeat);
                    let old_term = n.node(old).term();
                    n.isolate(old);
                    let others: Vec<u16> = (1..=3).filter(|&i| i != old).collect();
                    // The followers' clocks gain `drift` ticks on the leader's at
                    // once (the worst moment: their election timers run ahead).
                    for step in 0..(6 * election_min) {
                        n.tick(old, 1);
                        for &o in &others {
                            n.tick(o, if step < drift { 2 } else { 1 });
                        }
                        let newer = others.iter().any(|&o| {
                            n.nodes[&o].role() == Role::Leader && n.nodes[&o].term() > old_term
                        });
                        let lease = n.node(old).lease_read_index().is_some();
                        assert!(
                            !(newer && lease),
                            "min {election_min} hb {heartbeat} drift {drift} seed {seed}: \
                             old leader {old} still holds a lease at step {step} while another leads"
                        );
                    }
                    assert!(
                        others.iter().any(|&o| n.nodes[&o].role() == Role::Leader),
                        "the others elected a leader"
                    );
                    cases += 1;
                }
            }
        }
    }
    assert!(cases > 30, "{cases} cases ran");
}

/// Why a restarted node ignores vote requests for an election timeout: the leader's
/// lease rests on the followers that answered its last heartbeats. One of them (`a`)
/// restarts, forgetting it follows a leader, while the other (`c`), cut off from the
/// leader for a while, keeps campaigning: without the guard `a` would vote `c` in at
/// once, inside the leader's lease.
#[test]
fn a_follower_restarted_inside_the_lease_does_not_vote_a_new_leader_in() {
    let (mut n, l) = lease_net();
    let mut others = (1..=3).filter(|&i| i != l);
    let (a, c) = (others.next().expect("a"), others.next().expect("c"));
    n.cut.insert((l, c));
    n.cut.insert((c, l));
    let max = n.nodes[&l].cfg.election_ticks_max;
    n.tick_all(2 * max);
    assert_eq!(
        n.node(l).role(),
        Role::Leader,
        "a keeps the leader's quorum"
    );
    assert!(n.node(l).lease_read_index().is_some());
    // `a` restarts from its store: same term and vote, no leader known.
    let log: Vec<u64> = n.stores[&a].values().map(|e| e.term).collect();
    let mut cfg = config(a, 3);
    cfg.lease_reads = true;
    let facts = StoreFacts {
        hard_state: HardState {
            term: n.node(a).term(),
            vote: n.node(a).vote(),
        },
        applied: 0,
        applied_term: Some(0),
        durable_index: log.len() as u64,
        tail_terms: log,
        ..StoreFacts::default()
    };
    n.nodes
        .insert(a, RaftCore::restart(cfg, facts).expect("restart"));
    // `c` campaigns right then, before a heartbeat tells `a` who leads.
    n.node(c).campaign();
    n.settle();
    for step in 0..(4 * max) {
        n.tick_all(1);
        let l_term = n.nodes[&l].term();
        let lease = n.nodes[&l].lease_read_index().is_some();
        let newer = n.nodes[&c].role() == Role::Leader && n.nodes[&c].term() > l_term;
        assert!(
            !(lease && newer),
            "step {step}: n{c} leads while n{l} holds a lease"
        );
    }
}

mod membership;
mod peers;
