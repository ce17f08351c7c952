//! FFCCD on ADR, recovered from the paper's reached bitmap (§3.3 observations 3
//! and 4, §4.2, Fig. 9).
//!
//! A *tracked* compaction (FFCCD on a pool with the bitmap, not declared eADR:
//! [`crate::protocol`]) flushes nothing while it moves: a copy, its forward word,
//! the pointers to it and the program's writes to it reach the media in any order.
//! What makes that recoverable is the bitmap, which says which relocated words
//! reached the media before a crash.
//!
//! * **Begin.** The bitmap is reset before planning. Once every plan of the
//!   compaction is committed, each is flagged tracked (one fence), before the
//!   first move: a flag never names a plan whose transaction may still roll back.
//! * **Recovery** (`recover`), at open and *before* the transactions' recovery
//!   (the paper: the collector's recovery, then the application's). For every move
//!   of a flagged plan, each 16-byte granule of the copy (the heap's alignment, so
//!   no granule holds two objects) is kept if the bitmap says it reached the
//!   media, and copied again from the source otherwise; then the forward word is
//!   set, all of it flushed, one fence, and the flags cleared.
//!   - A granule whose relocation did not reach the media holds no later store
//!     either (a line, or a word, persists a prefix of its stores), so copying it
//!     again loses nothing the program made durable. A reached granule may hold
//!     the program's later writes, so it is kept, never copied over (the paper's
//!     observation 4: the flaw of SFCCD's "recopy if different").
//!   - The source is clean: the program writes an object of a relocation page only
//!     before the plan exists (the plan's transaction checkpoints the log first),
//!     and only its destination after.
//!   - Where nothing of a copy reached the media the paper undoes the references
//!     to it; we make the copy again instead, which is as sound (nothing the
//!     program wrote there persisted) and needs no marking pass.
//!   - The transactions recovered afterwards see each destination as the program
//!     left it: an undo record of a destination holds bytes that equal the copy
//!     (what a granule now holds in either case); a redo or lazy entry lands on
//!     top.
//!   - Idempotent: the bitmap is persistent and the sources do not change before
//!     the flags are cleared, so a crash during recovery repeats it alike.
//! * **Settle** (`settle`). Once every move is published, before healing: every
//!   copy and forward word flushed, one fence, then the flags cleared (another).
//!   From then on the forward words are the truth, the healed references are
//!   flushed, and the relocation pages may be freed.

use pmem_core::{PPtr, Pool};

use crate::barrier::{forward_word, source_bytes, Active};
use crate::compact::{compaction_slot, read_plan, Plan};
use crate::layout::{HeapRoot, PlanHeader, HEAP_MAGIC, OBJ_HEADER};
use crate::DefragError;

/// The granule of the bitmap's decisions: the heap's object alignment.
const GRANULE: u64 = 16;

/// Deliberately broken variants of the tracked protocol, for the mutation test
/// (`mutation` feature): each must make the crash suite fail.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReachedMutant {
    /// Recovery trusts every granule (as if all had reached the media).
    TrustAll,
    /// Recovery copies every granule again (SFCCD's flawed rule, unconditionally).
    TrustNone,
    /// Settling clears the flags without flushing the copies and forward words.
    SettleWithoutFlush,
    /// Flagging the plans issues no fence before the first move.
    FlagWithoutFence,
    /// Recovery clears the flags without flushing the granules it copied again
    /// and the forward words.
    RecoverWithoutFlush,
}

/// Every mutant.
#[doc(hidden)]
pub const REACHED_MUTANTS: [ReachedMutant; 5] = [
    ReachedMutant::TrustAll,
    ReachedMutant::TrustNone,
    ReachedMutant::SettleWithoutFlush,
    ReachedMutant::FlagWithoutFence,
    ReachedMutant::RecoverWithoutFlush,
];

impl pmem_core::site_switch::Site for ReachedMutant {
    const EVERY: &'static [ReachedMutant] = &REACHED_MUTANTS;
}

/// The mutant switched on: a correct step of the protocol, removed.
#[cfg(feature = "mutation")]
static MUTANT: pmem_core::site_switch::SiteSwitch<ReachedMutant> =
    pmem_core::site_switch::SiteSwitch::new();

/// Turns `mutant` (or none) on for the whole process. Needs the `mutation`
/// feature.
#[cfg(feature = "mutation")]
#[doc(hidden)]
pub fn set_reached_mutant(mutant: Option<ReachedMutant>) {
    MUTANT.remove(mutant);
}

#[inline(always)]
fn mutant(m: ReachedMutant) -> bool {
    #[cfg(feature = "mutation")]
    {
        MUTANT.is_removed(m)
    }
    #[cfg(not(feature = "mutation"))]
    {
        let _ = m;
        false
    }
}

