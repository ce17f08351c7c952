//! Running one workload operation as one pmkit transaction, also while a
//! compaction runs. pmkit's read barrier heals every pointer of an object a
//! transaction reads whose targets have moved, with one undo record per pointer
//! field, and a heap transaction has room for 64 object records: an operation
//! that reads a few dozen not-yet-healed objects fails with `LogFull` (the
//! library's limit, reported in the run's figures as `preheal_ops`). Such an
//! operation is run again after *pre-heal* transactions: each replays the
//! operation against an [`Overlay`] (its writes, allocations and frees kept in
//! DRAM, never applied) and reads, through the barrier, only the next objects of
//! the operation's path up to a budget of pointer fields, then commits (the heals
//! alone, which change no value). The operation itself then runs as one
//! transaction on a healed path.

use std::collections::HashMap;

use defrag::{DefragError, DefragHeap};
use pmem_core::tx::TxError;

use super::pmkit_store::Pm;
use super::store::{Kind, Obj, Ref, Store, ROOTS};
use super::{apply, Op, Setup};

/// Pointer fields a pre-heal transaction may heal (below the 64 records).
const BUDGET: usize = 44;
/// Pre-heal rounds before an operation gives up.
const ROUNDS: usize = 64;

/// Why an [`Overlay`] run stopped.
enum Stop {
    /// The budget is spent: commit the heals so far.
    Budget,
    /// A real error.
    Real(DefragError),
}

/// A [`Store`] that reads through a transaction and keeps every change in DRAM.
struct Overlay<'p, 'x, 't, 'a> {
    pm: &'p mut Pm<'x, 't, 'a>,
    objs: HashMap<Ref, Obj>,
    roots: [Option<Ref>; ROOTS],
    next_fake: Ref,
    /// Distinct objects read through the transaction so far.
    seen: Vec<Ref>,
    /// Objects healed by earlier rounds (read without spending budget).
    skip: usize,
    spent: usize,
}

impl Store for Overlay<'_, '_, '_, '_> {
    type E = Stop;

    fn fail(msg: String) -> Stop {
        Stop::Real(DefragError::Corrupt(msg))
    }

    fn alloc(&mut self, _k: Kind) -> Result<Ref, Stop> {
        self.next_fake += 16;
        self.objs.insert(self.next_fake, Obj::zero());
        Ok(self.next_fake)
    }

    fn free(&mut self, _k: Kind, _r: Ref) -> Result<(), Stop> {
        Ok(())
    }

    fn get(&mut self, k: Kind, r: Ref) -> Result<Obj, Stop> {
        if let Some(o) = self.objs.get(&r) {
            return Ok(o.clone());
        }
        if !self.seen.contains(&r) {
            if self.seen.len() >= self.skip {
                if self.spent > 0 && self.spent + k.shape().p > BUDGET {
                    return Err(Stop::Budget);
                }
                self.spent += k.shape().p;
            }
            self.seen.push(r);
        }
        self.pm.get(k, r).map_err(Stop::Real)
    }

    fn put(&mut self, _k: Kind, r: Ref, o: &Obj) -> Result<(), Stop> {
        self.objs.insert(r, o.clone());
        Ok(())
    }

    fn root(&mut self, i: usize, k: Kind) -> Result<Ref, Stop> {
        match self.roots[i % ROOTS] {
            Some(r) => Ok(r),
            None => self.pm.root(i, k).map_err(Stop::Real),
        }
    }

    fn set_root(&mut self, i: usize, _k: Kind, r: Ref) -> Result<(), Stop> {
        self.roots[i % ROOTS] = Some(r);
        Ok(())
    }
}

/// Whether `e` is a full transaction log.
fn log_full(e: &DefragError) -> bool {
    matches!(e, DefragError::Tx(TxError::LogFull { .. }))
}

/// Runs `op` as one transaction on `heap`; returns its result and whether it
/// needed pre-heal transactions.
pub fn run(heap: &DefragHeap, w: Setup, op: Op) -> Result<(Option<u64>, bool), String> {
    let err = |e: DefragError| format!("{}: {e}", w.ds.name());
    match heap.transaction(|t| apply(&mut Pm(t), w, op)) {
        Ok(r) => return Ok((r, false)),
        Err(e) if log_full(&e) => {}
        Err(e) => return Err(err(e)),
    }
    for _ in 0..ROUNDS {
        let mut skip = 0;
        loop {
            let done = heap
                .transaction(|t| {
                    let mut pm = Pm(t);
                    let mut ov = Overlay {
                        pm: &mut pm,
                        objs: HashMap::new(),
                        roots: [None; ROOTS],
                        // Fake offsets no pool reaches.
                        next_fake: 1 << 62,
                        seen: Vec::new(),
                        skip,
                        spent: 0,
                    };
                    match apply(&mut ov, w, op) {
                        Ok(_) => Ok((true, ov.seen.len())),
                        Err(Stop::Budget) => Ok((false, ov.seen.len())),
                        Err(Stop::Real(e)) => Err(e),
                    }
                })
                .map_err(err)?;
            skip = done.1;
            if done.0 {
                break;
            }
        }
        match heap.transaction(|t| apply(&mut Pm(t), w, op)) {
            Ok(r) => return Ok((r, true)),
            // Objects moved since the pre-heal: once more.
            Err(e) if log_full(&e) => {}
            Err(e) => return Err(err(e)),
        }
    }
    Err(format!(
        "{}: an operation overflowed the transaction log {ROUNDS} times after pre-healing",
        w.ds.name()
    ))
}
