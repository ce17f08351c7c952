//! Elections: a single winner per term, the hard state before the vote, pre-vote,
//! a rejoining node, check-quorum.

use super::*;

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
