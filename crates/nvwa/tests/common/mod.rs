//! What the allocator crash suites share: the publication slots at the start of
//! the test pool's root (offset 4096, 8 bytes each), read and written atomically,
//! and errors as strings for the simulator's closures.

use std::sync::atomic::Ordering;

use pmem_core::{AtomicPPtr, PPtr, Pool};

/// An error as the crash harness's closures return it.
pub fn e(err: impl std::fmt::Display) -> String {
    err.to_string()
}

/// Slot `i` of the root.
pub fn slot_ptr(i: usize) -> PPtr<AtomicPPtr<u8>> {
    PPtr::from_offset(4096 + 8 * i as u64)
}

/// The block slot `i` holds.
pub fn load(pool: &Pool, i: usize) -> Result<PPtr<u8>, String> {
    // SAFETY: the slots are accessed only atomically by the suites.
    Ok(unsafe { pool.get_shared(slot_ptr(i)) }
        .map_err(e)?
        .load(Ordering::Acquire))
}

/// Stores `p` into slot `i` and persists it (the user's own link).
pub fn store(pool: &Pool, i: usize, p: PPtr<u8>) -> Result<(), String> {
    // SAFETY: as above.
    unsafe { pool.get_shared(slot_ptr(i)) }
        .map_err(e)?
        .store(p, Ordering::Release);
    pool.persist_ptr(slot_ptr(i)).map_err(e)
}

/// Random sequences per proptest run: `normal`, or `deep` with `PMKIT_DEEP` set
/// (the deep campaign).
pub fn cases(normal: u32, deep: u32) -> u32 {
    if std::env::var_os("PMKIT_DEEP").is_some() {
        deep
    } else {
        normal
    }
}
