//! Leadership transfer: in one round, after a lagging target catches up,
//! abandoned after an election timeout, and its errors.

use super::*;

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
