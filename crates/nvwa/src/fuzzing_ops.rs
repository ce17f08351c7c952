//! The `nvwa_ops` fuzz target (needs the `sim` feature): a sequence of
//! allocations (plain, then filled and linked into a root slot by the caller;
//! or `alloc_publish`), frees (unlink, then free) and checkpoints, decoded from
//! the input, run on pmem-core's simulated pool, crashed at a fuzz-chosen crash
//! point with fuzz-chosen lines persisted, and reopened (log replay). Then, as
//! the crash suite `tests/heap_crash.rs` promises:
//!
//! * every non-null slot points to the start of a live block whose recorded
//!   length is its size and whose bytes are the slot's pattern;
//! * the slots equal the model after the completed operations, or after the one
//!   in flight too;
//! * the live blocks are the slots' blocks, plus at most the one block of an
//!   in-flight plain `alloc` (not linked yet) or `free` (unlinked first): no leak
//!   beyond that, and no completed free lost;
//! * no two live blocks overlap, and all lie inside the heap.
//!
//! Input format: two bytes of crash point (little endian, modulo the number of
//! points), one byte per operation (`kind = b % 4`: alloc, publish, free,
//! checkpoint; `slot = b / 4 % 6`) up to a byte `0xff` or [`MAX_OPS`], then one
//! byte per line in flight choosing what of it persists.

use std::sync::Arc;

use pmem_core::sim::{CrashPoints, CrashState, CrashTest, Model as CrashModel};
use pmem_core::{AtomicPPtr, PPtr, PersistentAllocator, Pool, PoolOptions};

use crate::{Nvwa, NvwaOptions};

/// Slots of the root, each with its block size (small classes, one sharing a
/// run with another, and large blocks).
pub const SIZES: [u64; 6] = [48, 160, 48, 2000, 5000, 16000];
/// Most operations of one case.
pub const MAX_OPS: usize = 16;
const POOL_BYTES: u64 = 256 * 1024;

/// One operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `alloc`, fill with the slot's pattern, persist, link into the slot.
    Alloc(usize),
    /// `alloc_publish` into the slot.
    Publish(usize),
    /// Unlink (persisted), then `free`.
    Free(usize),
    /// A checkpoint of the log.
    Checkpoint,
}

/// What the run found.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Operations run.
    pub ops: usize,
    /// Crash points of the trace.
    pub points: usize,
}

fn pattern(i: usize) -> u8 {
    0xa0 + i as u8
}

fn options() -> NvwaOptions {
    NvwaOptions {
        // Small, so that checkpoints also happen on their own.
        log_words: Some(48),
        arenas: 1,
        ..NvwaOptions::default()
    }
}

fn slot_ptr(root: u64, i: usize) -> PPtr<AtomicPPtr<u8>> {
    PPtr::from_offset(root + 8 * i as u64)
}

fn load(pool: &Pool, root: u64, i: usize) -> Result<PPtr<u8>, String> {
    // SAFETY: the slots are accessed only atomically here.
    let slot = unsafe { pool.get_shared(slot_ptr(root, i)) }.map_err(|e| e.to_string())?;
    Ok(slot.load(std::sync::atomic::Ordering::Acquire))
}

fn store(pool: &Pool, root: u64, i: usize, p: PPtr<u8>) -> Result<(), String> {
    // SAFETY: as above.
    let slot = unsafe { pool.get_shared(slot_ptr(root, i)) }.map_err(|e| e.to_string())?;
    slot.store(p, std::sync::atomic::Ordering::Release);
    pool.persist_ptr(slot_ptr(root, i))
        .map_err(|e| e.to_string())
}

/// The model: per slot, whether it holds a block.
type Slots = [bool; SIZES.len()];

