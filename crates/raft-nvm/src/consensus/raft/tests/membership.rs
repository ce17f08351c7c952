//! Scenario tests of membership changes: the entries a change appends, the
//! quorums of a joint configuration, learners, a removed leader's handover, a
//! configuration cut away by a new leader, and restarts.

use super::*;

/// A learner `id` that knows the voters `1..=voters`.
fn learner(id: u16, voters: u16) -> RaftCore {
    let mut c = config(id, voters);
    c.learners = vec![id];
    RaftCore::new(c).expect("a learner's config")
}

fn set(ids: &[u16]) -> BTreeSet<u16> {
    ids.iter().copied().collect()
}

/// The configuration entries in `id`'s store, in index order.
fn configs(n: &Net, id: u16) -> Vec<(u64, Membership)> {
    n.stores[&id]
        .values()
        .filter_map(|e| match &e.cmd {
            Command::Config { data } => Some((e.index, Membership::decode(data).expect("decodes"))),
            _ => None,
        })
        .collect()
}

/// Three voters led by 1, with learner 4 added and caught up.
fn with_learner() -> Net {
    let mut n = Net::new(3, |_| {});
    n.elect(1);
    n.node(1).propose(put("a")).expect("leader");
    n.nodes.insert(4, learner(4, 3));
    n.node(1)
        .propose_membership(MembershipChange::AddLearner {
            id: 4,
            address: String::new(),
        })
        .expect("add learner");
    n.settle();
    // A heartbeat tells the followers the commit index.
    n.tick(1, 2);
    n
}

#[test]
fn a_learner_is_added_in_one_entry_and_promoted_through_a_joint_configuration() {
    let mut n = with_learner();
    for id in 1..=4 {
        assert_eq!(n.node(id).membership(), &Membership::new([1, 2, 3], [4]));
        assert!(!n.node(id).membership_change_pending(), "node {id}");
    }
    assert_eq!(
        n.node(4).last_index(),
        n.node(1).last_index(),
        "the learner has the log"
    );
    let promote = n
        .node(1)
        .propose_membership(MembershipChange::Promote(4))
        .expect("promote");
    assert!(n.node(1).membership().is_joint(), "in force once appended");
    assert_eq!(
        n.node(1).propose_membership(MembershipChange::Remove(2)),
        Err(RaftError::MembershipChangePending { index: promote }),
        "one change at a time"
    );
    n.settle();
    // Learner, joint, and the leaving entry the leader appended by itself.
    let logged = configs(&n, 1);
    let joint = Membership {
        voters: set(&[1, 2, 3, 4]),
        outgoing: set(&[1, 2, 3]),
        learners: set(&[]),
        addresses: Default::default(),
    };
    assert_eq!(logged.len(), 3, "{logged:?}");
    assert_eq!(logged[1], (promote, joint));
    assert_eq!(logged[2], (promote + 1, Membership::new([1, 2, 3, 4], [])));
    for id in 1..=4 {
        assert_eq!(n.node(id).membership(), &Membership::new([1, 2, 3, 4], []));
        assert_eq!(configs(&n, id), logged, "node {id}'s log");
    }
    assert_eq!(n.node(1).commit_index(), promote + 1);
    // Node 4 now is a voter: leadership can move to it.
    n.node(1).transfer_leadership(4).expect("a voter now");
    n.settle();
    assert_eq!(n.leaders().first().map(|l| l.0), Some(4));
}

#[test]
fn a_learner_neither_campaigns_nor_counts_in_a_quorum() {
    let mut n = with_learner();
    n.sent.clear();
    n.tick(4, 100);
    assert_eq!(campaign_messages(&n, 4), 0, "a learner never campaigns");
    n.node(4).campaign();
    n.settle();
    assert_eq!(campaign_messages(&n, 4), 0, "not even when asked");
    // With voters 2 and 3 cut off, leader 1 and learner 4 are no quorum.
    n.isolate(2);
    n.isolate(3);
    n.cut.remove(&(1, 4));
    n.cut.remove(&(4, 1));
    let before = n.node(1).commit_index();
    let i = n.node(1).propose(put("b")).expect("leader");
    n.settle();
    assert_eq!(n.node(4).last_index(), i, "the learner got the entry");
    assert_eq!(
        n.node(1).commit_index(),
        before,
        "but its ack counts for nothing"
    );
    // Healed: appends lost on the cut links are sent again once two heartbeat
    // answers show them stalled.
    n.heal();
    n.tick(1, 6);
    assert_eq!(n.node(1).commit_index(), i);
}

