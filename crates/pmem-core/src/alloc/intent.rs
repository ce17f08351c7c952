//! The checksummed publish-intent record: the one-cache-line redo record that makes
//! an allocator's `alloc_publish` (and its conditional and freeing variants)
//! crash-atomic. pmem-core's [`PageAllocator`](super::PageAllocator) and WAFA keep
//! one each, in their metadata region.
//!
//! The protocol around it (each allocator's module documents its own steps):
//! 1. the block is initialised and persisted;
//! 2. the intent `{kind, slot, block, extent, expected}` is sealed (crc32c) and
//!    persisted: from here recovery finishes the operation;
//! 3. the allocator's metadata and the slot are written and persisted;
//! 4. the intent is cleared (all zero) and persisted.
//!
//! Recovery reads the record: a zero kind is no operation in flight; an
//! [`intact`](PublishIntent::intact) record is redone (idempotently); anything else
//! is a record torn before step 2 completed, whose operation never took effect, and
//! is cleared.
//!
//! | offset | size | field |
//! | ---: | ---: | --- |
//! | 0 | 8 | kind ([`IntentKind`]; 0 = none) |
//! | 8 | 8 | offset of the 8-byte slot published into |
//! | 16 | 8 | offset of the block |
//! | 24 | 8 | the block's extent, in the allocator's unit (pages, or bytes) |
//! | 32 | 8 | [`IntentKind::PublishIf`]: the value the slot had to hold |
//! | 40 | 16 | zero |
//! | 56 | 8 | crc32c of bytes 0..56 |

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Bytes of one record (a cache line).
pub const INTENT_LEN: u64 = 64;

/// The operation an intent redoes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum IntentKind {
    /// `alloc_publish`: mark the block allocated and store it in the slot.
    AllocPublish = 1,
    /// `alloc_publish_if`: the same, if the slot still holds `expected`.
    PublishIf = 2,
    /// `free_unpublish`: clear the slot (if it holds the block) and free the block.
    FreeUnpublish = 3,
}

impl IntentKind {
    fn from_word(word: u64) -> Option<IntentKind> {
        match word {
            1 => Some(IntentKind::AllocPublish),
            2 => Some(IntentKind::PublishIf),
            3 => Some(IntentKind::FreeUnpublish),
            _ => None,
        }
    }
}

/// One publish-intent record, as it lies on media.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct PublishIntent {
    /// 0 = none, else an [`IntentKind`].
    pub kind: u64,
    /// Offset of the slot.
    pub slot: u64,
    /// Offset of the block.
    pub block: u64,
    /// The block's extent, in the allocator's unit.
    pub extent: u64,
    /// [`IntentKind::PublishIf`]: the value the slot had to hold.
    pub expected: u64,
    reserved: [u64; 2],
    checksum: u64,
}
const _: () = assert!(std::mem::size_of::<PublishIntent>() == INTENT_LEN as usize);

const CHECKED: usize = 56;

fn crc_of(bytes: &[u8]) -> u64 {
    u64::from(crc32c::crc32c(bytes))
}

impl PublishIntent {
    /// A sealed record of `kind`.
    pub fn new(kind: IntentKind, slot: u64, block: u64, extent: u64, expected: u64) -> Self {
        let mut i = PublishIntent {
            kind: kind as u64,
            slot,
            block,
            extent,
            expected,
            ..PublishIntent::default()
        };
        i.checksum = crc_of(&i.as_bytes()[..CHECKED]);
        i
    }

    /// Whether the kind word is zero: no operation in flight. (A clear torn by a
    /// crash may leave other words behind; the next operation overwrites them.)
    pub fn is_none(&self) -> bool {
        self.kind == 0
    }

    /// The record's kind, if it was written completely (a known kind, reserved
    /// bytes zero, checksum matching): the operation must be redone. `None` for a
    /// torn or foreign record.
    pub fn intact(&self) -> Option<IntentKind> {
        let sealed =
            self.reserved == [0; 2] && self.checksum == crc_of(&self.as_bytes()[..CHECKED]);
        sealed.then(|| IntentKind::from_word(self.kind)).flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::{IntentKind, PublishIntent};
    use zerocopy::{FromBytes, IntoBytes};

    #[test]
    fn a_sealed_record_is_intact_and_any_flipped_bit_is_not() {
        let i = PublishIntent::new(IntentKind::PublishIf, 8, 4096, 2, 77);
        assert_eq!(i.intact(), Some(IntentKind::PublishIf));
        assert!(!i.is_none());
        for byte in 0..64 {
            for bit in 0..8 {
                let mut bytes = i.as_bytes().to_vec();
                bytes[byte] ^= 1 << bit;
                let torn = PublishIntent::read_from_bytes(&bytes).expect("64 bytes");
                assert_eq!(torn.intact(), None, "bit {bit} of byte {byte}");
            }
        }
    }

    #[test]
    fn the_zero_record_is_none_and_not_intact() {
        let zero = PublishIntent::default();
        assert!(zero.is_none());
        assert_eq!(zero.intact(), None);
    }

    #[test]
    fn an_unknown_kind_is_not_intact_even_if_sealed() {
        let mut i = PublishIntent::new(IntentKind::AllocPublish, 8, 4096, 1, 0);
        i.kind = 9;
        i.checksum = super::crc_of(&i.as_bytes()[..super::CHECKED]);
        assert_eq!(i.intact(), None);
    }
}
