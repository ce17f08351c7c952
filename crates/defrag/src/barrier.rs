//! The active compaction's DRAM state and the read barrier (the FFCCD paper's §5).
//!
//! While a compaction is active, every object access of a transaction first asks
//! [`Active::resolve`] where the object is. An object outside the relocation pages
//! is where it is. An object of a relocation page has a *move state*:
//!
//! * `PENDING`: nobody has copied it; the source is authoritative. The first thread
//!   to win the compare-and-swap to `COPYING` moves it (the defragmenter, or a
//!   mutator inside the barrier).
//! * `COPYING`: a thread is moving it; others wait (a move is a few hundred
//!   nanoseconds; the defragmenter never waits for the heap lock while it holds a
//!   move, so a mutator waiting under that lock cannot deadlock it).
//! * `MOVED`: published. The copy is authoritative *and its forward word is
//!   durable* (or, under FFCCD on eADR, ordered before anything a later reader
//!   writes): only then may anyone write the copy or store a pointer to it.
//!
//! So a crash image never holds a write to a destination, or a pointer to it,
//! unless the destination's forward word is in the image too: the recovery rule
//! "forward set: the copy is authoritative; unset: copy again from the source" is
//! sound for all three protocols ([`crate::Protocol`]) on the platforms each is
//! meant for. FFCCD on ADR breaks that premise (its copies and forward words reach
//! the media in any order) and is recovered from the reached bitmap instead
//! ([`crate::reached`]).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use pmem_core::{PPtr, Pool};
// Offsets are not attacker-chosen keys: a fast multiplicative hash, not SipHash
// (every barrier lookup and every pointer healed goes through these maps).
use rustc_hash::FxHashMap;

use crate::layout::OBJ_HEADER;
use crate::protocol::Protocol;
use crate::DefragError;

/// The flushes and fences of the move protocols, named so a mutation test can
/// remove each in turn and show that the crash suite catches it (`mutation`
/// feature; without it every site is a plain call).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Site {
    /// Espresso: flush of the copy.
    EspressoCopyFlush,
    /// Espresso: fence after the copy.
    EspressoCopyFence,
    /// Espresso: flush of the forward word.
    EspressoForwardFlush,
    /// Espresso: fence after the forward word.
    EspressoForwardFence,
    /// SFCCD: flush of move i's copy.
    SfccdCopyFlush,
    /// SFCCD: flush of move i − 1's forward word.
    SfccdForwardFlush,
    /// SFCCD: the one fence of move i.
    SfccdFence,
    /// SFCCD: flush of a step's last forward word.
    SfccdLastForwardFlush,
    /// SFCCD: fence after a step's last forward word.
    SfccdLastFence,
    /// Healing: flush of a healed pointer word.
    HealFlush,
    /// Healing: the fence that ends a healing pass.
    HealFence,
    /// Healing: the CAS of a pointer word (mutant: a plain store).
    HealCas,
    /// Healing: the object and root locks it tries (mutant: heals what a running
    /// transaction holds instead of revisiting it).
    HealLocks,
}

/// The sites of healing beside running transactions ([`crate::heal`]).
#[doc(hidden)]
pub const HEAL_SITES: [Site; 4] = [
    Site::HealFlush,
    Site::HealFence,
    Site::HealCas,
    Site::HealLocks,
];

/// Every site of the move protocols.
#[doc(hidden)]
pub const SITES: [Site; 9] = [
    Site::EspressoCopyFlush,
    Site::EspressoCopyFence,
    Site::EspressoForwardFlush,
    Site::EspressoForwardFence,
    Site::SfccdCopyFlush,
    Site::SfccdForwardFlush,
    Site::SfccdFence,
    Site::SfccdLastForwardFlush,
    Site::SfccdLastFence,
];

/// Every site, for the switch (both tables above, in one).
const EVERY_SITE: [Site; 13] = [
    Site::EspressoCopyFlush,
    Site::EspressoCopyFence,
    Site::EspressoForwardFlush,
    Site::EspressoForwardFence,
    Site::SfccdCopyFlush,
    Site::SfccdForwardFlush,
    Site::SfccdFence,
    Site::SfccdLastForwardFlush,
    Site::SfccdLastFence,
    Site::HealFlush,
    Site::HealFence,
    Site::HealCas,
    Site::HealLocks,
];

