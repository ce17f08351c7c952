//! The process test of the fusion heap's `GlobalAlloc` adapter: this test binary
//! runs on `FusionAlloc` (`#[global_allocator]`), over a heap with a DRAM limit of
//! 24 MiB and 32 sections of 4 MiB, reclaim threshold lowered so that one section
//! passes it, and its daemon thread running.
//!
//! What this proves, in one test (the allocator is process-wide):
//!
//! * a real program — four threads building `Vec<u8>`, `String`, `HashMap`,
//!   `BTreeMap` and `Box` values (vectors grown by pushing, so reallocated across
//!   the levels) to three times the limit live at the peak, every value a
//!   deterministic function of its id — reads back every byte it wrote, after
//!   building, after freeing most of it, and before freeing the rest;
//! * the heap served from PM during the run (PM allocations, a level above no
//!   pressure, sections integrated) and never refused an allocation (PM had room);
//! * once everything is freed and the daemon sees no pressure, it reclaims
//!   sections;
//! * a thread marked internal allocates past the heap (`is_internal`), as the
//!   daemon does, and nothing deadlocks: the heap's own bookkeeping (a round's
//!   section metadata, `stats()` from a program thread) does not come back into
//!   the heap while it holds its lock. A watchdog aborts the process if the test
//!   stops making progress.

#![cfg(target_os = "linux")]

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use nvwa::fusion::{
    is_internal, mark_thread_internal, Daemon, FusionAlloc, FusionConfig, FusionHeap, Level,
    PolicyConfig, SectionSpace,
};

#[global_allocator]
static GLOBAL: FusionAlloc = FusionAlloc::new();

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
const LIMIT: usize = 24 * MIB;
const SECTIONS: usize = 32;
const SECTION: usize = 4 * MIB;
const THREADS: usize = 4;
/// Three times the limit live at the peak, over all threads.
const PER_THREAD: usize = 3 * LIMIT / THREADS;

/// A deterministic mix of an id (splitmix64's finalizer).
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn byte(id: u64, i: usize) -> u8 {
    (mix(id) as usize ^ i.wrapping_mul(0x9d) ^ (i >> 8)) as u8
}

/// One value of the program, a function of its id.
enum Value {
    /// Grown by pushing 4 KiB at a time (reallocated as it grows).
    Bytes(Vec<u8>),
    Text(String),
    Map(HashMap<u64, u64>),
    Tree(BTreeMap<u64, Vec<u8>>),
    Boxed(Box<[u64; 512]>),
}

impl Value {
    fn make(id: u64) -> Value {
        let m = mix(id ^ 0x5555);
        match id % 5 {
            0 => {
                let len = KIB + (m % (384 * KIB as u64)) as usize;
                let mut v = Vec::new();
                let mut chunk = Vec::with_capacity(4 * KIB);
                while v.len() < len {
                    let at = v.len();
                    let n = (len - at).min(4 * KIB);
                    chunk.clear();
                    chunk.extend((at..at + n).map(|i| byte(id, i)));
                    v.extend_from_slice(&chunk);
                }
                Value::Bytes(v)
            }
            1 => {
                let len = 100 + (m % (64 * KIB as u64)) as usize;
                let mut s = String::with_capacity(len);
                s.extend((0..len).map(|i| char::from(b'a' + byte(id, i) % 26)));
                Value::Text(s)
            }
            2 => {
                let n = 64 + m % 2048;
                Value::Map((0..n).map(|k| (k, mix(id ^ (k << 20)))).collect())
            }
            3 => {
                let n = 16 + m % 256;
                Value::Tree(
                    (0..n)
                        .map(|k| {
                            let len = 16 + (mix(id + k) % 512) as usize;
                            (k, (0..len).map(|i| byte(id ^ k, i)).collect())
                        })
                        .collect(),
                )
            }
            _ => {
                let mut b = Box::new([0u64; 512]);
                for (i, w) in b.iter_mut().enumerate() {
                    *w = mix(id.wrapping_mul(512) + i as u64);
                }
                Value::Boxed(b)
            }
        }
    }

