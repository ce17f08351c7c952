//! Ranges of any alignment and length are flushed completely, in every mode: the
//! flush counter sees exactly the overlapped lines (DAX) and msync exactly the
//! overlapped pages (msync), and ranges touching the end of the mapping do not fault.

use pmem_core::flush::lines_spanned;
use pmem_core::{Counters, DurabilityMode, ModeRequest, Pool, PoolError, PoolOptions};

const SIZE: u64 = 64 * 1024;

fn cases(len: u64) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    for start in [
        4096u64,
        4097,
        4096 + 63,
        4096 + 64,
        8191,
        8192 - 8,
        12_000,
        len - 64,
        len - 1,
    ] {
        for n in [
            1u64, 2, 8, 63, 64, 65, 127, 128, 129, 4095, 4096, 4097, 10_000,
        ] {
            if start + n <= len {
                v.push((start, n));
            }
        }
    }
    v
}

#[test]
fn dax_mode_flushes_every_overlapped_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dax.pool");
    let pool = Pool::create(
        &path,
        &PoolOptions::new("f", SIZE).mode(ModeRequest::ForceDax),
    )
    .expect("create");
    assert_eq!(pool.mode(), DurabilityMode::Dax);
    let base = pool.base_ptr() as usize;
    for (off, n) in cases(SIZE) {
        let (r, d) = Counters::measure(|| pool.persist(off, n));
        r.expect("persist");
        assert_eq!(
            d.lines_flushed as usize,
            lines_spanned(base + off as usize, n as usize),
            "offset {off} len {n}"
        );
        assert_eq!(d.fences, u64::from(pmem_core::flush::kind().needs_fence()));
        assert_eq!(d.msyncs, 0);
    }
}

#[test]
fn msync_mode_syncs_every_overlapped_page() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ms.pool");
    let pool = Pool::create(&path, &PoolOptions::new("f", SIZE)).expect("create");
    if pool.mode() != DurabilityMode::Msync {
        return; // the environment forced DAX; the test above covers that mode
    }
    for (off, n) in cases(SIZE) {
        let (r, d) = Counters::measure(|| pool.persist(off, n));
        r.expect("persist");
        assert_eq!(d.msyncs, 1, "offset {off} len {n}: one contiguous range");
        assert_eq!(d.lines_flushed, 0);
    }
    // Disjoint flushes drain as one msync over their span (one device flush).
    pool.flush(4096, 1).expect("flush");
    pool.flush(5 * 4096, 1).expect("flush");
    pool.flush(4096 + 10, 5000).expect("flush");
    let (r, d) = Counters::measure(|| pool.drain());
    r.expect("drain");
    assert_eq!(d.msyncs, 1);
    let (r, d) = Counters::measure(|| pool.drain());
    r.expect("drain");
    assert_eq!(d.msyncs, 0, "nothing left pending");
}

#[test]
fn volatile_mode_does_nothing_and_says_so() {
    let pool = Pool::anonymous(&PoolOptions::new("f", SIZE)).expect("anon");
    let (r, d) = Counters::measure(|| pool.persist(4096, 4096));
    r.expect("persist");
    assert_eq!(d, Counters::default());
    assert!(!pool.is_durable());
}

#[test]
fn out_of_range_flushes_are_errors_not_faults() {
    let pool = Pool::anonymous(&PoolOptions::new("f", SIZE)).expect("anon");
    for (off, n) in [(SIZE, 1), (SIZE - 1, 2), (u64::MAX, 1), (1, u64::MAX)] {
        assert!(
            matches!(pool.flush(off, n), Err(PoolError::OutOfBounds { .. })),
            "{off}+{n}"
        );
    }
    pool.flush(SIZE, 0).expect("empty range at the end is fine");
}