#[test]
fn a_lagging_or_silent_learner_is_not_promoted() {
    let mut n = with_learner();
    n.isolate(4);
    for i in 0..5 {
        n.node(1).propose(put(&format!("k{i}"))).expect("leader");
    }
    n.settle();
    // An election timeout of heartbeats the learner does not answer.
    n.tick(1, 12);
    n.node(1).cfg.promote_max_lag = 5;
    assert_eq!(
        n.node(1).propose_membership(MembershipChange::Promote(4)),
        Err(RaftError::LearnerUnreachable(4)),
        "close enough, but silent for an election timeout"
    );
    n.node(1).cfg.promote_max_lag = 3;
    assert_eq!(
        n.node(1).propose_membership(MembershipChange::Promote(4)),
        Err(RaftError::LearnerBehind {
            id: 4,
            lag: 5,
            max: 3
        })
    );
    n.heal();
    n.tick(1, 6);
    n.node(1)
        .propose_membership(MembershipChange::Promote(4))
        .expect("caught up");
    assert_eq!(
        n.node(2).propose_membership(MembershipChange::Remove(3)),
        Err(RaftError::NotLeader { leader: Some(1) })
    );
    assert!(matches!(
        n.node(1).propose_membership(MembershipChange::Remove(9)),
        Err(RaftError::MembershipChangePending { .. })
    ));
    n.settle();
    assert_eq!(
        n.node(1).propose_membership(MembershipChange::Remove(9)),
        Err(RaftError::Membership(MembershipError::NotAMember(9)))
    );
}

#[test]
fn a_joint_configuration_commits_only_with_a_majority_of_the_new_voters_too() {
    let mut n = Net::new(3, |_| {});
    n.elect(1);
    n.settle();
    // Removing 2 from {1,2,3}: the new voters are {1,3}. With 3 cut off, 1 and 2
    // are a majority of the old voters but not of the new.
    n.isolate(3);
    let joint = n
        .node(1)
        .propose_membership(MembershipChange::Remove(2))
        .expect("remove");
    n.settle();
    assert_eq!(n.node(2).last_index(), joint, "node 2 holds the entry");
    assert!(n.node(1).commit_index() < joint, "no majority of {{1,3}}");
    n.heal();
    n.tick(1, 6);
    assert!(n.node(1).commit_index() > joint, "committed, and left");
    assert_eq!(n.node(1).membership(), &Membership::new([1, 3], []));
    assert_eq!(n.node(3).membership(), &Membership::new([1, 3], []));
    // Node 2 is out: the leader no longer replicates to it.
    assert!(n.node(1).progress(2).is_none());
    let i = n.node(1).propose(put("after")).expect("leader");
    n.settle();
    assert_eq!(n.node(1).commit_index(), i);
    assert!(
        n.node(2).last_index() < i,
        "a removed node gets no more entries"
    );
}

#[test]
fn a_removed_leader_hands_over_at_once_and_never_campaigns_again() {
    let mut n = Net::new(3, |_| {});
    n.elect(1);
    n.settle();
    let term = n.node(1).term();
    let mark = n.sent.len();
    n.node(1)
        .propose_membership(MembershipChange::Remove(1))
        .expect("remove the leader");
    n.settle();
    let kinds = kinds_since(&n, mark);
    assert!(
        kinds.iter().any(|k| k.0 == 1 && k.2 == "TimeoutNow"),
        "{kinds:?}"
    );
    let leaders = n.leaders();
    assert_eq!(leaders.len(), 1, "{leaders:?}");
    let (new, new_term) = leaders[0];
    assert!(new == 2 || new == 3);
    assert_eq!(new_term, term + 1, "elected without a timeout");
    assert_eq!(n.node(new).membership(), &Membership::new([2, 3], []));
    n.sent.clear();
    n.tick(1, 100);
    assert_eq!(campaign_messages(&n, 1), 0, "the removed node stays quiet");
    let i = n.node(new).propose(put("x")).expect("new leader");
    n.settle();
    assert_eq!(n.node(new).commit_index(), i);
}

