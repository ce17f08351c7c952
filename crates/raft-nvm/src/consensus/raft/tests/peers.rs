//! Scenario tests of what the core does with a peer's message that no correct
//! peer sends: a stranger's (a node outside the configuration), numbers out of
//! range, answers about ticks or entries that never were. (`validate.rs` tests
//! the checks that need no state; these need the node's.)

use super::*;

/// A stranger (node 9) claiming to lead, in a term above the node's.
fn stranger_append(to: u16, term: u64) -> Message {
    Message {
        from: 9,
        to,
        term,
        body: MessageBody::AppendEntries {
            prev_index: 0,
            prev_term: 0,
            entries: Vec::new(),
            commit: 0,
        },
    }
}

#[test]
fn a_stranger_is_refused_by_a_leader_and_by_a_follower_that_hears_its_leader() {
    let mut n = Net::new(3, |_| {});
    n.elect(1);
    n.settle();
    let term = n.node(1).term();
    for id in [1, 2] {
        assert!(matches!(
            n.node(id).step(stranger_append(id, term + 1)),
            Err(RaftError::NotAMember { from: 9, .. })
        ));
        // Nor may it make anyone vote, or campaign.
        let vote = Message {
            from: 9,
            to: id,
            term: term + 1,
            body: MessageBody::RequestVote {
                last_index: 100,
                last_term: term,
                transfer: true,
            },
        };
        assert!(n.node(id).step(vote).is_err());
        let timeout_now = Message {
            from: 9,
            to: id,
            term,
            body: MessageBody::TimeoutNow,
        };
        assert!(n.node(id).step(timeout_now).is_err());
    }
    n.settle();
    assert_eq!(n.leaders(), vec![(1, term)]);
    assert_eq!(n.node(2).term(), term);
    assert_eq!(n.node(2).leader(), Some(1));
}

#[test]
fn a_node_that_hears_no_leader_follows_one_it_does_not_know() {
    // Node 3 was away while node 9 joined and came to lead: its configuration
    // does not name 9, and only 9 can bring it up to date.
    let mut n = Net::new(3, |_| {});
    let term = n.node(3).term();
    assert_eq!(n.node(3).step(stranger_append(3, term + 1)), Ok(()));
    assert_eq!(n.node(3).leader(), Some(9));
    // Followed now: its next messages of this term are heard too.
    assert_eq!(n.node(3).step(stranger_append(3, term + 1)), Ok(()));
}

#[test]
fn a_sole_voter_never_follows_a_stranger() {
    // A one-node cluster just started: it has heard no leader (none can exist but
    // itself), and a stranger's append, even in a later term, is refused.
    let mut n = Net::new(1, |_| {});
    let term = n.node(1).term();
    assert!(matches!(
        n.node(1).step(stranger_append(1, term + 1)),
        Err(RaftError::NotAMember { from: 9, .. })
    ));
    assert_eq!(n.node(1).term(), term);
    assert_eq!(n.node(1).leader(), None);
}

#[test]
fn a_removed_nodes_messages_are_refused() {
    let mut n = Net::new(3, |_| {});
    n.elect(1);
    n.settle();
    n.node(1)
        .propose_membership(MembershipChange::Remove(3))
        .expect("remove");
    n.tick(1, 6);
    assert_eq!(n.node(1).membership(), &Membership::new([1, 2], []));
    let term = n.node(1).term();
    let pre_vote = Message {
        from: 3,
        to: 2,
        term: term + 1,
        body: MessageBody::PreVote {
            last_index: 100,
            last_term: term,
        },
    };
    assert!(matches!(
        n.node(2).step(pre_vote),
        Err(RaftError::NotAMember { from: 3, .. })
    ));
}

#[test]
fn invalid_messages_are_refused_by_the_core_too() {
    let mut n = Net::new(3, |_| {});
    n.elect(1);
    n.settle();
    let hb = Message {
        from: 1,
        to: 2,
        term: u64::MAX,
        body: MessageBody::Heartbeat {
            commit: 0,
            ctx: None,
            sent: 0,
        },
    };
    assert!(matches!(
        n.node(2).step(hb),
        Err(RaftError::InvalidMessage { from: 1, .. })
    ));
    assert!(n.node(2).term() < MAX_TERM);
}

#[test]
fn no_campaign_once_the_term_is_at_its_largest() {
    let facts = StoreFacts {
        hard_state: HardState {
            term: MAX_TERM,
            vote: None,
        },
        ..StoreFacts::default()
    };
    let mut core = RaftCore::restart(config(1, 3), facts).expect("restart");
    for _ in 0..10 * core.config().election_ticks_max {
        core.tick();
    }
    assert_eq!(core.term(), MAX_TERM, "the next term would not fit");
    assert_eq!(core.role(), Role::Follower);
}

#[test]
fn an_echo_of_a_tick_never_sent_does_not_stretch_the_lease() {
    let mut n = Net::new(3, |c| c.lease_reads = true);
    let mut leader = None;
    for _ in 0..100 {
        n.tick_all(1);
        if let [(l, _)] = n.leaders()[..] {
            leader = Some(l);
            break;
        }
    }
    let l = leader.expect("a leader");
    let term = n.node(l).term();
    let now = n.node(l).ticks();
    for from in (1..=3).filter(|&id| id != l) {
        let resp = Message {
            from,
            to: l,
            term,
            body: MessageBody::HeartbeatResp {
                ctx: None,
                sent: u64::MAX,
            },
        };
        n.node(l).step(resp).expect("routed");
    }
    let lease = n.node(l).lease();
    assert!(
        lease.is_none_or(
            |lease| lease.until_tick <= now + u64::from(n.nodes[&l].cfg.election_ticks_min)
        ),
        "{lease:?}"
    );
}

#[test]
fn an_acknowledgement_above_the_last_index_counts_for_nothing() {
    let mut n = Net::new(3, |_| {});
    n.elect(1);
    n.settle();
    n.isolate(2);
    n.isolate(3);
    let i = n.node(1).propose(put("x")).expect("leader");
    n.settle();
    let term = n.node(1).term();
    let last = n.node(1).last_index();
    assert_eq!(last, i);
    let ack = Message {
        from: 2,
        to: 1,
        term,
        body: MessageBody::AppendResp {
            success: true,
            index: last + 1000,
            hint: 0,
        },
    };
    n.node(1).step(ack).expect("routed");
    assert!(n.node(1).commit_index() < i, "committed without a quorum");
    assert!(n.node(1).progress(2).is_some_and(|p| p.matched <= last));
}
