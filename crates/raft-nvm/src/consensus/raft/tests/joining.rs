//! A joining node (its store lost, passive until caught up): it neither votes
//! nor campaigns until it holds a commit of the leader's term.

use super::*;

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
