//! Lease reads: off by default, held while a quorum answers, lapsing before
//! check-quorum, never during a transfer, and never overlapping a newer leader.

use super::*;

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
