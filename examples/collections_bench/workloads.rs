//! The workloads' building blocks: random 8-byte keys, 8 B and 64 B values, pool
//! files that remove themselves, pmkit heaps, the chunked timing loop for operations
//! that change state (an insert cannot be repeated, so each variant runs the same
//! chunk of operations in turn, and a figure is the median over the chunks of ns per
//! operation), and per-thread flush and fence counts.

use std::path::{Path, PathBuf};

use pmem_collections::{PHeap, PType};
use pmem_core::{splitmix64, Counters, ModeRequest, Pool};

use crate::pmdk_map::slot_bytes;

/// `n` distinct random keys. splitmix64 is a bijection of its state, and the state
/// steps by an odd constant, so the keys cannot repeat within 2^64 draws: every
/// insert inserts a new key.
pub fn keys(n: u64, seed: u64) -> Vec<u64> {
    let mut s = seed;
    (0..n).map(|_| splitmix64(&mut s)).collect()
}

/// The index of the `i`-th lookup among `n` keys: random, with repeats, so gets do
/// not walk the table in insertion order.
pub fn lookup(i: u64, n: u64) -> usize {
    let mut s = i ^ LOOKUP_SEED;
    (splitmix64(&mut s) % n.max(1)) as usize
}

/// Seeds the lookups apart from the keys.
const LOOKUP_SEED: u64 = 0x00c0_ffee_d00d_f00d;

/// A value type of the workloads: 8 B (`u64`) or 64 B (`[u8; 64]`).
pub trait Val: PType + Copy + PartialEq + std::fmt::Debug {
    /// Bytes of the value.
    const LEN: usize;
    /// Value `i` (differs per `i`).
    fn make(i: u64) -> Self;
    /// Its bytes (for the PMDK peer, which stores raw bytes).
    fn bytes(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl Val for u64 {
    const LEN: usize = 8;
    fn make(i: u64) -> u64 {
        i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
}

impl Val for [u8; 64] {
    const LEN: usize = 64;
    fn make(i: u64) -> [u8; 64] {
        let mut v = [0u8; 64];
        for (j, w) in v.chunks_exact_mut(8).enumerate() {
            w.copy_from_slice(&(i ^ j as u64).to_le_bytes());
        }
        v
    }
}

/// A pool file removed when dropped (also when a run fails half way).
pub struct PoolFile(pub PathBuf);

impl PoolFile {
    /// A unique file name in `dir`.
    pub fn new(dir: &Path, what: &str) -> PoolFile {
        let p = dir.join(format!(
            "pmkit-coll-bench-{}-{what}.pool",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&p);
        PoolFile(p)
    }
}

impl Drop for PoolFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A heap with the default options on a new pool file of `size` bytes (`durable`:
/// the detected mode, msync on an ordinary file; otherwise forced `Dax`: the flush
/// and fence instructions of real PM, nothing durable on `/dev/shm`). Returns the
/// heap and the pool's durability mode, as text.
pub fn pmkit_heap(file: &PoolFile, size: u64, durable: bool) -> Result<(PHeap, String), String> {
    let mode = if durable {
        ModeRequest::Auto
    } else {
        ModeRequest::ForceDax
    };
    let pool = Pool::create(
        &file.0,
        &PHeap::pool_options("pmkit-coll-bench", size).mode(mode),
    )
    .map_err(|e| format!("{}: {e}", file.0.display()))?;
    let mode = format!("{:?}", pool.mode());
    let heap = PHeap::create(pool).map_err(|e| e.to_string())?;
    Ok((heap, mode))
}

/// Pool bytes for a hash table of `n` entries with `v`-byte values: the final
/// table (capacity the power of two above n / (7/8)), the one before it, which a
/// grow copies from, the log and slack.
pub fn map_pool_size(n: u64, v: usize) -> u64 {
    let cap = (n.saturating_mul(8) / 7 + 1).next_power_of_two().max(64);
    let table = cap * slot_bytes(v);
    mib_up(table * 2 + (64 << 20))
}

/// Pool bytes for a B-tree of `n` entries with `v`-byte values: nodes half full at
/// worst, the key and value bytes four times over, and slack.
pub fn btree_pool_size(n: u64, v: usize) -> u64 {
    mib_up(n * (8 + v as u64) * 4 + (64 << 20))
}

/// Pool bytes for a vector of `n` `v`-byte elements (the array and the one a
/// growth copies from, twice over for the doubling's slack).
pub fn vec_pool_size(n: u64, v: usize) -> u64 {
    mib_up(n * v as u64 * 4 + (64 << 20))
}

fn mib_up(b: u64) -> u64 {
    b.div_ceil(1 << 20) << 20
}

pub use crate::interleave::{chunked, median_ns, ChunkVariant};

/// A [`ChunkVariant::each`] that adds the chunk's flushes and fences (this thread's
/// [`Counters`] deltas: the variants run on one thread, one at a time) to `count`.
pub fn counted<'a>(
    name: &str,
    count: &'a mut Count,
    mut op: impl FnMut(u64) -> Result<(), String> + 'a,
) -> ChunkVariant<'a> {
    ChunkVariant {
        name: name.to_owned(),
        run: Box::new(move |start, end| {
            let before = Counters::current();
            let r = (start..end).try_for_each(&mut op);
            count.add(Counters::since(before), end - start);
            r
        }),
    }
}

/// Flushes and fences summed over operations.
#[derive(Clone, Copy, Debug, Default)]
pub struct Count {
    /// Operations counted.
    pub ops: u64,
    /// Cache lines flushed.
    pub lines: u64,
    /// Store fences.
    pub fences: u64,
}

impl Count {
    fn add(&mut self, d: Counters, ops: u64) {
        self.ops += ops;
        self.lines += d.lines_flushed;
        self.fences += d.fences;
    }

    /// Lines flushed per operation.
    pub fn flushes(&self) -> f64 {
        per(self.lines, self.ops)
    }

    /// Fences per operation.
    pub fn fences(&self) -> f64 {
        per(self.fences, self.ops)
    }
}

fn per(v: u64, ops: u64) -> f64 {
    if ops == 0 {
        f64::NAN
    } else {
        v as f64 / ops as f64
    }
}

/// The chunk length for `n` operations: fifty chunks, so fifty samples.
pub fn chunk_of(n: u64) -> u64 {
    (n / 50).max(1)
}

/// An error of a container, as text.
pub fn err(e: pmem_collections::Error) -> String {
    e.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_distinct_and_lookups_in_range() {
        let k = keys(10_000, 7);
        let mut s = k.clone();
        s.sort_unstable();
        s.dedup();
        assert_eq!(s.len(), k.len());
        assert!((0..1000).all(|i| lookup(i, 10) < 10));
        assert_ne!(<[u8; 64]>::make(1), <[u8; 64]>::make(2));
    }

    #[test]
    fn chunked_runs_every_operation_once_per_variant() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        {
            let mut v = vec![
                ChunkVariant::each("a", |i| {
                    a.push(i);
                    Ok(())
                }),
                ChunkVariant::each("b", |i| {
                    b.push(i);
                    Ok(())
                }),
            ];
            let s = chunked(&mut v, 10, 3).expect("run");
            assert_eq!(s.len(), 2);
        }
        assert_eq!(a, (0..10).collect::<Vec<_>>());
        assert_eq!(b, a);
    }
}