/// Decodes the operations (only those that change the model: an alloc into a
/// full slot or a free of an empty one is skipped) and the rest of the input.
fn decode(data: &[u8]) -> (u16, Vec<Op>, &[u8]) {
    let point = u16::from_le_bytes([
        data.first().copied().unwrap_or(0),
        data.get(1).copied().unwrap_or(0),
    ]);
    let mut rest = data.get(2..).unwrap_or(&[]);
    let mut ops = Vec::new();
    let mut m: Slots = [false; SIZES.len()];
    while let Some((&b, tail)) = rest.split_first() {
        rest = tail;
        if b == 0xff || ops.len() == MAX_OPS {
            break;
        }
        let slot = usize::from(b / 4) % SIZES.len();
        let op = match b % 4 {
            0 => Op::Alloc(slot),
            1 => Op::Publish(slot),
            2 => Op::Free(slot),
            _ => Op::Checkpoint,
        };
        if step(&mut m, op) {
            ops.push(op);
        }
    }
    (point, ops, rest)
}

/// Applies `op` to the model; false if it does nothing.
fn step(m: &mut Slots, op: Op) -> bool {
    match op {
        Op::Alloc(i) | Op::Publish(i) if !m[i] => {
            m[i] = true;
            true
        }
        Op::Free(i) if m[i] => {
            m[i] = false;
            true
        }
        Op::Checkpoint => true,
        _ => false,
    }
}

fn model_after(ops: &[Op]) -> Slots {
    let mut m = [false; SIZES.len()];
    for &op in ops {
        step(&mut m, op);
    }
    m
}

fn apply(heap: &Nvwa, pool: &Pool, root: u64, op: Op) -> Result<(), String> {
    let e = |e: pmem_core::AllocError| e.to_string();
    match op {
        Op::Alloc(i) => {
            let p = heap.alloc(SIZES[i]).map_err(e)?;
            let data = vec![pattern(i); SIZES[i] as usize];
            // SAFETY: the block is ours alone until linked.
            unsafe { pool.write_bytes_shared(p.offset(), &data) }.map_err(|e| e.to_string())?;
            pool.persist(p.offset(), SIZES[i])
                .map_err(|e| e.to_string())?;
            store(pool, root, i, p)
        }
        Op::Publish(i) => {
            // SAFETY: the slot is accessed only atomically, and nothing else
            // stores to it meanwhile.
            unsafe {
                heap.alloc_publish(SIZES[i], slot_ptr(root, i), &mut |b: &mut [u8]| {
                    b.fill(pattern(i))
                })
            }
            .map(|_| ())
            .map_err(e)
        }
        Op::Free(i) => {
            let p = load(pool, root, i)?;
            store(pool, root, i, PPtr::null())?;
            // SAFETY: unlinked above; nothing references the block.
            unsafe { heap.free(p, SIZES[i]) }.map_err(e)
        }
        Op::Checkpoint => heap.checkpoint().map_err(e),
    }
}

/// What a reopened image holds: the slots (checked), and the live blocks that no
/// slot holds.
fn recover(pool: Pool, root: u64) -> Result<(Slots, usize), String> {
    let pool = Arc::new(pool);
    // SAFETY: the heap's region is this allocator's alone.
    let heap = unsafe { Nvwa::open_heap(Arc::clone(&pool), &options()) }
        .map_err(|e| format!("open: {e}"))?;
    let mut live = Vec::new();
    heap.for_each_live_block(&mut |p: PPtr<u8>, size| live.push((p.offset(), size)))
        .map_err(|e| e.to_string())?;
    let pages = heap.geometry().heap();
    let mut end = pages.start;
    for &(off, size) in &live {
        if off < end || off + size > pages.end {
            return Err(format!(
                "live block {off:#x}+{size} overlaps another or lies outside {pages:?}"
            ));
        }
        end = off + size;
    }
    let mut slots = [false; SIZES.len()];
    let mut linked = Vec::new();
    for (i, s) in slots.iter_mut().enumerate() {
        let p = load(&pool, root, i)?;
        if p.is_null() {
            continue;
        }
        *s = true;
        if !live.iter().any(|&(off, _)| off == p.offset()) {
            return Err(format!(
                "slot {i} points to {:#x}, no live block",
                p.offset()
            ));
        }
        if heap.recorded_len(p) != Some(crate::classes::record_len(SIZES[i])) {
            return Err(format!(
                "slot {i}'s block {:#x} records {:?} bytes, not {}",
                p.offset(),
                heap.recorded_len(p),
                SIZES[i]
            ));
        }
        let bytes = pool
            .bytes(p.offset(), SIZES[i])
            .map_err(|e| e.to_string())?;
        if bytes.iter().any(|&b| b != pattern(i)) {
            return Err(format!(
                "slot {i}'s block {:#x} lost its contents",
                p.offset()
            ));
        }
        if linked.contains(&p.offset()) {
            return Err(format!("two slots share the block {:#x}", p.offset()));
        }
        linked.push(p.offset());
    }
    Ok((slots, live.len() - linked.len()))
}

