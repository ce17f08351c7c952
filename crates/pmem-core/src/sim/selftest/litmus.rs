//! Px86 litmus tests: small programs whose reachable crash images are derived by
//! hand from the model's rules (not from the code), and compared exactly with what
//! the simulator enumerates at the crash point: the end of the program, or a label
//! in its middle. Each claim carries its one-line derivation.
//!
//! Words: `X`, `Y` and `V` share one cache line (words 0, 1 and 2 of the first heap
//! line), `Z` lives in the next line and `W` (the word of the atomics) in the one
//! after. Each outcome lists the observed words in order. Programs marked "two
//! threads" run part of their events on a second thread, joined in turn, so the
//! interleaving is fixed.
//!
//! [`model_mutants`] runs every case under each deliberately broken model
//! ([`ModelMutant`]): each must make at least one case fail.

use std::collections::BTreeSet;
use std::sync::Arc;

use std::sync::atomic::Ordering;

use crate::sim::{Budget, CrashState, EventKind, FlushOp, Model, ModelMutant, SimDomain};
use crate::{PAtomicU64, PPtr, Pool, PoolError, PoolOptions};

const HEAP: u64 = 4096;
const X: u64 = HEAP;
const Y: u64 = HEAP + 8;
const V: u64 = HEAP + 16;
const Z: u64 = HEAP + 64;
const W: u64 = HEAP + 128;

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
    /// Crash at the first label of this name instead of at the end.
    pub crash_at: Option<&'static str>,
    /// Whether the program uses two threads.
    pub threads: u8,
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

