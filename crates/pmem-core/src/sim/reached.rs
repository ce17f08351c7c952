//! The emulated reached bitmap of the FFCCD paper (§4.2): which relocated words
//! had reached the media when a crash struck.
//!
//! FFCCD moves objects without a flush or a fence. On ADR that needs hardware no
//! CPU ships: a `relocate` instruction that copies like `mov` and marks the
//! destination lines pending, and a memory controller that sets a line's bit in a
//! persistent *reached bitmap* when a pending line is written back. Recovery reads
//! the bitmap to tell a copy that reached the media (perhaps with the program's
//! later writes on top) from one that did not. The paper tested its recovery by
//! emulating the bitmap in its fault injector (§7.1); the simulator does the same
//! from the cut: a relocated word is *reached* in a crash image when the
//! relocation's store to it is in the image.
//!
//! The bitmap here has a bit per 8-byte word, not per line: two relocations can
//! share a line (two 16-byte-aligned objects), and a per-line bit set by the
//! write-back of the first would claim the second reached too.

use std::collections::{BTreeMap, HashSet};

use super::event::EventKind;
use super::model::CrashState;

/// The reached bitmap of one crash image: for every word a relocation since the
/// last reset stored to, whether the latest such store reached the media.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reached {
    words: BTreeMap<u64, bool>,
    /// The bitmap was reset in the trace it came from: relocations recorded
    /// before that trace no longer count.
    reset: bool,
}

impl Reached {
    /// Whether every word overlapping `[offset, offset + len)` was relocated and
    /// its relocation reached the media (true for an empty range; false where
    /// nothing was relocated).
    pub fn range(&self, offset: u64, len: u64) -> bool {
        if len == 0 {
            return true;
        }
        let last = (offset + len - 1) / 8;
        (offset / 8..=last).all(|w| self.words.get(&w) == Some(&true))
    }

    /// Words relocated since the bitmap's reset.
    pub fn relocated_words(&self) -> usize {
        self.words.len()
    }

    /// Of those, the words whose relocation reached the media.
    pub fn reached_words(&self) -> usize {
        self.words.values().filter(|&&r| r).count()
    }

    /// The bitmap after `later`, the bitmap of a trace recorded on top of this
    /// one's image (a crash during recovery): the bitmap lives in persistent
    /// memory, so it carries over unless `later` reset it.
    pub fn then(&self, later: &Reached) -> Reached {
        if later.reset {
            return later.clone();
        }
        let mut words = self.words.clone();
        words.extend(later.words.iter().map(|(&w, &r)| (w, r)));
        Reached {
            words,
            reset: self.reset,
        }
    }
}

impl CrashState<'_> {
    /// The reached bitmap of the image of `cut`: each word stored to by a
    /// relocation ([`EventKind::Relocate`]) after the last
    /// [`EventKind::ReachedReset`] before the crash point, and whether the latest
    /// such store is in the image. Empty unless the trace was recorded with the
    /// emulation on ([`crate::sim::SimDomain::emulate_reached_bitmap`]).
    pub fn reached(&self, cut: &[usize]) -> Reached {
        let events = &self.trace().events[..self.point()];
        let reset = events
            .iter()
            .rposition(|e| e.kind == EventKind::ReachedReset);
        let from = reset.map_or(0, |i| i + 1);
        let mut out = Reached {
            words: BTreeMap::new(),
            reset: reset.is_some(),
        };
        let relocations = || {
            events
                .iter()
                .enumerate()
                .skip(from)
                .filter_map(|(i, e)| match e.kind {
                    EventKind::Relocate { group, .. } => Some((i, group)),
                    _ => None,
                })
        };
        if relocations().next().is_none() {
            return out;
        }
        let mut lost: HashSet<usize> = HashSet::new();
        for (unit, &c) in self.in_flight().iter().zip(cut) {
            // Ascending indices into `unit.stores`.
            let kept = unit.persisted(c);
            lost.extend(
                (unit.durable..unit.stores.len())
                    .filter(|i| kept.binary_search(i).is_err())
                    .map(|i| unit.stores[i]),
            );
        }
        for (at, group) in relocations() {
            // The relocation's stores are the events just before its marker.
            let mut per_word: BTreeMap<u64, bool> = BTreeMap::new();
            for j in (0..at).rev() {
                match events[j].kind {
                    EventKind::Store {
                        offset, group: g, ..
                    } if g == group => {
                        *per_word.entry(offset / 8).or_insert(true) &= !lost.contains(&j);
                    }
                    _ => break,
                }
            }
            out.words.extend(per_word);
        }
        out
    }
}