impl pmem_core::site_switch::Site for Site {
    const EVERY: &'static [Site] = &EVERY_SITE;
}

#[cfg(feature = "mutation")]
static SWITCH: pmem_core::site_switch::SiteSwitch<Site> = pmem_core::site_switch::SiteSwitch::new();

/// Removes `site` (or none) from every live move of the process (recovery at
/// open is never mutated), for a mutation test. Needs the `mutation` feature.
#[cfg(feature = "mutation")]
#[doc(hidden)]
pub fn remove_site(site: Option<Site>) {
    SWITCH.remove(site);
}

#[inline(always)]
pub(crate) fn removed(site: Site, live: bool) -> bool {
    #[cfg(feature = "mutation")]
    {
        live && SWITCH.is_removed(site)
    }
    #[cfg(not(feature = "mutation"))]
    {
        let _ = (site, live);
        false
    }
}

#[inline(always)]
fn flush_at(pool: &Pool, site: Site, live: bool, offset: u64, len: u64) -> Result<(), DefragError> {
    if !removed(site, live) {
        pool.flush(offset, len)?;
    }
    Ok(())
}

#[inline(always)]
fn fence_at(pool: &Pool, site: Site, live: bool) -> Result<(), DefragError> {
    if !removed(site, live) {
        pool.drain()?;
    }
    Ok(())
}

const PENDING: u8 = 0;
const COPYING: u8 = 1;
const MOVED: u8 = 2;

/// A compaction in progress, shared by the defragmenter and the barrier.
///
/// Aligned to two cache lines: it lives in an `Arc` that every transaction
/// clones and drops while the defragmenter reads these fields at each move and
/// heal, and without the alignment the `Arc`'s counts share a line with
/// `moves` and `by_source`, so each transaction's two count updates cost the
/// defragmenter a miss and the transaction one (measured: the transaction's own
/// code grew from 1.5 % to 6-10 % of a mutator's time inside a compaction).
#[repr(align(128))]
pub(crate) struct Active {
    /// The protocol in effect.
    pub protocol: Protocol,
    /// (source, destination) object offsets, all plans' moves.
    pub moves: Vec<(u64, u64)>,
    by_source: FxHashMap<u64, u32>,
    /// Per destination page, its first move and how many moves fill it (a
    /// page's moves are consecutive and fill its first slots in order).
    by_destination_page: FxHashMap<u64, (u32, u32)>,
    state: Vec<AtomicU8>,
    /// Relocation page runs.
    pub relocation: BTreeSet<u64>,
    /// Moves made by mutators inside the barrier.
    pub barrier_moves: AtomicU64,
}

impl Active {
    /// The state of a compaction about to start: every move pending.
    /// `destinations`: each destination page and the number of moves filling it,
    /// in the order of `moves`.
    pub fn new(
        protocol: Protocol,
        moves: Vec<(u64, u64)>,
        destinations: &[(u64, u32)],
        relocation: BTreeSet<u64>,
    ) -> Active {
        let mut by_source = FxHashMap::with_capacity_and_hasher(moves.len(), Default::default());
        for (i, &(s, _)) in moves.iter().enumerate() {
            by_source.insert(s, i as u32);
        }
        let mut by_destination_page =
            FxHashMap::with_capacity_and_hasher(destinations.len(), Default::default());
        let mut first = 0u32;
        for &(page, count) in destinations {
            by_destination_page.insert(page, (first, count));
            first += count;
        }
        let state = moves.iter().map(|_| AtomicU8::new(PENDING)).collect();
        Active {
            protocol,
            moves,
            by_source,
            by_destination_page,
            state,
            relocation,
            barrier_moves: AtomicU64::new(0),
        }
    }

    /// Whether `page` is one of the relocation pages.
    pub fn is_relocation_page(&self, page: u64) -> bool {
        self.relocation.contains(&page)
    }

    /// The moves into `page` if it is a destination page: move `i` fills its
    /// slot `i`.
    pub fn moves_into(&self, page: u64) -> Option<&[(u64, u64)]> {
        let &(first, count) = self.by_destination_page.get(&page)?;
        self.moves.get(first as usize..(first + count) as usize)
    }

