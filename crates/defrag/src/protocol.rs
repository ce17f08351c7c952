//! The three move protocols of the FFCCD paper (§3.3, §4) and the options of a
//! compaction.
//!
//! | protocol | a defragmenter move | a move inside the barrier | needs |
//! | --- | --- | --- | --- |
//! | [`Protocol::Espresso`] | copy, flush, fence; forward, flush, fence (2) | the same (2) | ADR |
//! | [`Protocol::Sfccd`] | 1 fence (pipelined, below) | Espresso's (2) | ADR |
//! | [`Protocol::Ffccd`] | copy, forward: no flush, no fence (0) | the same (0) | eADR, only process crashes, or the reached bitmap |
//!
//! **Why our SFCCD is sound.** The paper's SFCCD flushes the copy and the forward
//! word and fences once; since the two may reach the media in either order, its
//! recovery recopies an object whose forward is set when source and copy differ.
//! But a mutator may have written the copy after the barrier returned, and that
//! rule then overwrites the user's committed write. Ours keeps one fence per move
//! by *pipelining*: the fence of move *i* makes the copy of *i* and the forward
//! word of *i − 1* durable, and only then is *i − 1* published (the barrier
//! returns its destination). A forward word is stored after its copy was fenced,
//! so "forward set" always means "copy complete", and no one can write a copy
//! before its forward word is durable: recovery never recopies a moved object and
//! needs no comparison. A mutator that must move an object itself cannot wait for
//! the next fence, so it uses Espresso's two.
//!
//! **FFCCD** flushes nothing. On eADR the caches are persistent and the stores
//! reach the persistence domain in program order (the copy before its forward
//! word, the forward word before anything a later reader writes), so the same
//! recovery rule holds; a process crash loses no store at all.
//!
//! **FFCCD on ADR** needs the paper's hardware (§4.2): a `relocate` instruction
//! and a persistent *reached bitmap* saying which relocated words reached the
//! media. No CPU has them; pmem-core's crash simulator emulates them
//! ([`pmem_core::Pool::tracks_relocation`]), as the paper's own fault injection
//! did. On such a pool a compaction runs FFCCD *tracked* ([`crate::reached`]):
//! copies are relocations, the plans are flagged before the first move, and
//! recovery, before the transactions' own, decides every move from the bitmap:
//! it keeps each 16-byte granule of a copy that reached the media (a later write
//! of the program can only have persisted on top of it) and copies the others
//! again from the source (which nobody writes once the plan exists), then sets
//! the forward word. Once every move is published the compaction flushes the
//! copies and forward words with one fence and clears the flags, so the
//! relocation pages are never freed while recovery may still read them.
//!
//! On a durable pool that neither is declared eADR ([`CompactOptions::eadr`])
//! nor tracks relocation (every real machine), a compaction asked to use FFCCD
//! runs SFCCD and says so (a warning, and [`crate::CompactReport::protocol`]).

use pmem_core::{DurabilityMode, Pool};

/// How a compaction moves an object (see the [module documentation](crate::protocol)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// Two fences per move.
    #[default]
    Espresso,
    /// One fence per defragmenter move.
    Sfccd,
    /// No flush or fence (eADR, process crashes only, or the reached bitmap).
    Ffccd,
}

impl Protocol {
    /// Lower-case name (`espresso`, `sfccd`, `ffccd`).
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Espresso => "espresso",
            Protocol::Sfccd => "sfccd",
            Protocol::Ffccd => "ffccd",
        }
    }

    /// The protocol a compaction of `pool` can use when `self` is asked for:
    /// FFCCD falls back to SFCCD on a durable pool whose caches are not declared
    /// persistent (`eadr`) and that has no reached bitmap, since a power failure
    /// there can persist a forward word before its copy.
    pub fn effective(self, pool: &Pool, eadr: bool) -> Protocol {
        if self == Protocol::Ffccd && !eadr && pool.is_durable() && !pool.tracks_relocation() {
            let why = match pool.mode() {
                DurabilityMode::Msync => "the page cache writes pages back in any order",
                _ => "ADR flushes nothing by itself (the paper's reached bitmap is hardware)",
            };
            tracing::warn!(
                mode = %pool.mode(),
                "FFCCD needs eADR on a durable pool ({why}): running SFCCD instead"
            );
            return Protocol::Sfccd;
        }
        self
    }
}

/// Whether a compaction of `pool` by `protocol` (already [`Protocol::effective`])
/// is tracked by the reached bitmap: FFCCD on a pool with one, not declared eADR.
pub(crate) fn tracked(protocol: Protocol, pool: &Pool, eadr: bool) -> bool {
    protocol == Protocol::Ffccd && !eadr && pool.tracks_relocation()
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a compaction aims at and how it moves objects.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CompactOptions {
    /// Stop once the ratio (footprint / live bytes) would be at most this.
    pub target: f64,
    /// The move protocol.
    pub protocol: Protocol,
    /// The pool's caches are in the persistence domain (eADR): FFCCD may run on a
    /// durable pool.
    pub eadr: bool,
    /// Relocation pages per plan (tests use small plans to crash chains of them).
    #[doc(hidden)]
    pub plan_pages: usize,
}

impl Default for CompactOptions {
    fn default() -> Self {
        CompactOptions::new()
    }
}

impl CompactOptions {
    /// The paper's target ratio 1.25, Espresso.
    pub fn new() -> Self {
        CompactOptions {
            target: 1.25,
            protocol: Protocol::Espresso,
            eadr: false,
            plan_pages: crate::layout::ROUND_PAGES,
        }
    }

    /// Sets the target ratio.
    pub fn target(mut self, target: f64) -> Self {
        self.target = target;
        self
    }

    /// Sets the protocol.
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// Declares the pool's caches persistent (eADR).
    pub fn eadr(mut self, eadr: bool) -> Self {
        self.eadr = eadr;
        self
    }

    /// Sets the relocation pages per plan.
    #[doc(hidden)]
    pub fn plan_pages(mut self, pages: usize) -> Self {
        self.plan_pages = pages;
        self
    }
}
