//! The planning in slices (`pmem_defrag::planning`): a compaction planned in two
//! slices while a transaction, between them, frees sources of the first slice's
//! plan (one relocation page emptied, one left with fewer objects). Without a
//! crash, the commit frees those sources again through the barrier and nothing
//! leaks; crashed wherever the durable set can change (the line model, and
//! the word model too under `PMKIT_DEEP=1`),
//! reopening gives the list before or after the transaction, the heap's own
//! `verify`, no unreachable object, and the index's live count equal to the
//! marking's.

use pmem_core::sim::{Budget, CrashInfo, CrashTest, Model};
use pmem_core::{PPtr, Pool, PoolOptions};
use pmem_defrag::{persistent_type, CompactOptions, DefragError, DefragHeap, HeapRoot, Registry};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// A 248-byte record: 14 to a slab page.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
struct Record {
    data: [u64; 30],
    next: PPtr<Record>,
}
persistent_type!(Record, id = 2, pointers = [next: Record]);

fn registry() -> Registry {
    Registry::new().with::<Record>()
}

/// Records pushed (five pages of 14; value `v` in page `v / 14`).
const PUSHED: u64 = 70;

/// Kept in each of the first four pages (two each, so two plans of two pages
/// each); the fifth stays full.
fn kept(v: u64) -> bool {
    v >= 56 || v % 14 < 2
}

/// Freed between the two slices: both records of the first page (its
/// relocation page emptied) and one of the second.
const FREED_BETWEEN: [u64; 3] = [0, 1, 14];

fn push(heap: &DefragHeap, v: u64) -> Result<(), DefragError> {
    heap.transaction(|t| {
        let next = t.root::<Record>("r")?;
        let p = t.alloc::<Record>()?;
        t.write(
            p,
            &Record {
                data: [v; 30],
                next,
            },
        )?;
        t.set_root("r", p)
    })
}

/// Unlinks and frees every record whose value is in `values`, in one
/// transaction.
fn remove(heap: &DefragHeap, values: &[u64]) -> Result<(), DefragError> {
    heap.transaction(|t| {
        let mut prev: Option<PPtr<Record>> = None;
        let mut cur = t.root::<Record>("r")?;
        while !cur.is_null() {
            let r = t.read(cur)?;
            if values.contains(&r.data[0]) {
                match prev {
                    None => t.set_root("r", r.next)?,
                    Some(p) => {
                        let mut pr = t.read(p)?;
                        pr.next = r.next;
                        t.write(p, &pr)?;
                    }
                }
                t.free(cur)?;
            } else {
                prev = Some(cur);
            }
            cur = r.next;
        }
        Ok(())
    })
}

/// The fragmented heap: `PUSHED` records, all but the kept ones removed.
fn setup(heap: &DefragHeap) -> Result<(), DefragError> {
    for v in 0..PUSHED {
        push(heap, v)?;
    }
    let gone: Vec<u64> = (0..PUSHED).filter(|&v| !kept(v)).collect();
    for chunk in gone.chunks(8) {
        remove(heap, chunk)?;
    }
    Ok(())
}

/// The compaction in plans of two pages, `FREED_BETWEEN` removed after the
/// first slice. Fails if the planning had a single slice (nothing tested).
fn compact_with_frees_between(heap: &DefragHeap) -> Result<pmem_defrag::CompactReport, String> {
    let mut slices = 0;
    let mut failed = None;
    let c = heap
        .begin_compaction_between(&CompactOptions::new().target(1.0).plan_pages(2), &mut |h| {
            slices += 1;
            if slices == 1 {
                failed = remove(h, &FREED_BETWEEN).err();
            }
        })
        .map_err(|e| e.to_string())?
        .ok_or("nothing to compact")?;
    if let Some(e) = failed {
        return Err(format!("the transaction between the slices: {e}"));
    }
    if slices < 2 {
        return Err(format!("planned in {slices} slice(s), not two"));
    }
    c.finish().map_err(|e| e.to_string())
}

/// The list, newest first.
fn values(heap: &DefragHeap) -> Result<Vec<u64>, String> {
    let mut out = Vec::new();
    let mut p = heap.root::<Record>("r").map_err(|e| e.to_string())?;
    while !p.is_null() {
        let r = heap.read(p).map_err(|e| e.to_string())?;
        if r.data.iter().any(|&d| d != r.data[0]) {
            return Err(format!("torn record {:?}", r.data));
        }
        out.push(r.data[0]);
        p = r.next;
    }
    Ok(out)
}

/// The model: the kept values, newest first, less `freed`.
fn model(freed: &[u64]) -> Vec<u64> {
    (0..PUSHED)
        .rev()
        .filter(|&v| kept(v) && !freed.contains(&v))
        .collect()
}