    /// The destination of `obj` if it is a source, whatever its state.
    pub fn destination_of(&self, obj: u64) -> Option<u64> {
        self.by_source.get(&obj).map(|&i| self.moves[i as usize].1)
    }

    /// The barrier: where the authoritative copy of `obj` is, moving it first (by
    /// the protocol's barrier sequence) if it is a source nobody has moved yet.
    pub fn resolve(&self, pool: &Pool, obj: u64) -> Result<u64, DefragError> {
        let Some(&i) = self.by_source.get(&obj) else {
            return Ok(obj);
        };
        let i = i as usize;
        loop {
            match self.state[i].load(Ordering::Acquire) {
                MOVED => return Ok(self.moves[i].1),
                PENDING if self.claim(i) => {
                    self.move_alone(pool, i)?;
                    self.barrier_moves.fetch_add(1, Ordering::Relaxed);
                    return Ok(self.moves[i].1);
                }
                _ => std::hint::spin_loop(),
            }
        }
    }

    /// Waits for every move a mutator holds and makes any still pending (one a
    /// failed mutator gave back), so that every move is published.
    pub fn publish_all(&self, pool: &Pool) -> Result<(), DefragError> {
        for (i, state) in self.state.iter().enumerate() {
            if state.load(Ordering::Acquire) != MOVED {
                self.resolve(pool, self.moves[i].0)?;
            }
        }
        Ok(())
    }