/// The pool offset of a plan's tracked flag.
fn flag_word(plan: u64) -> u64 {
    plan + std::mem::offset_of!(PlanHeader, tracked) as u64
}

/// Sets or clears the tracked flag of every plan, durably (one fence). The caller
/// owns the plans: it holds the heap lock, or is the compaction that made them.
pub(crate) fn flag_plans(pool: &Pool, plans: &[Plan], on: bool) -> Result<(), DefragError> {
    for plan in plans {
        let at = flag_word(plan.block);
        // SAFETY: a plan block is read and written only by the compaction that
        // made it (the caller) and by recovery at open; an aligned 8-byte store
        // is failure-atomic.
        unsafe { pool.write_bytes_shared(at, &u64::from(on).to_le_bytes())? };
        pool.flush(at, 8)?;
    }
    if !(on && mutant(ReachedMutant::FlagWithoutFence)) {
        pool.drain()?;
    }
    Ok(())
}

/// Makes every move of a tracked compaction durable (copies and forward words,
/// one fence), then clears the plans' flags. Every move must be published.
pub(crate) fn settle(pool: &Pool, active: &Active, plans: &[Plan]) -> Result<(), DefragError> {
    if !mutant(ReachedMutant::SettleWithoutFlush) {
        for &(src, dst) in &active.moves {
            let [_, size]: [u32; 2] = pool.read(PPtr::from_offset(src - OBJ_HEADER))?;
            pool.flush(dst - OBJ_HEADER, OBJ_HEADER + u64::from(size))?;
            pool.flush(forward_word(src), 8)?;
        }
        pool.drain()?;
    }
    flag_plans(pool, plans, false)
}

/// What [`recover`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Recovered {
    /// Moves decided.
    pub moves: u64,
    /// Granules kept (reached the media).
    pub kept: u64,
    /// Granules copied again from their source.
    pub recopied: u64,
}

/// Recovers the tracked plans of an interrupted compaction, before the
/// transactions' recovery (see the [module documentation](self)). Does nothing
/// if the heap has none. Fails if it has some and the pool carries no bitmap.
pub(crate) fn recover(pool: &mut Pool) -> Result<Recovered, DefragError> {
    let mut done = Recovered::default();
    let root = pool.root::<HeapRoot>()?;
    let r: HeapRoot = pool.read(root)?;
    if r.magic != HEAP_MAGIC {
        return Ok(done);
    }
    // The chain as the media holds it, before any transaction is rolled back: a
    // block that is not a valid plan ends it (it belongs to a plan transaction in
    // flight, and then no plan is flagged: flags are set after every plan of a
    // compaction committed and cleared before any is released).
    let mut plans = Vec::new();
    let mut at = pool.read(compaction_slot(root))?;
    while at != 0 && plans.len() < 1 << 20 {
        let Ok(plan) = read_plan(pool, at) else {
            break;
        };
        at = plan.next;
        if plan.tracked {
            plans.push(plan);
        }
    }
    if plans.is_empty() {
        return Ok(done);
    }
    if !pool.tracks_relocation() {
        return Err(DefragError::Corrupt(
            "an FFCCD compaction tracked by a reached bitmap was interrupted, and this pool has no bitmap to recover it from".into(),
        ));
    }
    for plan in &plans {
        for &(src, dst) in &plan.moves {
            let bytes = source_bytes(pool, src)?;
            let start = dst - OBJ_HEADER;
            let len = bytes.len() as u64;
            for k in (0..len).step_by(GRANULE as usize) {
                let n = GRANULE.min(len - k);
                let reached = if mutant(ReachedMutant::TrustAll) {
                    true
                } else if mutant(ReachedMutant::TrustNone) {
                    false
                } else {
                    pool.reached(start + k, n)
                };
                if reached {
                    done.kept += 1;
                } else {
                    pool.write_bytes(start + k, &bytes[k as usize..(k + n) as usize])?;
                    done.recopied += 1;
                }
            }
            pool.write(PPtr::<u64>::from_offset(forward_word(src)), &dst)?;
            if !mutant(ReachedMutant::RecoverWithoutFlush) {
                pool.flush(start, len)?;
                pool.flush(forward_word(src), 8)?;
            }
            done.moves += 1;
        }
    }
    pool.drain()?;
    for plan in &plans {
        pool.write(PPtr::<u64>::from_offset(flag_word(plan.block)), &0)?;
        pool.flush(flag_word(plan.block), 8)?;
    }
    pool.drain()?;
    tracing::info!(
        moves = done.moves,
        kept = done.kept,
        recopied = done.recopied,
        "recovered an FFCCD compaction from the reached bitmap"
    );
    Ok(done)
}
