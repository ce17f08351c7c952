//! Px86 litmus tests: small programs whose reachable crash images are derived by
//! hand, and compared exactly with what the simulator enumerates at the end of the
//! program.
//!
//! Words: `X` and `Y` share one cache line (words 0 and 1 of the first heap line),
//! `Z` lives in the next line. Each outcome lists the observed words in order.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::sim::{Budget, CrashState, FlushOp, Model, SimDomain};
use crate::{PPtr, Pool, PoolError, PoolOptions};

const HEAP: u64 = 4096;
const X: u64 = HEAP;
const Y: u64 = HEAP + 8;
const Z: u64 = HEAP + 64;

/// A litmus program acting on a simulated pool.
type Program = fn(&mut Pool, &SimDomain) -> Result<(), PoolError>;

/// One litmus test.
pub struct Litmus {
    /// Name.
    pub name: &'static str,
    /// What it shows.
    pub claim: &'static str,
    /// Persistency model.
    pub model: Model,
    /// Words observed after the crash.
    pub observe: &'static [u64],
    /// The allowed outcomes, derived by hand.
    pub allowed: &'static [&'static [u64]],
    program: Program,
}

/// The outcome of one litmus test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LitmusResult {
    /// Name of the test.
    pub name: &'static str,
    /// Outcomes the simulator produced.
    pub reachable: BTreeSet<Vec<u64>>,
    /// Outcomes allowed by hand derivation.
    pub allowed: BTreeSet<Vec<u64>>,
}

impl LitmusResult {
    /// Whether the reachable set equals the allowed set.
    pub fn passed(&self) -> bool {
        self.reachable == self.allowed
    }
}

fn w(pool: &mut Pool, off: u64, v: u64) -> Result<(), PoolError> {
    pool.write(PPtr::<u64>::from_offset(off), &v)
}

fn flush(pool: &Pool, off: u64) -> Result<(), PoolError> {
    pool.flush(off, 8)
}

