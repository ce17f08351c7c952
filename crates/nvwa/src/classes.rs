//! Size classes and the geometry of their page runs (jemalloc's small classes:
//! four per doubling from 128 B, 16-byte steps below).
//!
//! A request of at most [`MAX_SMALL`] bytes is served from a run of its class: a
//! few contiguous pages cut into equal slots. A larger one gets a run of its own,
//! whole pages, described by its object record alone (no run record: its pages are
//! the object's).

use crate::record::{PAGE, UNIT};

/// The largest request served from a small class; above it an object has its own
/// pages.
pub const MAX_SMALL: u64 = 2048;

/// Slot sizes of the small classes; class `i` has id `i + 1` in run records (id 0
/// is never written).
pub const SIZES: [u64; 24] = [
    16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024,
    1280, 1536, 1792, 2048,
];

/// The class of each size in 16-byte units (index: units - 1).
const CLASS_OF_UNITS: [u8; (MAX_SMALL / UNIT) as usize] = {
    let mut t = [0u8; (MAX_SMALL / UNIT) as usize];
    let (mut i, mut c) = (0, 0);
    while i < t.len() {
        let size = (i as u64 + 1) * UNIT;
        while SIZES[c] < size {
            c += 1;
        }
        t[i] = c as u8;
        i += 1;
    }
    t
};

/// Fewest slots a small run is given (larger classes take several pages).
const MIN_SLOTS: u64 = 32;

/// A small class: its index in [`SIZES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Class(pub u8);

impl Class {
    /// The class serving `size` bytes, or `None` above [`MAX_SMALL`] (or for 0).
    /// A table lookup: it is on every allocation's and free's path.
    #[inline]
    pub fn of(size: u64) -> Option<Class> {
        if size == 0 || size > MAX_SMALL {
            return None;
        }
        Some(Class(CLASS_OF_UNITS[((size - 1) / UNIT) as usize]))
    }

    /// The class a run record names, if it is one.
    pub fn from_id(id: u8) -> Option<Class> {
        let i = usize::from(id).checked_sub(1)?;
        (i < SIZES.len()).then_some(Class(i as u8))
    }

    /// The id written in run records.
    pub fn id(self) -> u8 {
        self.0 + 1
    }

    /// Bytes of one slot.
    pub fn size(self) -> u64 {
        SIZES[usize::from(self.0)]
    }

    /// Pages of one run of this class.
    pub fn run_pages(self) -> u64 {
        (self.size() * MIN_SLOTS).div_ceil(PAGE)
    }

    /// Slots of one run.
    pub fn slots(self) -> u64 {
        self.run_pages() * PAGE / self.size()
    }
}

/// Pages of a large object of `size` bytes.
pub fn large_pages(size: u64) -> u64 {
    size.div_ceil(PAGE)
}

/// The capacity of a block allocated with `size` bytes: its class's slot, or
/// its whole pages.
pub fn usable_size(size: u64) -> u64 {
    match Class::of(size) {
        Some(c) => c.size(),
        None => large_pages(size) * PAGE,
    }
}

/// `size` rounded up to the record unit (what an object record keeps as length).
pub fn record_len(size: u64) -> u64 {
    size.div_ceil(UNIT) * UNIT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_cover_every_small_size_with_little_waste() {
        for size in 1..=MAX_SMALL {
            let c = Class::of(size).expect("small");
            assert!(c.size() >= size);
            // At most 25 % above the request past 128 B (four classes a doubling).
            if size > 128 {
                assert!(
                    c.size() * 4 <= size * 5 + 3 * UNIT,
                    "{size} -> {}",
                    c.size()
                );
            }
            assert_eq!(Class::from_id(c.id()), Some(c));
        }
        assert_eq!(Class::of(0), None);
        assert_eq!(Class::of(MAX_SMALL + 1), None);
        assert_eq!(Class::from_id(0), None);
        assert_eq!(Class::from_id(SIZES.len() as u8 + 1), None);
    }

    #[test]
    fn runs_hold_at_least_32_slots_within_record_limits() {
        for i in 0..SIZES.len() {
            let c = Class(i as u8);
            assert!(c.slots() >= MIN_SLOTS, "{c:?}");
            assert!(c.slots() <= 256);
            assert!(c.run_pages() <= 16);
        }
        assert_eq!(Class::of(64).map(Class::run_pages), Some(1));
        assert_eq!(large_pages(4097), 2);
        assert_eq!(record_len(1), 16);
    }
}
