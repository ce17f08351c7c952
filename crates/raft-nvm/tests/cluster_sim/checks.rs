//! The safety properties checked after every step, and the end-of-run ones.
//!
//! * **Election safety:** at most one leader per term, ever (a map term → leader
//!   that survives crashes).
//! * **Log matching:** an entry is identified by (index, term): every store that
//!   holds it holds the same operation (as [`Store::entry`] reads it back: the
//!   put / delete / no-op its append decided) after the same term at `index - 1`,
//!   which by induction makes the prefixes agree. Each node's newest entries are
//!   compared after every step, from its last index back to the first one already
//!   verified unchanged (so a step costs a few reads unless the log changed).
//! * **State-machine safety:** every entry a node applies (its store's applied index
//!   passes it) is recorded as committed; every other node that applies that index,
//!   or holds it at or below its applied index, has the same entry.
//! * **Leader completeness:** the first time a node is seen leading a term, its
//!   store holds every committed entry recorded so far (same term), or has applied
//!   past it (compacted away).
//! * **Durable hard state:** after `process`, the store's hard state is the core's.
//! * **Convergence** (end of run): every node applied the same index and reads the
//!   same value of every key there, equal to the replay of the committed entries.

use std::collections::{BTreeMap, HashMap};

use raft_nvm::raft::Role;
use raft_nvm::replica::Replica;
use raft_nvm::{HardState, OwnedOp, Store};

use super::events::{record, Ev};

/// What the checker remembers of one node.
#[derive(Debug, Default)]
struct NodeView {
    /// Recently verified entries: index → (term, term of index - 1).
    verified: BTreeMap<u64, (u64, Option<u64>)>,
    /// The store's applied index at the last check.
    applied: u64,
    role: Option<(Role, u64)>,
}

/// The cluster-wide record the properties are checked against.
#[derive(Debug, Default)]
pub struct Checker {
    leaders: BTreeMap<u64, u16>,
    /// (index, term) → (operation, term of index - 1 where known).
    entries: HashMap<(u64, u64), (OwnedOp, Option<u64>)>,
    /// Entries applied somewhere: index → (term, operation).
    committed: BTreeMap<u64, (u64, OwnedOp)>,
    nodes: BTreeMap<u16, NodeView>,
}

fn role_name(r: Role) -> &'static str {
    match r {
        Role::Leader => "LEADER",
        Role::Follower => "follower",
        Role::PreCandidate => "pre-candidate",
        Role::Candidate => "candidate",
    }
}

impl Checker {
    /// Node `id` (re)opened its store: it applied what its store says.
    pub fn opened(&mut self, id: u16, replica: &Replica) {
        let view = self.nodes.entry(id).or_default();
        view.applied = replica.store().applied();
        view.role = None;
    }

    /// The number of distinct terms that had a leader.
    pub fn terms_led(&self) -> usize {
        self.leaders.len()
    }

    /// Checks node `id` after a step.
    pub fn check_node(&mut self, now: u64, id: u16, r: &Replica) {
        let store = r.store();
        let core = r.core();
        let hs = HardState {
            term: core.term(),
            vote: core.vote(),
        };
        assert_eq!(
            store.hard_state(),
            hs,
            "n{id}: the store's hard state is not the core's after process"
        );
        let view = self.nodes.entry(id).or_default();
        let role = (core.role(), core.term());
        if view.role != Some(role) {
            view.role = Some(role);
            record(
                now,
                Ev::Role {
                    node: id,
                    role: role_name(role.0),
                    term: role.1,
                    commit: core.commit_index(),
                    last: store.last_index(),
                },
            );
        }
        self.check_applied(id, &*store);
        self.check_log(id, &*store);
        if core.role() == Role::Leader {
            match self.leaders.get(&core.term()) {
                Some(&l) => {
                    assert_eq!(l, id, "two leaders in term {}: n{l} and n{id}", core.term())
                }
                None => {
                    self.leaders.insert(core.term(), id);
                    self.check_complete(id, &*store);
                }
            }
        }
    }

    /// State-machine safety over the entries applied since the last check.
    fn check_applied(&mut self, id: u16, store: &dyn Store) {
        let view = self.nodes.entry(id).or_default();
        let applied = store.applied();
        let from = view.applied + 1;
        view.applied = applied;
        for i in from..=applied {
            let Some(e) = store.entry(i).expect("read an applied entry") else {
                continue; // came with a snapshot
            };
            match self.committed.get(&i) {
                Some((term, op)) => assert!(
                    *term == e.term && *op == e.op,
                    "state-machine safety: n{id} applied {i} = ({}, {:?}), \
                     but ({term}, {op:?}) was applied before",
                    e.term,
                    e.op
                ),
                None => {
                    self.committed.insert(i, (e.term, e.op));
                }
            }
        }
    }

