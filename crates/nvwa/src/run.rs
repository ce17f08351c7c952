//! A page run in DRAM: the run header and slot bitmap jemalloc keeps, and the
//! index from each live object to its record's log position (the paper keeps a
//! red-black tree for this; a run's slot array does it in O(1)).
//!
//! Nothing here is persistent: the allocation log is the only state on the media,
//! and recovery rebuilds runs from it.

use crate::classes::{large_pages, Class, MAX_SMALL};
use crate::record::PAGE;

/// No live record for the slot.
pub const NO_POS: u32 = u32::MAX;

/// What a run holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunKind {
    /// Slots of one small class.
    Small(Class),
    /// One large object on pages of its own.
    Large,
}

/// Whether a small run's `Run` record is in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logged {
    /// Not yet: the next record of one of its objects carries it.
    No,
    /// Stored and flushed at this position by a transaction's mark, not yet
    /// fenced: a thread that relies on it flushes its line again before its own
    /// fence (another thread's fence does not make this one durable).
    Unfenced(u32),
    /// Durable at this position (large runs: always, they need no record).
    Durable(u32),
}

/// One run.
#[derive(Debug)]
pub struct Run {
    /// First page (heap page number).
    pub first_page: u64,
    /// Pages.
    pub pages: u64,
    /// Small class or large.
    pub kind: RunKind,
    /// Its `Run` record.
    pub logged: Logged,
    /// Bytes of a slot.
    pub slot_size: u64,
    /// Slots.
    pub slots: u32,
    /// Live slots (with a record).
    pub live: u32,
    /// Set while the run is on its bin's list of runs with a free slot.
    pub in_bin: bool,
    /// Bit set: the slot can be handed out (free and not held).
    avail: Vec<u64>,
    /// Bit set: a transaction holds the slot.
    held: Vec<u64>,
    /// Log position of each slot's live record, or [`NO_POS`].
    pos: Vec<u32>,
    /// The length each live record holds, in 16-byte units: rewriting a record
    /// (exclude bit, new length, cleared pending bit) needs no read of the media,
    /// whose line a `clwb` may have evicted.
    units: Vec<u32>,
}

fn bit(i: u32) -> (usize, u64) {
    ((i / 64) as usize, 1u64 << (i % 64))
}

impl Run {
    /// A run with every slot free.
    pub fn new(first_page: u64, pages: u64, kind: RunKind) -> Run {
        let (slot_size, slots) = match kind {
            RunKind::Small(c) => (c.size(), c.slots() as u32),
            RunKind::Large => (pages * PAGE, 1),
        };
        let words = slots.div_ceil(64) as usize;
        let mut avail = vec![u64::MAX; words];
        if slots % 64 != 0 {
            avail[words - 1] = (1u64 << (slots % 64)) - 1;
        }
        Run {
            first_page,
            pages,
            kind,
            logged: match kind {
                RunKind::Small(_) => Logged::No,
                RunKind::Large => Logged::Durable(NO_POS),
            },
            slot_size,
            slots,
            live: 0,
            in_bin: false,
            avail,
            held: vec![0; words],
            pos: vec![NO_POS; slots as usize],
            units: vec![0; slots as usize],
        }
    }

    /// Whether a block of `size` bytes belongs in this run: a small run serves
    /// exactly its class, a large one exactly its page count.
    pub fn holds_size(&self, size: u64) -> bool {
        match self.kind {
            RunKind::Small(c) => Class::of(size) == Some(c),
            RunKind::Large => size > MAX_SMALL && large_pages(size) == self.pages,
        }
    }

    /// Heap offset of slot `i`.
    pub fn offset(&self, i: u32) -> u64 {
        self.first_page * PAGE + u64::from(i) * self.slot_size
    }

    /// The slot starting at heap offset `offset`, if one does.
    #[inline]
    pub fn slot_at(&self, offset: u64) -> Option<u32> {
        let rel = offset.checked_sub(self.first_page * PAGE)?;
        if rel >= self.pages * PAGE {
            return None;
        }
        // A run spans at most 2^14 pages, so both fit 32 bits, and a 32-bit
        // division is several times faster than a 64-bit one on the free path.
        let (rel, size) = (rel as u32, self.slot_size as u32);
        let i = rel / size;
        (i * size == rel && i < self.slots).then_some(i)
    }

