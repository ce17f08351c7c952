//! The 4-thread concurrent hash map (the paper's §7.3 runs its concurrent
//! structures with 4 threads): four client threads issue transactions on one
//! shared `&DefragHeap` (they serialize on its heap lock), each on its own keys
//! (key mod 4 = its index) through the [`super::hash`] table, with the phases of
//! the other workloads split among them; every 1 % of a phase's operations (of
//! all threads) the thread making it samples the heap and, above [`TRIGGER`],
//! wakes the library's [`pmem_defrag::Collector`], whose FFCCD compactions run beside
//! the four clients. The baseline is the same run without the collector (the threads
//! interleave differently, so its samples are of the same operation counts, not
//! of the same operations, and the live bytes at a count differ between the runs:
//! [`reduction`] is therefore Eq. 1 over each run's own fragmentation, the mean
//! footprint above the live bytes). pmkit only: PMDK's peer would
//! need its own locking around the pool, and `pmemobj_defrag` stops the world.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use super::{
    collector, compact_once, fresh_key, hash, pmkit_heap, pmkit_store::Pm, run_op, stop, Ds, Env,
    Model, Op, Sample, TRIGGER,
};
use super::{setup, store::Rng};

/// Client threads.
pub const THREADS: u64 = 4;

/// One run of the concurrent hash map.
#[derive(Clone, Debug, Default)]
pub struct ChmRun {
    /// Check points (operations of all threads so far), in order.
    pub samples: Vec<Sample>,
    /// Compactions during the phases.
    pub compactions: u64,
    /// Objects they moved.
    pub moved: u64,
    /// Ratio at the end of the phases, and after a final compaction.
    pub ratio_before: f64,
    /// See `ratio_before`.
    pub ratio_after: f64,
    /// Operations of all threads per second.
    pub ops_per_sec: f64,
}

/// One client's phases; returns its model.
fn client(
    env: &Env,
    heap: &pmem_defrag::DefragHeap,
    id: u64,
    total: &AtomicU64,
    on_check: &(dyn Fn(u64) -> Result<(), String> + Sync),
) -> Result<Model, String> {
    let w = setup(Ds::Lru, env.plan.n);
    let mut rng = Rng::new(env.seed ^ (id + 1).wrapping_mul(0x51ed));
    let mut m = Model::default();
    let (n, phase) = (env.plan.n / THREADS, env.plan.phase / THREADS);
    let every = (env.plan.phase / env.plan.checks.max(1)).max(1);
    for (insert, count) in [(true, n), (false, phase), (true, phase), (false, phase)] {
        for _ in 0..count {
            if insert {
                let key = loop {
                    let k = (fresh_key(w, &mut rng, &m) << 2) | id;
                    if !m.contains(k) {
                        break k;
                    }
                };
                let tag = rng.next_u64() as u8;
                run_op(heap, w, Op::HashInsert { key, tag })?;
                m.set(key, tag);
            } else if let Some(key) = m.pick(&mut rng) {
                run_op(heap, w, Op::HashDelete { key })?;
                m.remove(key);
            }
            // Check points every 1 % of a phase of all threads' operations,
            // taken by whichever thread makes the operation (the runs' samples
            // then fall at the same operation counts).
            let ops = total.fetch_add(1, Ordering::Relaxed) + 1;
            if ops.is_multiple_of(every) {
                on_check(ops)?;
            }
        }
    }
    Ok(m)
}

/// Runs the concurrent hash map with the collector or without.
pub fn run(env: &Env, defrag: bool) -> Result<ChmRun, String> {
    let tag = format!("chm-{}", if defrag { "on" } else { "off" });
    let (heap, _file) = pmkit_heap(&env.dir, &tag, env.plan.n, env.durable)?;
    let total = AtomicU64::new(0);
    let samples = Mutex::new(Vec::new());
    let t0 = Instant::now();
    let (models, compactions, moved) = std::thread::scope(|s| {
        // The library's collector, woken by the check points above the trigger.
        let c = if defrag {
            Some(collector(s, &heap, env.protocol())?)
        } else {
            None
        };
        let on_check = |ops: u64| -> Result<(), String> {
            let st = heap.stats().map_err(|e| e.to_string())?;
            samples.lock().map_err(|e| e.to_string())?.push(Sample {
                ops,
                footprint: st.footprint_bytes,
                live: st.live_bytes,
            });
            if let Some(c) = &c {
                if st.frag_ratio > TRIGGER && !c.compacting() {
                    c.wake();
                }
            }
            Ok(())
        };
        let models: Vec<_> = std::thread::scope(|cs| {
            let clients: Vec<_> = (0..THREADS)
                .map(|id| {
                    let (heap, total, on_check) = (&heap, &total, &on_check);
                    cs.spawn(move || client(env, heap, id, total, on_check))
                })
                .collect();
            clients
                .into_iter()
                .map(|c| c.join().map_err(|_| "a client panicked".to_string()))
                .collect()
        });
        let (n, moved) = match c {
            Some(c) => {
                let r = stop(c)?;
                (r.compactions, r.moved)
            }
            None => (0, 0),
        };
        let models = models
            .into_iter()
            .collect::<Result<Result<Vec<Model>, String>, String>>()??;
        Ok::<_, String>((models, n, moved))
    })?;
    let secs = t0.elapsed().as_secs_f64();
    let ratio =
        |h: &pmem_defrag::DefragHeap| h.stats().map(|s| s.frag_ratio).map_err(|e| e.to_string());
    let ratio_before = ratio(&heap)?;
    if defrag {
        compact_once(&heap, env.protocol())?;
    }
    let ratio_after = ratio(&heap)?;
    let mut got = heap
        .transaction(|t| hash::contents(&mut Pm(t)))
        .map_err(|e| format!("chm: {e}"))?;
    got.sort_unstable();
    let mut want_all: Vec<(u64, u8)> = models.iter().flat_map(Model::sorted).collect();
    want_all.sort_unstable();
    if got != want_all {
        return Err(format!(
            "chm: contents differ from the clients' models ({} vs {})",
            got.len(),
            want_all.len()
        ));
    }
    heap.verify().map_err(|e| format!("chm: verify: {e}"))?;
    let mut samples = samples.into_inner().map_err(|e| e.to_string())?;
    samples.sort_by_key(|s| s.ops);

    Ok(ChmRun {
        samples,
        compactions,
        moved,
        ratio_before,
        ratio_after,
        ops_per_sec: total.load(Ordering::Relaxed) as f64 / secs,
    })
}

/// Eq. 1 for two runs whose live bytes differ: 100 × (mean excess without the
/// collector − mean excess with it) / mean excess without, the excess of a sample
/// being its footprint above its live bytes (with equal live bytes, this is Eq. 1).
pub fn reduction(on: &ChmRun, off: &ChmRun) -> f64 {
    let excess =
        |r: &ChmRun| super::report::mean(&r.samples, |s| s.footprint.saturating_sub(s.live));
    let base = excess(off);
    if base <= 0.0 {
        0.0
    } else {
        100.0 * (base - excess(on)) / base
    }
}