    /// Log matching over the node's entries that changed since the last check.
    fn check_log(&mut self, id: u16, store: &dyn Store) {
        let view = self.nodes.entry(id).or_default();
        let last = store.last_index();
        let applied = store.applied();
        view.verified.split_off(&(last + 1));
        let mut i = last;
        while i > 0 {
            let Some(term) = store.term_at(i) else { break };
            let prev = if i == 1 {
                Some(0)
            } else {
                store.term_at(i - 1)
            };
            if view.verified.get(&i) == Some(&(term, prev)) {
                break;
            }
            if let Some(e) = store.entry(i).expect("read an entry") {
                assert_eq!(
                    (e.index, e.term),
                    (i, term),
                    "n{id}: entry {i} reads back as another"
                );
                match self.entries.get_mut(&(i, term)) {
                    Some((op, p)) => {
                        assert_eq!(
                            *op, e.op,
                            "log matching: n{id} holds entry {i} of term {term} as {:?}, \
                             another node as {op:?}",
                            e.op
                        );
                        if let (Some(a), Some(b)) = (*p, prev) {
                            assert_eq!(
                                a, b,
                                "log matching: n{id} holds ({i}, {term}) after an entry of \
                                 term {b}, another node after one of term {a}"
                            );
                        }
                        *p = p.or(prev);
                    }
                    None => {
                        self.entries.insert((i, term), (e.op, prev));
                    }
                }
            }
            if i <= applied {
                if let Some((t, _)) = self.committed.get(&i) {
                    assert_eq!(
                        *t, term,
                        "state-machine safety: n{id} applied entry {i} of term {term}, \
                         the committed one is of term {t}"
                    );
                }
            }
            view.verified.insert(i, (term, prev));
            i -= 1;
        }
        if last > 4096 {
            let keep = view.verified.split_off(&(last - 4096));
            view.verified = keep;
        }
    }

    /// Leader completeness: a new leader holds every entry committed before.
    fn check_complete(&self, id: u16, store: &dyn Store) {
        let (last, applied) = (store.last_index(), store.applied());
        for (&i, (term, _)) in &self.committed {
            match store.term_at(i) {
                Some(t) => assert_eq!(
                    t, *term,
                    "leader completeness: leader n{id} holds entry {i} of term {t}, \
                     but one of term {term} was committed"
                ),
                None => assert!(
                    i <= applied,
                    "leader completeness: leader n{id} (last {last}, applied {applied}) \
                     lacks committed entry {i}"
                ),
            }
        }
    }

    /// Convergence: every replica applied `index` and holds the same values there,
    /// which are the replay of the committed entries. Returns whether the replay was
    /// complete (every index up to `index` was seen applied somewhere).
    pub fn converged(&self, replicas: &[(u16, &Replica)], keys: &[Vec<u8>], index: u64) -> bool {
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let complete = (1..=index).all(|i| self.committed.contains_key(&i));
        if complete {
            for (_, op) in self.committed.range(..=index).map(|(_, v)| v) {
                match op {
                    OwnedOp::Put { key, value } => {
                        model.insert(key.clone(), value.clone());
                    }
                    OwnedOp::Delete { key } => {
                        model.remove(key);
                    }
                    OwnedOp::Noop => {}
                }
            }
        }
        for key in keys {
            let values: Vec<(u16, Option<Vec<u8>>)> = replicas
                .iter()
                .map(|(id, r)| {
                    let store = r.store();
                    assert_eq!(store.applied(), index, "n{id} did not apply {index}");
                    (*id, store.get(key, index).expect("read the final state"))
                })
                .collect();
            for (id, v) in &values {
                assert_eq!(
                    *v,
                    values[0].1,
                    "replicas diverge on {:?} at {index}: n{id} has {v:?}, n{} has {:?}",
                    String::from_utf8_lossy(key),
                    values[0].0,
                    values[0].1
                );
                if complete {
                    assert_eq!(
                        v.as_ref(),
                        model.get(key),
                        "n{id}'s state at {index} is not the replay of the committed log on {:?}",
                        String::from_utf8_lossy(key)
                    );
                }
            }
        }
        complete
    }
}
