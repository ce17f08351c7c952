//! The library's collector on a real heap: it brings a fragmented heap to the
//! trigger's target beside a mutator and stops cleanly; it leaves alone a heap
//! below its start; it stops at once when idle, whatever its interval.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pmem_core::{PPtr, Pool, PoolOptions};
use pmem_defrag::{
    persistent_type, Collector, CollectorOptions, CompactOptions, DefragHeap, HeapRoot, Protocol,
    Registry, Trigger,
};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// A 128-byte node (the paper's value size): a dense heap of them has a ratio
/// of about 1.14, so the targets are reachable.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
struct Big {
    value: u64,
    pad: [u64; 14],
    next: PPtr<Big>,
}
persistent_type!(Big, id = 1, pointers = [next: Big]);

fn node(value: u64, next: PPtr<Big>) -> Big {
    Big {
        value,
        pad: [value; 14],
        next,
    }
}

/// A heap with a list of `n` nodes under "l", of which `drop` in every 16 are
/// unlinked and freed (of every 16); returns the values left, head first.
fn fragmented(n: u64, drop: u64) -> (DefragHeap, Vec<u64>) {
    let pool =
        Pool::anonymous(&PoolOptions::new("collector", 16 << 20).root::<HeapRoot>()).expect("pool");
    let heap = DefragHeap::create(pool, &Registry::new().with::<Big>()).expect("heap");
    for v in 0..n {
        heap.transaction(|t| {
            let next = t.root::<Big>("l")?;
            let p = t.alloc::<Big>()?;
            t.write(p, &node(v, next))?;
            t.set_root("l", p)
        })
        .expect("push");
    }
    // Walk from the head; free the successor of a kept node when its value
    // falls in the dropped part of its group of 16 (a transaction per free).
    let mut at = heap.root::<Big>("l").expect("root");
    while !at.is_null() {
        let next = heap.read(at).expect("read").next;
        if next.is_null() {
            break;
        }
        let nn = heap.read(next).expect("read");
        if nn.value % 16 < drop {
            heap.transaction(|t| {
                let mut cur = t.read(at)?;
                cur.next = nn.next;
                t.write(at, &cur)?;
                t.free(next)
            })
            .expect("free");
        } else {
            at = next;
        }
    }
    let values = list(&heap, "l");
    (heap, values)
}

fn list(heap: &DefragHeap, root: &str) -> Vec<u64> {
    heap.transaction(|t| {
        let mut out = Vec::new();
        let mut at = t.root::<Big>(root)?;
        while !at.is_null() {
            let n = t.read(at)?;
            assert!(n.pad.iter().all(|&w| w == n.value), "a node's body changed");
            out.push(n.value);
            at = n.next;
        }
        Ok(out)
    })
    .expect("walk")
}

fn ratio(heap: &DefragHeap) -> f64 {
    heap.stats().expect("stats").frag_ratio
}

/// Polls `f` for up to 20 s (a bound for a slow CI machine, not a timing).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(20), "never: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn a_collector_brings_a_fragmented_heap_to_its_target_beside_a_mutator() {
    let (heap, before) = fragmented(3000, 8);
    assert!(ratio(&heap) > 1.5, "{}", ratio(&heap));
    let stop_mutator = AtomicBool::new(false);
    let report = std::thread::scope(|s| {
        let opts = CollectorOptions::new(Trigger::normal())
            .compact(CompactOptions::new().protocol(Protocol::Sfccd))
            .interval(Some(Duration::from_millis(1)));
        let c = Collector::start_scoped(s, &heap, opts).expect("start");
        // The first sample sees the fragmented heap (the mutator's pushes
        // below would dilute it): its round compacts.
        eventually("a sample", || c.report().samples >= 1);
        // A mutator pushes on a list of its own while the collector runs.
        let mutator = s.spawn(|| {
            let mut pushed = Vec::new();
            while !stop_mutator.load(Ordering::Acquire) && pushed.len() < 5_000 {
                let v = 1_000_000 + pushed.len() as u64;
                heap.transaction(|t| {
                    let next = t.root::<Big>("m")?;
                    let p = t.alloc::<Big>()?;
                    t.write(p, &node(v, next))?;
                    t.set_root("m", p)
                })
                .expect("mutator push");
                pushed.push(v);
            }
            pushed
        });
        eventually("a compaction", || {
            let r = c.report();
            assert_eq!(r.errors, 0, "{r:?}");
            r.compactions >= 1
        });
        stop_mutator.store(true, Ordering::Release);
        let mut pushed = mutator.join().expect("mutator");
        // The mutator has stopped: the collector's last rounds see a still heap.
        eventually("the target", || {
            c.wake();
            let r = c.report();
            assert_eq!(r.errors, 0, "{r:?}");
            r.last_ratio <= 1.25 && !c.compacting()
        });
        let report = c.stop().expect("stop");
        pushed.reverse();
        assert_eq!(list(&heap, "m"), pushed, "the mutator's list");
        report
    });
    assert!(report.compactions >= 1, "{report:?}");
    assert!(report.moved > 0, "{report:?}");
    assert_eq!(report.errors, 0, "{report:?}");
    assert!(report.last_ratio <= 1.25, "{report:?}");
    assert!(ratio(&heap) <= 1.25, "{}", ratio(&heap));
    assert_eq!(
        list(&heap, "l"),
        before,
        "the list survived the compactions"
    );
    heap.verify().expect("verify");
}

#[test]
fn the_relaxed_trigger_leaves_a_heap_below_its_start_and_the_normal_one_does_not() {
    // 5 of every 16 freed: a ratio near 1.66, between the policies' starts.
    let (heap, before) = fragmented(2400, 5);
    let r0 = ratio(&heap);
    assert!(r0 > 1.5 && r0 < 1.7, "{r0}");
    let heap = Arc::new(heap);
    let relaxed = Collector::start(
        Arc::clone(&heap),
        CollectorOptions::new(Trigger::relaxed()).interval(None),
    )
    .expect("start");
    relaxed.wake();
    eventually("a sample", || relaxed.report().samples >= 1);
    let r = relaxed.stop().expect("stop");
    assert_eq!(r.compactions, 0, "{r:?}");
    assert_eq!(r.last_ratio, r0);
    let normal = Collector::start(
        Arc::clone(&heap),
        CollectorOptions::new(Trigger::normal()).interval(None),
    )
    .expect("start");
    normal.wake();
    eventually("a compaction", || normal.report().compactions >= 1);
    let r = normal.stop().expect("stop");
    assert!(r.compactions >= 1 && r.moved > 0, "{r:?}");
    assert!(r.last_ratio <= 1.25, "{r:?}");
    assert_eq!(list(&heap, "l"), before);
    heap.verify().expect("verify");
}

#[test]
fn an_idle_collector_stops_at_once_whatever_its_interval() {
    let (heap, _) = fragmented(200, 0);
    let heap = Arc::new(heap);
    let c = Collector::start(
        Arc::clone(&heap),
        CollectorOptions::new(Trigger::normal()).interval(Some(Duration::from_secs(3600))),
    )
    .expect("start");
    let t0 = Instant::now();
    let r = c.stop().expect("stop");
    // Not a timing: an hour's interval that stop did not cut short would hang.
    assert!(t0.elapsed() < Duration::from_secs(60));
    assert_eq!((r.compactions, r.errors), (0, 0), "{r:?}");
    // Dropped without stop: the thread ends too (the Arc's count comes back).
    let c = Collector::start(Arc::clone(&heap), CollectorOptions::default()).expect("start");
    drop(c);
    assert_eq!(Arc::strong_count(&heap), 1);
}