/// All the litmus tests.
pub fn cases() -> Vec<Litmus> {
    vec![
        Litmus {
            name: "same_line_in_order",
            claim: "stores to one line persist in program order (no Y without X)",
            model: Model::Line,
            observe: &[X, Y],
            allowed: &[&[0, 0], &[1, 0], &[1, 1]],
            program: |p, _| {
                w(p, X, 1)?;
                w(p, Y, 1)
            },
        },
        Litmus {
            name: "same_line_word_tearing",
            claim: "in word mode the words of one line persist independently",
            model: Model::Word,
            observe: &[X, Y],
            allowed: &[&[0, 0], &[1, 0], &[0, 1], &[1, 1]],
            program: |p, _| {
                w(p, X, 1)?;
                w(p, Y, 1)
            },
        },
        Litmus {
            name: "different_lines_any_order",
            claim: "unflushed stores to different lines persist in any combination",
            model: Model::Line,
            observe: &[X, Z],
            allowed: &[&[0, 0], &[1, 0], &[0, 1], &[1, 1]],
            program: |p, _| {
                w(p, X, 1)?;
                w(p, Z, 1)
            },
        },
        Litmus {
            name: "clwb_sfence_durable",
            claim: "a flushed and fenced line always persists",
            model: Model::Line,
            observe: &[X, Z],
            allowed: &[&[1, 0], &[1, 1]],
            program: |p, _| {
                w(p, X, 1)?;
                flush(p, X)?;
                p.drain()?;
                w(p, Z, 1)
            },
        },
        Litmus {
            name: "clwb_without_fence",
            claim: "a flush without a later fence guarantees nothing",
            model: Model::Line,
            observe: &[X, Z],
            allowed: &[&[0, 0], &[1, 0], &[0, 1], &[1, 1]],
            program: |p, _| {
                w(p, X, 1)?;
                flush(p, X)?;
                w(p, Z, 1)
            },
        },
        Litmus {
            name: "clflushopt_needs_fence",
            claim: "clflushopt, like clwb, waits for a fence",
            model: Model::Line,
            observe: &[X, Z],
            allowed: &[&[0, 0], &[1, 0], &[0, 1], &[1, 1]],
            program: |p, sim| {
                sim.set_flush_op(FlushOp::ClflushOpt);
                w(p, X, 1)?;
                flush(p, X)?;
                w(p, Z, 1)
            },
        },
        Litmus {
            name: "clflush_is_ordered",
            claim: "clflush needs no fence: the line persists once it is issued",
            model: Model::Line,
            observe: &[X, Z],
            allowed: &[&[1, 0], &[1, 1]],
            program: |p, sim| {
                sim.set_flush_op(FlushOp::Clflush);
                w(p, X, 1)?;
                flush(p, X)?;
                w(p, Z, 1)
            },
        },
        Litmus {
            name: "fence_of_another_thread",
            claim: "another thread's fence does not complete this thread's clwb",
            model: Model::Line,
            observe: &[X],
            allowed: &[&[0], &[1]],
            program: |p, _| {
                w(p, X, 1)?;
                flush(p, X)?;
                let shared: &Pool = p;
                match std::thread::scope(|s| s.spawn(|| shared.drain()).join()) {
                    Ok(r) => r,
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            },
        },
        Litmus {
            name: "fence_before_flush",
            claim: "a fence before the flush does not make the line durable",
            model: Model::Line,
            observe: &[X],
            allowed: &[&[0], &[1]],
            program: |p, _| {
                w(p, X, 1)?;
                p.drain()?;
                flush(p, X)
            },
        },
        Litmus {
            name: "nt_store_fenced",
            claim: "a non-temporal store is durable after the next fence",
            model: Model::Line,
            observe: &[X],
            allowed: &[&[1]],
            program: |p, _| {
                p.write_nt_u64(PPtr::from_offset(X), 1)?;
                p.drain()
            },
        },
        Litmus {
            name: "nt_store_unfenced",
            claim: "a non-temporal store without a fence may be lost",
            model: Model::Line,
            observe: &[X],
            allowed: &[&[0], &[1]],
            program: |p, _| p.write_nt_u64(PPtr::from_offset(X), 1),
        },
        Litmus {
            name: "same_word_overwrite",
            claim: "a word persists one of the values it held, in order",
            model: Model::Line,
            observe: &[X],
            allowed: &[&[0], &[1], &[2]],
            program: |p, _| {
                w(p, X, 1)?;
                w(p, X, 2)
            },
        },
        Litmus {
            name: "durable_then_overwritten",
            claim: "after a durable store, a crash leaves it or a later value, never the older one",
            model: Model::Line,
            observe: &[X],
            allowed: &[&[1], &[2]],
            program: |p, _| {
                w(p, X, 1)?;
                flush(p, X)?;
                p.drain()?;
                w(p, X, 2)
            },
        },
        Litmus {
            name: "wide_store_line_mode",
            claim: "a 16-byte write is two word stores in no promised order: any subset persists",
            model: Model::Line,
            observe: &[X, Y],
            allowed: &[&[0, 0], &[1, 0], &[0, 1], &[1, 1]],
            program: |p, _| p.write_bytes(X, &[1u64, 1].map(u64::to_le_bytes).concat()),
        },
        Litmus {
            name: "wide_store_word_mode",
            claim: "in word mode a 16-byte write can tear either way",
            model: Model::Word,
            observe: &[X, Y],
            allowed: &[&[0, 0], &[1, 0], &[0, 1], &[1, 1]],
            program: |p, _| p.write_bytes(X, &[1u64, 1].map(u64::to_le_bytes).concat()),
        },
        Litmus {
            name: "eadr_global_prefix",
            claim: "with eADR a crash leaves a prefix of the global store order",
            model: Model::Eadr,
            observe: &[X, Z],
            allowed: &[&[0, 0], &[1, 0], &[1, 1]],
            program: |p, _| {
                w(p, X, 1)?;
                w(p, Z, 1)
            },
        },
        Litmus {
            name: "eadr_fence_makes_durable",
            claim: "with eADR, stores before a fence are durable without any flush",
            model: Model::Eadr,
            observe: &[X, Z],
            allowed: &[&[1, 0], &[1, 1]],
            program: |p, _| {
                w(p, X, 1)?;
                p.drain()?;
                w(p, Z, 1)
            },
        },
    ]
}

/// Runs one litmus test: the program on a simulated pool, every crash image at its
/// end (exhaustively), the observed words of each.
pub fn run(case: &Litmus) -> Result<LitmusResult, PoolError> {
    let (mut pool, sim): (Pool, Arc<SimDomain>) =
        Pool::simulated(&PoolOptions::new("litmus", 16 * 1024))?;
    (case.program)(&mut pool, &sim)?;
    let trace = sim.trace();
    drop(pool);
    let state = CrashState::new(&trace, trace.events.len(), case.model);
    let selection = state.select(&Budget {
        exhaustive_up_to: 1 << 16,
        ..Budget::default()
    });
    let mut reachable = BTreeSet::new();
    for cut in &selection.cuts {
        let image = state.materialize(cut);
        let word = |off: u64| {
            let o = off as usize;
            u64::from_le_bytes(image[o..o + 8].try_into().unwrap_or([0; 8]))
        };
        reachable.insert(case.observe.iter().map(|&o| word(o)).collect::<Vec<_>>());
    }
    let allowed = case.allowed.iter().map(|o| o.to_vec()).collect();
    Ok(LitmusResult {
        name: case.name,
        reachable,
        allowed,
    })
}

/// Runs every litmus test.
pub fn run_all() -> Result<Vec<LitmusResult>, PoolError> {
    cases().iter().map(run).collect()
}