    /// Whether the value still holds what `make(id)` put in it.
    fn holds(&self, id: u64) -> bool {
        let m = mix(id ^ 0x5555);
        match self {
            Value::Bytes(v) => {
                v.len() == KIB + (m % (384 * KIB as u64)) as usize
                    && v.iter().enumerate().all(|(i, &b)| b == byte(id, i))
            }
            Value::Text(s) => {
                s.len() == 100 + (m % (64 * KIB as u64)) as usize
                    && s.bytes()
                        .enumerate()
                        .all(|(i, b)| b == b'a' + byte(id, i) % 26)
            }
            Value::Map(map) => {
                let n = 64 + m % 2048;
                map.len() as u64 == n && (0..n).all(|k| map.get(&k) == Some(&mix(id ^ (k << 20))))
            }
            Value::Tree(tree) => {
                let n = 16 + m % 256;
                tree.len() as u64 == n
                    && tree.iter().enumerate().all(|(j, (&k, v))| {
                        let len = 16 + (mix(id + k) % 512) as usize;
                        k == j as u64
                            && v.len() == len
                            && v.iter().enumerate().all(|(i, &b)| b == byte(id ^ k, i))
                    })
            }
            Value::Boxed(b) => b
                .iter()
                .enumerate()
                .all(|(i, &w)| w == mix(id.wrapping_mul(512) + i as u64)),
        }
    }

    /// Roughly the bytes the value holds.
    fn bytes(&self) -> usize {
        match self {
            Value::Bytes(v) => v.capacity(),
            Value::Text(s) => s.capacity(),
            Value::Map(m) => m.capacity() * 17,
            Value::Tree(t) => t.values().map(|v| v.capacity() + 48).sum(),
            Value::Boxed(_) => 4096,
        }
    }
}

/// The allocations the heap has served, from PM or DRAM.
fn allocs(heap: &FusionHeap) -> u64 {
    let s = heap.stats();
    s.pm_allocs + s.dram_allocs
}

/// One worker: builds its values, waits for the peak to be looked at, verifies
/// everything, frees most, verifies the rest, frees all.
fn worker(t: usize, peak: &Barrier, go: &Barrier, heap: &FusionHeap) -> (usize, usize, usize) {
    let mut values: Vec<(u64, Value)> = Vec::new();
    let mut live = 0;
    let mut pm_values = 0;
    let mut id = (t as u64) << 32;
    while live < PER_THREAD {
        let v = Value::make(id);
        live += v.bytes();
        let addr = match &v {
            Value::Bytes(v) => v.as_ptr().addr(),
            Value::Text(s) => s.as_ptr().addr(),
            Value::Boxed(b) => b.as_ptr().addr(),
            Value::Map(_) | Value::Tree(_) => 0,
        };
        if heap.owns(std::ptr::with_exposed_provenance(addr)) {
            pm_values += 1;
        }
        values.push((id, v));
        id += 1;
    }
    for (id, v) in &values {
        assert!(
            v.holds(*id),
            "thread {t}: value {id:#x} changed while building"
        );
    }
    peak.wait();
    go.wait();
    for (id, v) in &values {
        assert!(
            v.holds(*id),
            "thread {t}: value {id:#x} changed at the peak"
        );
    }
    let built = values.len();
    values.retain(|(id, _)| mix(*id).is_multiple_of(5));
    for (id, v) in &values {
        assert!(
            v.holds(*id),
            "thread {t}: value {id:#x} changed after frees"
        );
    }
    let kept = values.len();
    drop(values);
    (built, kept, pm_values)
}