    /// Wins move `i` for the calling thread, if nobody has.
    fn claim(&self, i: usize) -> bool {
        self.state[i]
            .compare_exchange(PENDING, COPYING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Publishes move `i` (its forward word is durable, or ordered under eADR).
    fn publish(&self, i: usize) {
        self.state[i].store(MOVED, Ordering::Release);
    }

    /// Gives a claimed move back after a failure, so others may try.
    fn release_claim(&self, i: usize) {
        self.state[i].store(PENDING, Ordering::Release);
    }

    /// Moves `i`, claimed by the caller, on its own and publishes it: Espresso's
    /// sequence (two fences) under Espresso and SFCCD, FFCCD's (none) under FFCCD.
    fn move_alone(&self, pool: &Pool, i: usize) -> Result<(), DefragError> {
        let (src, dst) = self.moves[i];
        let r = match self.protocol {
            Protocol::Ffccd => copy(pool, src, dst, true).and_then(|_| set_forward(pool, src, dst)),
            Protocol::Espresso | Protocol::Sfccd => move_espresso(pool, src, dst, true),
        };
        match r {
            Ok(()) => {
                self.publish(i);
                Ok(())
            }
            Err(e) => {
                self.release_claim(i);
                Err(e)
            }
        }
    }

    /// The defragmenter's moves of `range` (those no mutator has claimed).
    /// Returns how many it made. Espresso and FFCCD move each alone; SFCCD
    /// pipelines: one fence makes move *i*'s copy and move *i − 1*'s forward word
    /// durable together, and publishes *i − 1* (the last move of the range gets one
    /// more fence, so nothing stays unpublished between calls).
    pub fn defragment(
        &self,
        pool: &Pool,
        range: std::ops::Range<usize>,
    ) -> Result<u64, DefragError> {
        let mut moved = 0;
        if self.protocol != Protocol::Sfccd {
            for i in range {
                if self.claim(i) {
                    self.move_alone(pool, i)?;
                    moved += 1;
                }
            }
            return Ok(moved);
        }
        let mut unpublished: Option<usize> = None;
        let result = (|| {
            for i in range {
                if !self.claim(i) {
                    continue;
                }
                let (src, dst) = self.moves[i];
                let len = copy(pool, src, dst, false)?;
                flush_at(pool, Site::SfccdCopyFlush, true, dst - OBJ_HEADER, len)?;
                if let Some(p) = unpublished {
                    let prev = self.moves[p].0;
                    set_forward(pool, prev, self.moves[p].1)?;
                    flush_at(pool, Site::SfccdForwardFlush, true, forward_word(prev), 8)?;
                }
                fence_at(pool, Site::SfccdFence, true)?;
                if let Some(p) = unpublished.replace(i) {
                    self.publish(p);
                }
                moved += 1;
            }
            if let Some(p) = unpublished {
                let src = self.moves[p].0;
                set_forward(pool, src, self.moves[p].1)?;
                flush_at(
                    pool,
                    Site::SfccdLastForwardFlush,
                    true,
                    forward_word(src),
                    8,
                )?;
                fence_at(pool, Site::SfccdLastFence, true)?;
                self.publish(p);
                unpublished = None;
            }
            Ok(moved)
        })();
        if let (Err(_), Some(p)) = (&result, unpublished) {
            self.release_claim(p);
        }
        result
    }
}

/// The offset of the forward word of the object at `src`.
pub(crate) fn forward_word(src: u64) -> u64 {
    src - OBJ_HEADER + 8
}

/// The bytes a move copies: the object at `src` with its header, the forward word
/// cleared.
pub(crate) fn source_bytes(pool: &Pool, src: u64) -> Result<Vec<u8>, DefragError> {
    let [_, size]: [u32; 2] = pool.read(PPtr::from_offset(src - OBJ_HEADER))?;
    let len = OBJ_HEADER + u64::from(size);
    let mut bytes = pool.bytes(src - OBJ_HEADER, len)?.to_vec();
    bytes[8..16].copy_from_slice(&0u64.to_le_bytes());
    Ok(bytes)
}

/// Copies the object at `src` (header with its forward word cleared, and body) to
/// `dst`, without flushing; as a relocation (tracked by the reached bitmap where
/// the pool has one) if `relocate`. Returns the bytes copied. The body goes
/// straight from the source's bytes (no buffer: this is every move's cost).
pub(crate) fn copy(pool: &Pool, src: u64, dst: u64, relocate: bool) -> Result<u64, DefragError> {
    let [type_id, size]: [u32; 2] = pool.read(PPtr::from_offset(src - OBJ_HEADER))?;
    let mut header = [0u8; OBJ_HEADER as usize];
    header[..4].copy_from_slice(&type_id.to_le_bytes());
    header[4..8].copy_from_slice(&size.to_le_bytes());
    let body = pool.bytes(src, u64::from(size))?;
    // SAFETY: the destination slot belongs to this move, which the caller owns (it
    // won the move's state, or holds the heap exclusively at open); nobody reads a
    // destination before its move is published. `body` is the source slot, another
    // slot than the destination, which nobody writes during a move (a mutator
    // reaches a source only through the barrier, which moves it first).
    unsafe {
        if relocate {
            pool.relocate_bytes_shared(dst - OBJ_HEADER, &header)?;
            pool.relocate_bytes_shared(dst, body)?;
        } else {
            pool.write_bytes_shared(dst - OBJ_HEADER, &header)?;
            pool.write_bytes_shared(dst, body)?;
        }
    }
    Ok(OBJ_HEADER + u64::from(size))
}

/// Stores `dst` in the forward word of the object at `src`, without flushing.
pub(crate) fn set_forward(pool: &Pool, src: u64, dst: u64) -> Result<(), DefragError> {
    // SAFETY: the forward word of a source belongs to its move, which the caller
    // owns; an aligned 8-byte store is failure-atomic. Readers of the source's
    // header read only its first word (type and size).
    unsafe { pool.write_bytes_shared(forward_word(src), &dst.to_le_bytes())? };
    Ok(())
}

/// Espresso's move: copy, persist (fence 1); forward word, persist (fence 2).
/// `live`: a move of a running compaction (recovery's are never mutated).
pub(crate) fn move_espresso(
    pool: &Pool,
    src: u64,
    dst: u64,
    live: bool,
) -> Result<(), DefragError> {
    let len = copy(pool, src, dst, false)?;
    flush_at(pool, Site::EspressoCopyFlush, live, dst - OBJ_HEADER, len)?;
    fence_at(pool, Site::EspressoCopyFence, live)?;
    set_forward(pool, src, dst)?;
    flush_at(pool, Site::EspressoForwardFlush, live, forward_word(src), 8)?;
    fence_at(pool, Site::EspressoForwardFence, live)?;
    Ok(())
}
