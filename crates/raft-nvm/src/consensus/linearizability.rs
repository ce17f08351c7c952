//! A linearizability checker for key-value histories, after Wing & Gong with the
//! memoisation of Lowe and Knossos: each key is a compare-and-set register, and a
//! history is linearizable if for every key some order of its operations, consistent
//! with real time (an operation that completed before another was invoked comes
//! first), explains every result.
//!
//! Operations whose outcome the client never learned (a timeout, a dropped
//! connection) are [`Outcome::Unknown`]: they may have taken effect at any point
//! after their invocation, or never. The search is exponential in the worst case but
//! memoised on (set of linearized operations, register value), which keeps the
//! per-key histories of a cluster test (tens of operations, a few concurrent) fast.
//!
//! ```
//! use raft_nvm::linearizability::{check, Call, Op, Outcome};
//!
//! let history = vec![
//!     Call { client: 1, key: b"x".to_vec(), op: Op::Set(b"1".to_vec()), outcome: Outcome::Ok, invoke: 0, complete: Some(1) },
//!     Call { client: 2, key: b"x".to_vec(), op: Op::Get, outcome: Outcome::Value(None), invoke: 2, complete: Some(3) },
//! ];
//! // The read began after the write completed, yet saw nothing: a stale read.
//! assert!(check(&history).is_err());
//! ```

use std::collections::{BTreeMap, HashSet};

/// An operation on one key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Reads the value.
    Get,
    /// Sets the value.
    Set(Vec<u8>),
    /// Removes the key.
    Delete,
    /// Sets `new` if the value is `expected` (`None`: the key is absent).
    Cas {
        /// The value the key must hold.
        expected: Option<Vec<u8>>,
        /// The value it gets.
        new: Vec<u8>,
    },
}

/// What the client was told.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// A read's value (`None`: absent).
    Value(Option<Vec<u8>>),
    /// A set or delete was acknowledged.
    Ok,
    /// A compare-and-set's result.
    Swapped(bool),
    /// The client does not know (timeout, error after sending): the operation may
    /// or may not have taken effect.
    Unknown,
}

/// One client call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// Who made it (for messages only).
    pub client: u64,
    /// The key.
    pub key: Vec<u8>,
    /// What it did.
    pub op: Op,
    /// What it was told.
    pub outcome: Outcome,
    /// When it was invoked (any monotonic clock).
    pub invoke: u64,
    /// When it completed; `None` if it never did (then the outcome is unknown).
    pub complete: Option<u64>,
}

/// A key whose history no order explains.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The key.
    pub key: Vec<u8>,
    /// Its calls, in invocation order.
    pub calls: Vec<Call>,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "history of key {:?} is not linearizable:",
            String::from_utf8_lossy(&self.key)
        )?;
        for c in &self.calls {
            writeln!(
                f,
                "  client {} [{}, {}] {:?} -> {:?}",
                c.client,
                c.invoke,
                c.complete.map_or("-".into(), |t| t.to_string()),
                c.op,
                c.outcome
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for Violation {}

/// Checks a whole history, key by key (keys start absent).
pub fn check(history: &[Call]) -> Result<(), Violation> {
    let mut by_key: BTreeMap<&[u8], Vec<&Call>> = BTreeMap::new();
    for c in history {
        by_key.entry(&c.key).or_default().push(c);
    }
    for (key, mut calls) in by_key {
        calls.sort_by_key(|c| c.invoke);
        if !KeySearch::new(&calls).run() {
            return Err(Violation {
                key: key.to_vec(),
                calls: calls.into_iter().cloned().collect(),
            });
        }
    }
    Ok(())
}

/// Applies `op` to `state`; returns the new state if `outcome` is what it returns.
fn apply(op: &Op, outcome: &Outcome, state: &Option<Vec<u8>>) -> Option<Option<Vec<u8>>> {
    let unknown = *outcome == Outcome::Unknown;
    match op {
        Op::Get => (unknown || *outcome == Outcome::Value(state.clone())).then(|| state.clone()),
        Op::Set(v) => (unknown || *outcome == Outcome::Ok).then(|| Some(v.clone())),
        Op::Delete => (unknown || *outcome == Outcome::Ok).then_some(None),
        Op::Cas { expected, new } => {
            let swaps = state == expected;
            if !unknown && *outcome != Outcome::Swapped(swaps) {
                return None;
            }
            Some(if swaps {
                Some(new.clone())
            } else {
                state.clone()
            })
        }
    }
}

/// The search over one key's calls.
struct KeySearch<'a> {
    calls: &'a [&'a Call],
    /// Response times (`u64::MAX` for calls that never completed).
    resp: Vec<u64>,
    /// Calls that must be linearized (their outcome is known).
    must: Vec<bool>,
    memo: HashSet<(Vec<u64>, Option<Vec<u8>>)>,
}