#[test]
fn a_configuration_cut_away_by_a_new_leader_is_forgotten() {
    let mut n = Net::new(3, |_| {});
    n.elect(1);
    n.settle();
    n.nodes.insert(4, learner(4, 3));
    n.isolate(1);
    n.node(1)
        .propose_membership(MembershipChange::AddLearner {
            id: 4,
            address: String::new(),
        })
        .expect("appended, never replicated");
    n.settle();
    assert_eq!(n.node(1).membership(), &Membership::new([1, 2, 3], [4]));
    // 2 and 3 elect 2, which commits entries of its own.
    n.cut.retain(|&(a, b)| a == 1 || b == 1);
    for _ in 0..40 {
        n.node(2).tick();
        n.node(3).tick();
        n.settle();
    }
    let leaders = n.leaders();
    let new = leaders.iter().find(|l| l.0 != 1).expect("2 or 3 leads").0;
    n.node(new).propose(put("y")).expect("leader");
    n.settle();
    n.heal();
    n.tick(new, 6);
    assert_eq!(n.node(1).leader(), Some(new));
    assert_eq!(
        n.node(1).membership(),
        &Membership::new([1, 2, 3], []),
        "node 1's configuration went with its cut suffix"
    );
    assert!(n.truncations.iter().any(|&(id, _)| id == 1));
}

#[test]
fn a_restart_takes_the_configuration_from_the_facts() {
    let m = Membership::new([1, 2, 3, 4], [5]);
    let before = Membership::new([1, 2, 3], [4, 5]);
    let facts = StoreFacts {
        hard_state: HardState {
            term: 2,
            vote: None,
        },
        applied: 3,
        applied_term: Some(2),
        tail_terms: vec![2, 2],
        durable_index: 5,
        membership: Some((5, 2, m.clone())),
        membership_before: Some(before),
    };
    let core = RaftCore::restart(config(1, 3), facts).expect("restart");
    assert_eq!(core.membership(), &m);
    assert_eq!(core.membership_index(), 5);
    assert!(
        core.membership_change_pending(),
        "not known committed after a restart"
    );
    // A learner's config is valid; a node in neither list is not.
    let mut c = config(9, 3);
    assert!(RaftCore::new(c.clone()).is_err());
    c.learners = vec![9];
    assert!(RaftCore::new(c).is_ok());
}

#[test]
fn a_learner_reads_through_the_leaders_read_index() {
    let mut n = with_learner();
    let i = n.node(1).propose(put("x")).expect("leader");
    n.settle();
    let mark = n.sent.len();
    n.node(4)
        .read_index(7)
        .expect("a learner that knows its leader");
    n.settle();
    let kinds = kinds_since(&n, mark);
    // The request, the leader's confirmation round (heartbeats to every member,
    // answered), and the answer to the learner.
    assert_eq!(kinds[0], (4, 1, "ReadIndex"), "{kinds:?}");
    assert!(kinds.contains(&(1, 2, "Heartbeat")), "{kinds:?}");
    assert!(kinds.contains(&(2, 1, "HeartbeatResp")), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&(1, 4, "ReadIndexResp")), "{kinds:?}");
    assert_eq!(n.reads, vec![(4, ReadState { ctx: 7, index: i })]);
    // No quorum, no answer: the leader cut off from the voters confirms nothing,
    // and the learner drops the read after an election timeout.
    n.reads.clear();
    n.isolate(2);
    n.isolate(3);
    n.cut.remove(&(1, 4));
    n.cut.remove(&(4, 1));
    n.node(4).read_index(8).expect("asked");
    n.settle();
    assert!(n.reads.is_empty(), "{:?}", n.reads);
    n.tick(4, 10);
    assert!(n.dropped.contains(&(4, 8)), "{:?}", n.dropped);
    // A read pending at a leader that then steps down (check-quorum: it hears from
    // no voter) is answered "no" at once, before any timeout of the learner's.
    n.node(4).read_index(9).expect("asked");
    n.settle();
    // (Two check-quorum periods: the voters were heard from in the first.)
    n.tick(1, 25);
    assert_ne!(n.node(1).role(), Role::Leader);
    assert!(n.dropped.contains(&(4, 9)), "{:?}", n.dropped);
    let answers = n.sent.iter().filter(|m| {
        matches!(
            m.body,
            MessageBody::ReadIndexResp {
                ctx: 9,
                index: None
            }
        )
    });
    assert_eq!(answers.count(), 1);
}