/// The heap's invariants and its list: verify, no leak, the index's live
/// count equal to the marking's.
fn check_heap(heap: &DefragHeap) -> Result<Vec<u64>, String> {
    let report = heap.verify().map_err(|e| format!("verify: {e}"))?;
    if !report.unreachable.is_empty() {
        return Err(format!("leaked {:x?}", report.unreachable));
    }
    let stats = heap.stats().map_err(|e| e.to_string())?;
    if stats.live_objects != report.reachable.len() as u64 {
        return Err(format!("{stats:?} but marking found {report:?}"));
    }
    values(heap)
}

fn pool() -> Pool {
    Pool::anonymous(&PoolOptions::new("planning", 1 << 20).root::<HeapRoot>()).expect("pool")
}

#[test]
fn sources_freed_between_two_slices_are_freed_again_at_the_commit() {
    let heap = DefragHeap::create(pool(), &registry()).expect("heap");
    setup(&heap).expect("setup");
    let before = heap.stats().expect("stats");
    let r = compact_with_frees_between(&heap).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(check_heap(&heap), Ok(model(&FREED_BETWEEN)));
    // Two plans of two relocation pages each (the fifth page is full).
    assert_eq!(r.pages_freed, 4, "{r:?}");
    let after = heap.stats().expect("stats");
    assert!(after.pages < before.pages, "{before:?} -> {after:?}");
    assert!(
        r.plan_pause_ns > 0 && r.plan_pause_ns <= r.locked_ns,
        "{r:?}"
    );
    // The heap goes on: a transaction and another compaction.
    push(&heap, 1000).expect("push");
    heap.compact_with(&CompactOptions::new().target(1.0))
        .expect("compact");
    let mut want = model(&FREED_BETWEEN);
    want.insert(0, 1000);
    assert_eq!(check_heap(&heap), Ok(want));
}

fn recover(pool: Pool) -> Result<Vec<u64>, String> {
    let (heap, _) = DefragHeap::open(pool, &registry()).map_err(|e| format!("open: {e}"))?;
    check_heap(&heap)
}

/// `PMKIT_DEEP=1`: the simulator's budget (`PMKIT_SIM_DEPTH` scales it) and
/// both models; by default a few images per crash point, the line model.
fn deep() -> bool {
    std::env::var_os("PMKIT_DEEP").is_some()
}

fn crash_run(model_kind: Model) -> Result<(), String> {
    let budget = if deep() {
        Budget::from_env()
    } else {
        Budget {
            exhaustive_up_to: 4,
            k: 1,
            random: 2,
            ..Budget::default()
        }
    };
    CrashTest::new(PoolOptions::new("planning", 1 << 20).root::<HeapRoot>())
        .model(model_kind)
        .budget(budget)
        .recovery_budget(Budget {
            exhaustive_up_to: 1,
            k: 0,
            random: 0,
            ..Budget::default()
        })
        .run(
            |_| Ok(()),
            |pool, sim| {
                let heap = DefragHeap::create(pool, &registry()).map_err(|e| e.to_string())?;
                setup(&heap).map_err(|e| e.to_string())?;
                sim.mark_durable();
                sim.op(0, || compact_with_frees_between(&heap).map(|_| ()))?;
                sim.op(1, || push(&heap, 1000).map_err(|e| e.to_string()))?;
                Ok(())
            },
            recover,
            |got: &Vec<u64>, crash: &CrashInfo| {
                let before = model(&[]);
                let after = model(&FREED_BETWEEN);
                let mut pushed = after.clone();
                pushed.insert(0, 1000);
                let ok = match (crash.completed_ops, crash.in_flight.is_empty()) {
                    (0, true) => *got == before,
                    (0, false) => *got == before || *got == after,
                    (1, true) => *got == after,
                    (1, false) => *got == after || *got == pushed,
                    _ => *got == pushed,
                };
                if ok {
                    Ok(())
                } else {
                    Err(format!(
                        "recovered {got:?} after {} ops (in flight: {})",
                        crash.completed_ops,
                        !crash.in_flight.is_empty()
                    ))
                }
            },
        )
        .map(|_| ())
        .map_err(|f| f.to_string())
}

#[test]
fn a_crash_anywhere_in_a_planning_of_two_slices_recovers_a_consistent_heap() {
    let models: &[Model] = if deep() {
        &[Model::Line, Model::Word]
    } else {
        &[Model::Line]
    };
    for &m in models {
        crash_run(m).unwrap_or_else(|e| panic!("{m:?}: {e}"));
    }
}