    /// Takes the lowest available slot.
    pub fn take(&mut self) -> Option<u32> {
        let (w, word) = self.avail.iter().enumerate().find(|(_, w)| **w != 0)?;
        let i = w as u32 * 64 + word.trailing_zeros();
        self.avail[w] &= !(1 << word.trailing_zeros());
        Some(i)
    }

    /// Takes slot `i` if it is available.
    pub fn take_at(&mut self, i: u32) -> bool {
        let (w, b) = bit(i);
        let was = self.avail[w] & b != 0;
        self.avail[w] &= !b;
        was
    }

    /// Makes slot `i` available again (unless held).
    pub fn put(&mut self, i: u32) {
        let (w, b) = bit(i);
        if self.held[w] & b == 0 {
            self.avail[w] |= b;
        }
    }

    /// Whether a slot can be handed out.
    pub fn has_room(&self) -> bool {
        self.avail.iter().any(|w| *w != 0)
    }

    /// Holds slot `i` (or lets go of it; a free slot let go becomes available).
    pub fn hold(&mut self, i: u32, on: bool) {
        let (w, b) = bit(i);
        if on {
            self.held[w] |= b;
            self.avail[w] &= !b;
        } else {
            self.held[w] &= !b;
            if self.pos[i as usize] == NO_POS {
                self.avail[w] |= b;
            }
        }
    }

    /// Whether slot `i` is held.
    pub fn is_held(&self, i: u32) -> bool {
        let (w, b) = bit(i);
        self.held[w] & b != 0
    }

    /// The log position of slot `i`'s live record.
    pub fn pos(&self, i: u32) -> Option<u32> {
        let p = self.pos[i as usize];
        (p != NO_POS).then_some(p)
    }

    /// Records slot `i` live at `position`, its record holding `len` bytes.
    pub fn set_live(&mut self, i: u32, position: u32, len: u64) {
        if self.pos[i as usize] == NO_POS {
            self.live += 1;
        }
        self.pos[i as usize] = position;
        self.units[i as usize] = (len / crate::record::UNIT) as u32;
    }

    /// Moves slot `i`'s live record to `position` (a checkpoint).
    pub fn move_record(&mut self, i: u32, position: u32) {
        self.pos[i as usize] = position;
    }

    /// The length slot `i`'s record holds, in bytes.
    pub fn len(&self, i: u32) -> u64 {
        u64::from(self.units[i as usize]) * crate::record::UNIT
    }

    /// Records slot `i` dead (its record excluded or deleted).
    pub fn clear_live(&mut self, i: u32) {
        if self.pos[i as usize] != NO_POS {
            self.live -= 1;
        }
        self.pos[i as usize] = NO_POS;
    }

    /// Every live slot with its position.
    pub fn live_slots(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.pos
            .iter()
            .enumerate()
            .filter(|(_, p)| **p != NO_POS)
            .map(|(i, p)| (i as u32, *p))
    }

    /// Whether any slot is held.
    pub fn any_held(&self) -> bool {
        self.held.iter().any(|w| *w != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_taken_lowest_first_and_held_slots_stay_out() {
        let c = Class::of(1024).expect("small");
        let mut r = Run::new(3, c.run_pages(), RunKind::Small(c));
        assert_eq!(r.slots, 32);
        assert_eq!(r.take(), Some(0));
        assert_eq!(r.take(), Some(1));
        r.hold(2, true);
        assert_eq!(r.take(), Some(3));
        r.set_live(0, 7, 1024);
        assert_eq!(r.len(0), 1024);
        r.put(1);
        assert_eq!(r.take(), Some(1));
        r.hold(2, false);
        assert_eq!(r.take(), Some(2));
        assert_eq!(r.offset(2), 3 * PAGE + 2048);
        assert_eq!(r.slot_at(3 * PAGE + 2048), Some(2));
        assert_eq!(r.slot_at(3 * PAGE + 2047), None);
        assert_eq!(r.slot_at(3 * PAGE + 32 * 1024), None);
        assert_eq!(r.pos(0), Some(7));
        assert_eq!(r.live, 1);
        for _ in 4..32 {
            assert!(r.take().is_some());
        }
        assert!(!r.has_room());
    }
}