impl<'a> KeySearch<'a> {
    fn new(calls: &'a [&'a Call]) -> Self {
        KeySearch {
            calls,
            resp: calls
                .iter()
                .map(|c| c.complete.unwrap_or(u64::MAX))
                .collect(),
            must: calls
                .iter()
                .map(|c| c.complete.is_some() && c.outcome != Outcome::Unknown)
                .collect(),
            memo: HashSet::new(),
        }
    }

    fn run(&mut self) -> bool {
        let words = self.calls.len().div_ceil(64);
        self.dfs(&mut vec![0u64; words], None)
    }

    fn done(&self, set: &[u64], i: usize) -> bool {
        set[i / 64] & (1 << (i % 64)) != 0
    }

    fn dfs(&mut self, set: &mut Vec<u64>, state: Option<Vec<u8>>) -> bool {
        let n = self.calls.len();
        if (0..n).all(|i| !self.must[i] || self.done(set, i)) {
            return true;
        }
        if !self.memo.insert((set.clone(), state.clone())) {
            return false;
        }
        // Nothing can be linearized after a call that has responded while it is
        // still pending: the earliest response among the pending calls bounds which
        // call may come next.
        let horizon = (0..n)
            .filter(|&i| !self.done(set, i))
            .map(|i| self.resp[i])
            .min()
            .unwrap_or(u64::MAX);
        for i in 0..n {
            if self.done(set, i) || self.calls[i].invoke > horizon {
                continue;
            }
            let c = self.calls[i];
            if let Some(next) = apply(&c.op, &c.outcome, &state) {
                set[i / 64] |= 1 << (i % 64);
                let ok = self.dfs(set, next);
                set[i / 64] &= !(1 << (i % 64));
                if ok {
                    return true;
                }
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(client: u64, op: Op, outcome: Outcome, invoke: u64, complete: Option<u64>) -> Call {
        Call {
            client,
            key: b"k".to_vec(),
            op,
            outcome,
            invoke,
            complete,
        }
    }

    fn v(s: &str) -> Option<Vec<u8>> {
        Some(s.as_bytes().to_vec())
    }

    #[test]
    fn sequential_histories_check_their_results() {
        let ok = vec![
            call(1, Op::Set(b"a".to_vec()), Outcome::Ok, 0, Some(1)),
            call(1, Op::Get, Outcome::Value(v("a")), 2, Some(3)),
            call(
                1,
                Op::Cas {
                    expected: v("a"),
                    new: b"b".to_vec(),
                },
                Outcome::Swapped(true),
                4,
                Some(5),
            ),
            call(
                1,
                Op::Cas {
                    expected: v("a"),
                    new: b"c".to_vec(),
                },
                Outcome::Swapped(false),
                6,
                Some(7),
            ),
            call(1, Op::Delete, Outcome::Ok, 8, Some(9)),
            call(1, Op::Get, Outcome::Value(None), 10, Some(11)),
        ];
        assert_eq!(check(&ok), Ok(()));
        let mut bad = ok.clone();
        bad[3].outcome = Outcome::Swapped(true);
        assert!(
            check(&bad).is_err(),
            "a CAS cannot succeed on a value it does not hold"
        );
    }

    #[test]
    fn concurrent_calls_may_take_either_order() {
        let h = vec![
            call(1, Op::Set(b"a".to_vec()), Outcome::Ok, 0, Some(10)),
            call(2, Op::Get, Outcome::Value(None), 1, Some(2)),
            call(3, Op::Get, Outcome::Value(v("a")), 3, Some(4)),
        ];
        assert_eq!(check(&h), Ok(()));
        // But once a read saw the new value, a later read cannot see the old one.
        let h2 = vec![
            call(1, Op::Set(b"a".to_vec()), Outcome::Ok, 0, Some(10)),
            call(3, Op::Get, Outcome::Value(v("a")), 1, Some(2)),
            call(2, Op::Get, Outcome::Value(None), 3, Some(4)),
        ];
        assert!(check(&h2).is_err());
    }

    #[test]
    fn unknown_outcomes_may_or_may_not_have_happened() {
        let took_effect = vec![
            call(1, Op::Set(b"a".to_vec()), Outcome::Unknown, 0, None),
            call(2, Op::Get, Outcome::Value(v("a")), 5, Some(6)),
        ];
        assert_eq!(check(&took_effect), Ok(()));
        let did_not = vec![
            call(1, Op::Set(b"a".to_vec()), Outcome::Unknown, 0, None),
            call(2, Op::Get, Outcome::Value(None), 5, Some(6)),
        ];
        assert_eq!(check(&did_not), Ok(()));
        let invented = vec![call(2, Op::Get, Outcome::Value(v("zzz")), 5, Some(6))];
        assert!(check(&invented).is_err(), "a value nobody wrote");
    }

    #[test]
    fn keys_are_independent_registers() {
        let mut h = vec![call(1, Op::Set(b"a".to_vec()), Outcome::Ok, 0, Some(1))];
        let mut other = call(2, Op::Get, Outcome::Value(None), 2, Some(3));
        other.key = b"other".to_vec();
        h.push(other);
        assert_eq!(check(&h), Ok(()));
        let e = check(&[call(2, Op::Get, Outcome::Value(v("x")), 0, Some(1))]).expect_err("bad");
        assert!(e.to_string().contains("not linearizable"));
    }

    use proptest::prelude::*;

    /// Histories produced by a real register: each call takes effect at a point
    /// inside its interval, in the order of those points.
    fn real_history(spec: &[(u8, u8, u64, u64, u64)]) -> Vec<Call> {
        // (op kind, value, invoke, effect offset, completion offset)
        let mut calls: Vec<(u64, Call)> = spec
            .iter()
            .enumerate()
            .map(|(i, &(kind, val, invoke, at, len))| {
                let op = match kind % 4 {
                    0 => Op::Get,
                    1 => Op::Set(vec![val]),
                    2 => Op::Delete,
                    _ => Op::Cas {
                        expected: Some(vec![val / 2]),
                        new: vec![val],
                    },
                };
                let effect = invoke * 4 + 1 + at % (len + 1);
                let c = call(
                    i as u64,
                    op,
                    Outcome::Ok,
                    invoke * 4,
                    Some(invoke * 4 + 2 + len),
                );
                (effect, c)
            })
            .collect();
        calls.sort_by_key(|(effect, c)| (*effect, c.client));
        let mut state = None;
        for (_, c) in &mut calls {
            c.outcome = match &c.op {
                Op::Get => Outcome::Value(state.clone()),
                Op::Set(v) => {
                    state = Some(v.clone());
                    Outcome::Ok
                }
                Op::Delete => {
                    state = None;
                    Outcome::Ok
                }
                Op::Cas { expected, new } => {
                    let swaps = state == *expected;
                    if swaps {
                        state = Some(new.clone());
                    }
                    Outcome::Swapped(swaps)
                }
            };
        }
        calls.into_iter().map(|(_, c)| c).collect()
    }

    proptest! {
        #[test]
        fn histories_of_a_real_register_are_accepted(
            spec in proptest::collection::vec((0u8..4, 0u8..6, 0u64..20, 0u64..8, 0u64..8), 1..14)
        ) {
            let h = real_history(&spec);
            prop_assert_eq!(check(&h), Ok(()));
        }

        #[test]
        fn a_read_of_a_value_never_written_is_rejected(
            spec in proptest::collection::vec((0u8..4, 0u8..6, 0u64..20, 0u64..8, 0u64..8), 1..14),
            which in any::<usize>(),
        ) {
            let mut h = real_history(&spec);
            let reads: Vec<usize> = (0..h.len()).filter(|&i| h[i].op == Op::Get).collect();
            prop_assume!(!reads.is_empty());
            let i = reads[which % reads.len()];
            h[i].outcome = Outcome::Value(Some(vec![200]));
            prop_assert!(check(&h).is_err());
        }
    }

    #[test]
    fn many_concurrent_writers_stay_fast() {
        // 12 overlapping writers, then a read of the last-invoked one's value.
        let mut h: Vec<Call> = (0..12)
            .map(|i| call(i, Op::Set(vec![i as u8]), Outcome::Ok, i, Some(100 + i)))
            .collect();
        h.push(call(
            99,
            Op::Get,
            Outcome::Value(Some(vec![5])),
            200,
            Some(201),
        ));
        let t = std::time::Instant::now();
        assert_eq!(check(&h), Ok(()));
        assert!(t.elapsed() < std::time::Duration::from_secs(5));
    }
}