fn words(vals: &[u64]) -> Vec<u8> {
    vals.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The pool-resident atomic at `W`.
fn atomic(pool: &Pool) -> Result<&PAtomicU64, PoolError> {
    // SAFETY: the word at W is accessed only through this type in every program.
    unsafe { pool.get_shared(PPtr::<PAtomicU64>::from_offset(W)) }
}

/// Runs `f` on a second thread and waits for it (a fixed interleaving).
fn on_thread<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| match s.spawn(f).join() {
        Ok(r) => r,
        Err(panic) => std::panic::resume_unwind(panic),
    })
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
            crash_at: None,
            threads: 1,
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
            crash_at: None,
            threads: 1,
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
            crash_at: None,
            threads: 1,
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
            crash_at: None,
            threads: 1,
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
            crash_at: None,
            threads: 1,
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
            crash_at: None,
            threads: 1,
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
            crash_at: None,
            threads: 1,
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
            crash_at: None,
            threads: 2,
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
            crash_at: None,
            threads: 1,
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
            crash_at: None,
            threads: 1,
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
            crash_at: None,
            threads: 1,
            program: |p, _| p.write_nt_u64(PPtr::from_offset(X), 1),
        },
        Litmus {
            name: "same_word_overwrite",
            claim: "a word persists one of the values it held, in order",
            model: Model::Line,
            observe: &[X],
            allowed: &[&[0], &[1], &[2]],
            crash_at: None,
            threads: 1,
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
            crash_at: None,
            threads: 1,
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
            crash_at: None,
            threads: 1,
            program: |p, _| p.write_bytes(X, &[1u64, 1].map(u64::to_le_bytes).concat()),
        },
        Litmus {
            name: "wide_store_word_mode",
            claim: "in word mode a 16-byte write can tear either way",
            model: Model::Word,
            observe: &[X, Y],
            allowed: &[&[0, 0], &[1, 0], &[0, 1], &[1, 1]],
            crash_at: None,
            threads: 1,
            program: |p, _| p.write_bytes(X, &[1u64, 1].map(u64::to_le_bytes).concat()),
        },
        Litmus {
            name: "eadr_global_prefix",
            claim: "with eADR a crash leaves a prefix of the global store order",
            model: Model::Eadr,
            observe: &[X, Z],
            allowed: &[&[0, 0], &[1, 0], &[1, 1]],
            crash_at: None,
            threads: 1,
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
            crash_at: None,
            threads: 1,
            program: |p, _| {
                w(p, X, 1)?;
                p.drain()?;
                w(p, Z, 1)
            },
        },
        Litmus {
            name: "crash_mid_program_after_fence",
            claim: "at a crash between `clwb X; fence` and `X=2`, X is 1: the fence made it durable and X=2 has not happened",
            model: Model::Line,
            observe: &[X],
            allowed: &[&[1]],
            crash_at: Some("crash"),
            threads: 1,
            program: |p, sim| {
                w(p, X, 1)?;
                flush(p, X)?;
                p.drain()?;
                sim.label("crash");
                w(p, X, 2)
            },
        },
        Litmus {
            name: "crash_mid_program_before_fence",
            claim: "crashed between `clwb X` and its fence, X may or may not have persisted",
            model: Model::Line,
            observe: &[X],
            allowed: &[&[0], &[1]],
            crash_at: Some("crash"),
            threads: 1,
            program: |p, sim| {
                w(p, X, 1)?;
                flush(p, X)?;
                sim.label("crash");
                p.drain()
            },
        },
        Litmus {
            name: "clflush_mid_sequence_data_first",
            claim: "clflush mode, `Z=1; clflush Z; X=1; [crash]; clflush X`: Z durable by its clflush, X either",
            model: Model::Line,
            observe: &[X, Z],
            allowed: &[&[0, 1], &[1, 1]],
            crash_at: Some("crash"),
            threads: 1,
            program: |p, sim| {
                sim.set_flush_op(FlushOp::Clflush);
                w(p, Z, 1)?;
                flush(p, Z)?;
                w(p, X, 1)?;
                sim.label("crash");
                flush(p, X)?;
                p.drain()
            },
        },
        Litmus {
            name: "clflush_mid_sequence_commit_first",
            claim: "clflush mode, `X=1; clflush X; Z=1; [crash]; clflush Z`: the commit X without the data Z is reachable",
            model: Model::Line,
            observe: &[X, Z],
            allowed: &[&[1, 0], &[1, 1]],
            crash_at: Some("crash"),
            threads: 1,
            program: |p, sim| {
                sim.set_flush_op(FlushOp::Clflush);
                w(p, X, 1)?;
                flush(p, X)?;
                w(p, Z, 1)?;
                sim.label("crash");
                flush(p, Z)?;
                p.drain()
            },
        },
        Litmus {
            name: "memcpy_three_words_any_subset",
            claim: "one 24-byte write into one line is one unordered group: all 8 subsets of X, Y, V",
            model: Model::Line,
            observe: &[X, Y, V],
            allowed: &[&[0, 0, 0], &[1, 0, 0], &[0, 1, 0], &[0, 0, 1], &[1, 1, 0], &[1, 0, 1], &[0, 1, 1], &[1, 1, 1]],
            crash_at: None,
            threads: 1,
            program: |p, _| p.write_bytes(X, &words(&[1, 1, 1])),
        },
        Litmus {
            name: "ordered_words_persist_as_prefixes",
            claim: "write_words_ordered stores word by word: only prefixes of X, Y, V",
            model: Model::Line,
            observe: &[X, Y, V],
            allowed: &[&[0, 0, 0], &[1, 0, 0], &[1, 1, 0], &[1, 1, 1]],
            crash_at: None,
            threads: 1,
            program: |p, _| p.write_words_ordered(X, &[1, 1, 1]),
        },
        Litmus {
            name: "memcpy_then_store_same_line",
            claim: "group {X, Y} then V in one line: V persists only after both X and Y; X, Y any subset",
            model: Model::Line,
            observe: &[X, Y, V],
            allowed: &[&[0, 0, 0], &[1, 0, 0], &[0, 1, 0], &[1, 1, 0], &[1, 1, 1]],
            crash_at: None,
            threads: 1,
            program: |p, _| {
                p.write_bytes(X, &words(&[1, 1]))?;
                w(p, V, 1)
            },
        },
        Litmus {
            name: "memcpy_over_a_durable_word",
            claim: "X=1 durable, then one write of X=2, Y=2: each of X (1 or 2) and Y (0 or 2), independently",
            model: Model::Line,
            observe: &[X, Y],
            allowed: &[&[1, 0], &[2, 0], &[1, 2], &[2, 2]],
            crash_at: None,
            threads: 1,
            program: |p, _| {
                w(p, X, 1)?;
                flush(p, X)?;
                p.drain()?;
                p.write_bytes(X, &words(&[2, 2]))
            },
        },
        Litmus {
            name: "cas_is_a_fence",
            claim: "`Z=1; clwb Z; CAS W`: the locked RMW fences the clwb, so Z is durable; W itself was never flushed",
            model: Model::Line,
            observe: &[Z, W],
            allowed: &[&[1, 0], &[1, 1]],
            crash_at: None,
            threads: 1,
            program: |p, _| {
                w(p, Z, 1)?;
                flush(p, Z)?;
                let _ = atomic(p)?.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire);
                Ok(())
            },
        },
        Litmus {
            name: "failed_cas_is_a_fence_too",
            claim: "a CAS that fails is still a locked instruction: Z durable, W unchanged",
            model: Model::Line,
            observe: &[Z, W],
            allowed: &[&[1, 0]],
            crash_at: None,
            threads: 1,
            program: |p, _| {
                w(p, Z, 1)?;
                flush(p, Z)?;
                let _ = atomic(p)?.compare_exchange(5, 1, Ordering::AcqRel, Ordering::Acquire);
                Ok(())
            },
        },
        Litmus {
            name: "cas_before_the_flush_is_no_fence_for_it",
            claim: "`Z=1; CAS W; clwb Z`: the RMW came before the flush, nothing fences it: all four",
            model: Model::Line,
            observe: &[Z, W],
            allowed: &[&[0, 0], &[1, 0], &[0, 1], &[1, 1]],
            crash_at: None,
            threads: 1,
            program: |p, _| {
                w(p, Z, 1)?;
                let _ = atomic(p)?.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire);
                flush(p, Z)
            },
        },
        Litmus {
            name: "swap_and_fetch_add_are_fences",
            claim: "`Z=1; clwb Z; swap W; X=1; clwb X; fetch_add W`: each RMW fences the clwb before it: Z and X durable",
            model: Model::Line,
            observe: &[X, Z],
            allowed: &[&[1, 1]],
            crash_at: None,
            threads: 1,
            program: |p, _| {
                w(p, Z, 1)?;
                flush(p, Z)?;
                atomic(p)?.swap(3, Ordering::AcqRel);
                w(p, X, 1)?;
                flush(p, X)?;
                atomic(p)?.fetch_add(1, Ordering::AcqRel);
                Ok(())
            },
        },
        Litmus {
            name: "seqcst_store_is_a_fence",
            claim: "a SeqCst store is an xchg: `Z=1; clwb Z; store(SeqCst) W` leaves Z durable",
            model: Model::Line,
            observe: &[Z],
            allowed: &[&[1]],
            crash_at: None,
            threads: 1,
            program: |p, _| {
                w(p, Z, 1)?;
                flush(p, Z)?;
                atomic(p)?.store(7, Ordering::SeqCst);
                Ok(())
            },
        },
        Litmus {
            name: "release_store_is_no_fence",
            claim: "a Release store is a plain mov: `Z=1; clwb Z; store(Release) W` guarantees nothing",
            model: Model::Line,
            observe: &[Z],
            allowed: &[&[0], &[1]],
            crash_at: None,
            threads: 1,
            program: |p, _| {
                w(p, Z, 1)?;
                flush(p, Z)?;
                atomic(p)?.store(7, Ordering::Release);
                // An API event after the raw store, so the recorder sees it.
                p.label("after the store");
                Ok(())
            },
        },
        Litmus {
            name: "cas_of_another_thread_is_no_fence",
            claim: "two threads: T0 `Z=1; clwb Z`, then T1 `CAS W`: another thread's RMW does not fence T0's clwb",
            model: Model::Line,
            observe: &[Z],
            allowed: &[&[0], &[1]],
            crash_at: None,
            threads: 2,
            program: |p, _| {
                w(p, Z, 1)?;
                flush(p, Z)?;
                let shared: &Pool = p;
                on_thread(|| {
                    atomic(shared)
                        .map(|a| a.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire))
                        .map(|_| ())
                })
            },
        },
        Litmus {
            name: "nt_store_and_cached_store_same_line_unordered",
            claim: "an NT store bypasses the cache: `nt X=1; Y=1` in one line persist in any combination",
            model: Model::Line,
            observe: &[X, Y],
            allowed: &[&[0, 0], &[1, 0], &[0, 1], &[1, 1]],
            crash_at: None,
            threads: 1,
            program: |p, _| {
                p.write_nt_u64(PPtr::from_offset(X), 1)?;
                w(p, Y, 1)
            },
        },
        Litmus {
            name: "nt_store_fenced_by_an_rmw",
            claim: "a locked RMW is a fence for NT stores too: `nt X=1; CAS W` leaves X durable",
            model: Model::Line,
            observe: &[X],
            allowed: &[&[1]],
            crash_at: None,
            threads: 1,
            program: |p, _| {
                p.write_nt_u64(PPtr::from_offset(X), 1)?;
                let _ = atomic(p)?.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire);
                Ok(())
            },
        },
        Litmus {
            name: "nt_store_fenced_by_another_thread",
            claim: "two threads: T0 `nt X=1`, T1 `fence`: only T0's own fence drains its NT store",
            model: Model::Line,
            observe: &[X],
            allowed: &[&[0], &[1]],
            crash_at: None,
            threads: 2,
            program: |p, _| {
                p.write_nt_u64(PPtr::from_offset(X), 1)?;
                let shared: &Pool = p;
                on_thread(|| shared.drain())
            },
        },
        Litmus {
            name: "word_mode_flushed_line_is_durable",
            claim: "word model: `X=1; Y=1; clwb line; fence`: both words durable",
            model: Model::Word,
            observe: &[X, Y],
            allowed: &[&[1, 1]],
            crash_at: None,
            threads: 1,
            program: |p, _| {
                w(p, X, 1)?;
                w(p, Y, 1)?;
                p.flush(X, 16)?;
                p.drain()
            },
        },
        Litmus {
            name: "word_mode_ordered_words_tear",
            claim: "word model: even word-by-word stores tear: any subset of X, Y",
            model: Model::Word,
            observe: &[X, Y],
            allowed: &[&[0, 0], &[1, 0], &[0, 1], &[1, 1]],
            crash_at: None,
            threads: 1,
            program: |p, _| p.write_words_ordered(X, &[1, 1]),
        },
        Litmus {
            name: "eadr_memcpy_is_a_prefix_of_calls_then_a_subset",
            claim: "eADR: `Z=1` then one write of X, Y: nothing, Z, or Z with any subset of {X, Y}",
            model: Model::Eadr,
            observe: &[X, Y, Z],
            allowed: &[&[0, 0, 0], &[0, 0, 1], &[1, 0, 1], &[0, 1, 1], &[1, 1, 1]],
            crash_at: None,
            threads: 1,
            program: |p, _| {
                w(p, Z, 1)?;
                p.write_bytes(X, &words(&[1, 1]))
            },
        },
        Litmus {
            name: "eadr_nt_store_waits_for_a_fence",
            claim: "eADR: caches persist but the WC buffer does not: `nt X=1` alone may be lost",
            model: Model::Eadr,
            observe: &[X],
            allowed: &[&[0], &[1]],
            crash_at: None,
            threads: 1,
            program: |p, _| p.write_nt_u64(PPtr::from_offset(X), 1),
        },
        Litmus {
            name: "eadr_store_then_fence_then_store",
            claim: "eADR: `X=1; fence; Z=1; Y=1`: X durable; then a prefix of Z, Y",
            model: Model::Eadr,
            observe: &[X, Y, Z],
            allowed: &[&[1, 0, 0], &[1, 0, 1], &[1, 1, 1]],
            crash_at: None,
            threads: 1,
            program: |p, _| {
                w(p, X, 1)?;
                p.drain()?;
                w(p, Z, 1)?;
                w(p, Y, 1)
            },
        },
        Litmus {
            name: "two_threads_each_fence_their_own",
            claim: "two threads: T0 `X=1; clwb; fence`, T1 `Z=1; clwb; fence`: both durable",
            model: Model::Line,
            observe: &[X, Z],
            allowed: &[&[1, 1]],
            crash_at: None,
            threads: 2,
            program: |p, _| {
                w(p, X, 1)?;
                flush(p, X)?;
                p.drain()?;
                let q: &mut Pool = p;
                on_thread(move || {
                    w(q, Z, 1)?;
                    flush(q, Z)?;
                    q.drain()
                })
            },
        },
        Litmus {
            name: "two_threads_only_one_fences",
            claim: "two threads: T0 `X=1; clwb X`, T1 `Z=1; clwb Z; fence`: Z durable, X either",
            model: Model::Line,
            observe: &[X, Z],
            allowed: &[&[0, 1], &[1, 1]],
            crash_at: None,
            threads: 2,
            program: |p, _| {
                w(p, X, 1)?;
                flush(p, X)?;
                let q: &mut Pool = p;
                on_thread(move || {
                    w(q, Z, 1)?;
                    flush(q, Z)?;
                    q.drain()
                })
            },
        },
        Litmus {
            name: "two_threads_same_line_keep_their_order",
            claim: "two threads: T0 `X=1`, then T1 `Y=1`, same line: the line's order holds across threads",
            model: Model::Line,
            observe: &[X, Y],
            allowed: &[&[0, 0], &[1, 0], &[1, 1]],
            crash_at: None,
            threads: 2,
            program: |p, _| {
                w(p, X, 1)?;
                let q: &mut Pool = p;
                on_thread(move || w(q, Y, 1))
            },
        },
    ]
}

