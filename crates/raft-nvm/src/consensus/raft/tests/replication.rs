//! Replication: conflicting suffixes, commitment by a durable quorum, ReadIndex,
//! lagging followers (snapshots, entries read from the store), pipelining, and
//! answers to log reads.

use super::*;

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