#[test]
fn a_real_program_allocates_and_frees_across_the_levels() {
    let start = Instant::now();
    let done = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(AtomicU64::new(0));
    // The watchdog: allocates past the heap, aborts if the test hangs.
    let watchdog = {
        let done = Arc::clone(&done);
        let progress = Arc::clone(&progress);
        std::thread::spawn(move || {
            mark_thread_internal();
            let mut last = (progress.load(Ordering::Relaxed), Instant::now());
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
                let p = progress.load(Ordering::Relaxed);
                if p != last.0 {
                    last = (p, Instant::now());
                } else if last.1.elapsed() > Duration::from_secs(120) {
                    eprintln!("fusion_global: no progress for 120 s after step {p}: deadlock");
                    std::process::abort();
                }
            }
        })
    };
    let step = |n: u64| progress.store(n, Ordering::Relaxed);

    // The heap, over an unlinked file in the temporary directory.
    let space = SectionSpace::create_unlinked(std::env::temp_dir(), SECTIONS, SECTION as u64)
        .expect("section space");
    let policy = PolicyConfig {
        // 0.1 % of 24 MiB = 25 165 B: one 4 MiB section's 57 344 B pass it.
        reclaim_threshold_bp: 10,
        ..PolicyConfig::default()
    };
    assert!(policy.section_saving_bytes(SECTION as u64) > LIMIT as u64 * 10 / 10_000);
    let config = FusionConfig {
        policy,
        dram_limit: Some(LIMIT as u64),
        ..FusionConfig::default()
    };
    let heap: &'static FusionHeap = Box::leak(Box::new(
        FusionHeap::new(space, None, config).expect("heap"),
    ));
    GLOBAL.install(heap).expect("install once");
    assert!(GLOBAL.install(heap).is_err(), "a second install is refused");
    assert!(std::ptr::eq(GLOBAL.heap().expect("installed"), heap));
    step(1);

    // A program thread's allocations go through the heap; a thread marked
    // internal (as the daemon marks itself) goes past it.
    assert!(!is_internal());
    let before = allocs(heap);
    let counted: Vec<Box<u64>> = (0..100).map(Box::new).collect();
    assert!(allocs(heap) >= before + 100);
    drop(counted);
    std::thread::spawn(move || {
        mark_thread_internal();
        assert!(is_internal());
        let before = allocs(heap);
        let past: Vec<Box<u64>> = (0..100).map(Box::new).collect();
        let v = vec![7u8; 100_000];
        assert!(!heap.owns(v.as_ptr()));
        assert_eq!(
            allocs(heap),
            before,
            "an internal thread allocated through the heap"
        );
        drop((past, v));
    })
    .join()
    .expect("internal thread");
    step(2);

    let daemon = Daemon::spawn(heap, Duration::from_millis(10)).expect("daemon");

    // The program.
    let peak = Arc::new(Barrier::new(THREADS + 1));
    let go = Arc::new(Barrier::new(THREADS + 1));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (peak, go) = (Arc::clone(&peak), Arc::clone(&go));
            std::thread::spawn(move || worker(t, &peak, &go, heap))
        })
        .collect();
    peak.wait();
    step(3);
    let at_peak = heap.stats();
    println!("at the peak: {at_peak}");
    // A round by hand from a program thread, under pressure.
    let report = heap.round().expect("round");
    step(4);
    go.wait();
    let mut built = 0;
    let mut kept = 0;
    let mut pm_values = 0;
    for w in workers {
        let (b, k, p) = w.join().expect("worker");
        built += b;
        kept += k;
        pm_values += p;
    }
    step(5);
    let after_run = heap.stats();
    println!(
        "{built} values built, {kept} kept to the end, {pm_values} from PM; \
         round by hand at the peak: {:?}",
        report.decision
    );
    assert!(built > 0 && kept > 0 && kept < built / 2);
    assert!(at_peak.pm_allocs > 0 && pm_values > 0, "{at_peak}");
    assert!(at_peak.level > Level::NoPressure, "{at_peak}");
    assert!(at_peak.integrated > 0, "{at_peak}");
    assert!(at_peak.pm_live_bytes > LIMIT as u64, "{at_peak}");
    assert!(at_peak.dram_live_bytes <= LIMIT as i64, "{at_peak}");
    assert_eq!(after_run.refused, 0, "refused with room in PM: {after_run}");
    assert!(after_run.hidden > 0, "PM had room to the end: {after_run}");

    // Everything freed: the daemon sees no pressure and gives back every section
    // without a live block (one passes the threshold), highest first. What may
    // still be live in PM is the test harness's.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = heap.stats();
        if s.reclaims > after_run.reclaims
            && s.level == Level::NoPressure
            && s.integrated as u64 <= s.pm_live_blocks
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no reclaim 30 s after everything was freed: {s}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    step(6);
    daemon.stop();
    let end = heap.stats();
    println!("at the end: {end}");
    println!("fusion_global: {:?}", start.elapsed());
    assert_eq!(end.refused, 0);
    assert!(!end.serving_pm);
    done.store(true, Ordering::Relaxed);
    watchdog.join().expect("watchdog");
}