/// Runs one litmus test: the program on a simulated pool, every crash image at its
/// crash point (exhaustively), the observed words of each.
pub fn run(case: &Litmus) -> Result<LitmusResult, PoolError> {
    run_with(case, ModelMutant::None)
}

/// As [`run`], under a deliberately broken model.
pub fn run_with(case: &Litmus, mutant: ModelMutant) -> Result<LitmusResult, PoolError> {
    let (mut pool, sim): (Pool, Arc<SimDomain>) =
        Pool::simulated(&PoolOptions::new("litmus", 16 * 1024))?;
    (case.program)(&mut pool, &sim)?;
    let trace = sim.trace();
    drop(pool);
    let point = match case.crash_at {
        None => trace.events.len(),
        Some(name) => trace
            .events
            .iter()
            .position(|e| e.kind == EventKind::Label(name))
            .unwrap_or(trace.events.len()),
    };
    let state = CrashState::with_mutant(&trace, point, case.model, mutant);
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

/// A broken model and the litmus tests it fails (it must fail at least one).
#[derive(Clone, Debug)]
pub struct MutantResult {
    /// The broken variant.
    pub mutant: ModelMutant,
    /// The names of the cases whose reachable set differs from the allowed one.
    pub failed: Vec<&'static str>,
}

impl MutantResult {
    /// Whether some litmus test caught the mutant.
    pub fn caught(&self) -> bool {
        !self.failed.is_empty()
    }
}

/// Runs every case under every [`ModelMutant::ALL`].
pub fn model_mutants() -> Result<Vec<MutantResult>, PoolError> {
    let cases = cases();
    ModelMutant::ALL
        .iter()
        .map(|&mutant| {
            let mut failed = Vec::new();
            for case in &cases {
                if !run_with(case, mutant)?.passed() {
                    failed.push(case.name);
                }
            }
            Ok(MutantResult { mutant, failed })
        })
        .collect()
}
