//! The emulated reached bitmap (FFCCD §4.2, emulated from the cut as its §7.1
//! did): a relocated word is reached exactly when the relocation's store to it is
//! in the crash image, later stores to its line persist only on top of it, a
//! reset forgets earlier relocations, and the harness hands each image's pool its
//! bitmap (carried over a second crash during recovery).

use pmem_core::sim::{Budget, CrashInfo, CrashState, CrashTest, Model};
use pmem_core::{PPtr, Pool, PoolOptions};

const AT: u64 = 4096 + 8;
/// Three words, straddling nothing: one line.
const LEN: u64 = 24;
const PATTERN: [u8; LEN as usize] = [
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
];

fn opts() -> PoolOptions {
    PoolOptions::new("reached", 64 * 1024)
}

fn relocate(pool: &Pool, at: u64, bytes: &[u8]) {
    // SAFETY: a test's own range, nothing else touches it.
    unsafe { pool.relocate_bytes_shared(at, bytes) }.expect("relocate");
}

/// Whether the image holds the relocated pattern (the base is zeros, and every
/// byte of the pattern is non-zero, so the bytes equal it only if every store of
/// the relocation persisted).
fn holds_pattern(pool: &Pool) -> bool {
    pool.bytes(AT, LEN).expect("bytes") == PATTERN
}

#[test]
fn without_the_emulation_a_relocation_is_a_plain_write() {
    let (pool, sim) = Pool::simulated(&opts()).expect("pool");
    assert!(!pool.tracks_relocation());
    relocate(&pool, AT, &PATTERN);
    assert!(holds_pattern(&pool));
    let trace = sim.trace();
    let state = CrashState::new(&trace, trace.events.len(), Model::Line);
    assert_eq!(state.reached(&state.maximal()).relocated_words(), 0);
    assert!(!pool.reached(AT, LEN));
    let anon = Pool::anonymous(&opts()).expect("anonymous");
    assert!(!anon.tracks_relocation());
}

#[test]
fn reached_follows_the_cut_in_every_model() {
    for model in [Model::Line, Model::Word, Model::Eadr] {
        let (pool, sim) = Pool::simulated(&opts()).expect("pool");
        sim.emulate_reached_bitmap(true);
        assert!(pool.tracks_relocation());
        pool.reset_reached();
        relocate(&pool, AT, &PATTERN);
        // A later ordinary store to the same line, then a fence of nothing.
        // SAFETY: as above.
        unsafe { pool.write_bytes_shared(AT + 32, &[0xee; 8]) }.expect("write");
        let trace = sim.trace();
        let state = CrashState::new(&trace, trace.events.len(), model);
        let lost = state.reached(&state.minimal());
        assert_eq!((lost.relocated_words(), lost.reached_words()), (3, 0));
        assert!(!lost.range(AT, LEN));
        let all = state.reached(&state.maximal());
        assert!(all.range(AT, LEN) && all.range(AT + 8, 8));
        assert!(
            !all.range(AT, LEN + 8),
            "a word never relocated is not reached"
        );
        assert!(all.range(AT, 0));
        // Every cut: the image holds the pattern exactly when the bitmap says so,
        // and the later store persisted only where the relocation under it did.
        let every = state.select(&Budget {
            exhaustive_up_to: 1 << 16,
            k: 0,
            random: 0,
            seed: 0,
        });
        assert!(every.exhaustive, "{model:?}: {} cuts", every.count);
        let mut seen = 0;
        for cut in &every.cuts {
            let image = state.materialize(cut);
            let r = state.reached(cut);
            let bytes = &image[AT as usize..(AT + LEN) as usize];
            assert_eq!(r.range(AT, LEN), bytes == PATTERN, "{model:?} cut {cut:?}");
            for w in 0..3u64 {
                let at = (AT + 8 * w) as usize;
                let word_there = image[at..at + 8] == PATTERN[8 * w as usize..8 * w as usize + 8];
                assert_eq!(r.range(AT + 8 * w, 8), word_there, "{model:?} word {w}");
            }
            let later = image[(AT + 32) as usize] == 0xee;
            if later && model != Model::Word {
                assert!(r.range(AT, LEN), "{model:?}: a later store persisted first");
            }
            seen += 1;
        }
        assert!(seen > 2, "{model:?}: {seen} cuts");
    }
}

#[test]
fn a_flushed_relocation_is_reached_in_every_image_and_a_reset_forgets() {
    let (pool, sim) = Pool::simulated(&opts()).expect("pool");
    sim.emulate_reached_bitmap(true);
    pool.reset_reached();
    relocate(&pool, AT, &PATTERN);
    pool.persist(AT, LEN).expect("persist");
    let trace = sim.trace();
    let state = CrashState::new(&trace, trace.events.len(), Model::Line);
    assert!(state.reached(&state.minimal()).range(AT, LEN));
    // A new bitmap: the old relocation no longer counts, a new one does.
    pool.reset_reached();
    relocate(&pool, AT + 64, &PATTERN);
    let trace = sim.trace();
    let state = CrashState::new(&trace, trace.events.len(), Model::Line);
    let r = state.reached(&state.maximal());
    assert!(!r.range(AT, LEN), "relocated before the reset");
    assert!(r.range(AT + 64, LEN));
}

/// The harness: every image's pool carries its bitmap, which agrees with the
/// image's bytes; recovery's own crash keeps the first crash's bitmap.
#[test]
fn the_harness_gives_each_image_its_bitmap() {
    for model in [Model::Line, Model::Word] {
        let report = CrashTest::new(opts())
            .model(model)
            .deny_correctness_lints(false)
            .idempotence_every(1)
            .run(
                |_| Ok(()),
                |mut pool, sim| {
                    sim.emulate_reached_bitmap(true);
                    pool.reset_reached();
                    sim.op(0, || relocate(&pool, AT, &PATTERN));
                    // Something durable after it, so there are crash points
                    // between which the relocation may or may not persist.
                    sim.op(1, || -> Result<(), String> {
                        let p = PPtr::<u64>::from_offset(8192);
                        pool.write(p, &7).map_err(|e| e.to_string())?;
                        pool.persist(8192, 8).map_err(|e| e.to_string())
                    })
                },
                |mut pool| {
                    if !pool.tracks_relocation() {
                        return Err("the image's pool has no bitmap".into());
                    }
                    let reached = pool.reached(AT, LEN);
                    let there = holds_pattern(&pool);
                    // A recovery that writes, so a second crash has points.
                    pool.write(PPtr::<u64>::from_offset(12288), &1)
                        .map_err(|e| e.to_string())?;
                    pool.persist(12288, 8).map_err(|e| e.to_string())?;
                    Ok((reached, there))
                },
                |&(reached, there): &(bool, bool), _: &CrashInfo| {
                    if reached == there {
                        Ok(())
                    } else {
                        Err(format!(
                            "bitmap says {reached}, the image holds it: {there}"
                        ))
                    }
                },
            )
            .unwrap_or_else(|f| panic!("{model:?}: {f}"));
        assert!(report.images_checked >= 2, "{model:?}: {report:?}");
        assert!(report.second_crash_images > 0, "{model:?}: {report:?}");
    }
}