/// The target's body: decodes `data`, runs, crashes, recovers and checks.
///
/// # Panics
/// When a promise of the module docs is broken (that is the finding).
pub fn run_ops(data: &[u8]) -> Outcome {
    let (point, ops, cuts) = decode(data);
    let opts = PoolOptions::new("pmkit-fuzz-nvwa-ops", POOL_BYTES).root::<[u64; SIZES.len()]>();
    let test = CrashTest::new(opts);
    let root = std::cell::Cell::new(0u64);
    let trace = test.record(
        |_| Ok(()),
        |pool, sim| {
            let pool = Arc::new(pool);
            root.set(
                pool.root::<[u64; SIZES.len()]>()
                    .map_err(|e| e.to_string())?
                    .offset(),
            );
            // SAFETY: the fresh pool's heap is this allocator's alone.
            let heap = unsafe { Nvwa::format_heap(Arc::clone(&pool), &options()) }
                .map_err(|e| e.to_string())?;
            sim.mark_durable();
            for (n, &op) in ops.iter().enumerate() {
                sim.op(n as u32, || apply(&heap, &pool, root.get(), op))
                    .map_err(|e| format!("op {n} {op:?}: {e}"))?;
            }
            Ok(())
        },
    );
    let trace = match trace {
        Ok(t) => t,
        // The simulator's event bound: not a finding.
        Err(f) if f.message.contains("overflowed") => return Outcome::default(),
        Err(f) => panic!("recording {ops:?} failed: {f}"),
    };
    let points = trace.crash_points(CrashPoints::Durable);
    let pi = usize::from(point) % points.len();
    let state = CrashState::new(&trace, points[pi], CrashModel::Line);
    let mut cut = state.maximal();
    for (i, unit) in state.in_flight().iter().enumerate() {
        if let Some(&c) = cuts.get(i) {
            cut[i] = unit.durable + usize::from(c) % unit.choices();
        }
    }
    let image = state.materialize(&cut);
    let pool = Pool::from_image(&image).expect("a crash image is a pool");
    let (slots, extra) = recover(pool, root.get())
        .unwrap_or_else(|e| panic!("crash point {pi}/{}: {e}\nops: {ops:?}", points.len()));
    let at = trace.ops_at(points[pi]);
    let done = at.completed.len();
    let in_flight = at.in_flight.first().map(|&n| ops[n as usize]);
    let before = model_after(&ops[..done]);
    let after = in_flight.map(|_| model_after(&ops[..done + 1]));
    assert!(
        slots == before || Some(slots) == after,
        "crash point {pi}/{}: slots {slots:?}; expected {before:?} or {after:?}\nops: {ops:?}",
        points.len()
    );
    let may_leak = usize::from(matches!(in_flight, Some(Op::Alloc(_) | Op::Free(_))));
    assert!(
        extra <= may_leak,
        "crash point {pi}/{}: {extra} live blocks no slot holds (in flight: {in_flight:?})\nops: {ops:?}",
        points.len()
    );
    Outcome {
        ops: ops.len(),
        points: points.len(),
    }
}
