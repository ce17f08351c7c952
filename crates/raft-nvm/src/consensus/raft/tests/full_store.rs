//! A full store: a leader forgets the entries its store refused, a leader whose
//! no-op does not fit steps down, a follower leaves refused entries unacknowledged.

use super::*;

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
