//! The paper's persistent chained hash table (PHT), and its workload: `n` puts of
//! distinct random 64-byte keys with 64-byte values, then `n / 2` gets of random
//! inserted keys, then `n / 4` deletes of distinct random inserted keys.
//!
//! Layout: a fixed array of `n` bucket heads (8 bytes each), allocated at set-up
//! from the allocator under test in segments of [`SEGMENT_BUCKETS`] (2 KiB, a
//! small size class of any allocator), zeroed and persisted; the segment offsets
//! are kept in DRAM (the benchmark never reopens the table). A node is one block
//! of [`NODE`] bytes: `next` (8), key (64), value (64).
//!
//! * put: look the key up in its chain (it must be absent), allocate a node, fill
//!   it with the chain's head as `next`, persist it, then store and persist the
//!   8-byte bucket head (the node is reachable only once durable);
//! * get: walk the chain, compare keys, copy the value;
//! * delete: find the node and the word linking to it, store and persist the
//!   node's `next` there, then free the node.
//!
//! The allocator's own line flushes and fences are counted around `alloc` and
//! `free` only ([`Counted`]); the table's own data flushes are in `total_lines`.
//! At the end every chain is walked: the table must hold exactly the keys put and
//! not deleted, each with its value.

use std::time::Instant;

use pmem_core::{Counters, Pool};

use crate::heaps::{key, read_u64, value, write_persist, AllocCost, Counted, Rng};

/// Bytes of a node: `next`, a 64-byte key, a 64-byte value.
pub const NODE: u64 = 8 + 64 + 64;
/// Bucket heads per segment of the bucket array (2 KiB).
pub const SEGMENT_BUCKETS: u64 = 256;

const KEY_AT: u64 = 8;
const VALUE_AT: u64 = 72;

/// FNV-1a over the key.
fn hash(key: &[u8]) -> u64 {
    key.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The table.
pub struct Pht<'a> {
    heap: &'a Counted<'a>,
    pool: &'a Pool,
    segments: Vec<u64>,
    buckets: u64,
}

impl<'a> Pht<'a> {
    /// A table of `buckets` empty buckets; the bucket array's allocations are not
    /// counted.
    pub fn create(heap: &'a Counted<'a>, buckets: u64) -> Result<Pht<'a>, String> {
        let pool = heap.pool();
        let buckets = buckets.max(1);
        let zeros = [0u8; (SEGMENT_BUCKETS * 8) as usize];
        let mut segments = Vec::new();
        for _ in 0..buckets.div_ceil(SEGMENT_BUCKETS) {
            let seg = heap.alloc_uncounted(SEGMENT_BUCKETS * 8)?;
            // SAFETY: the segment was just allocated for this table; nothing else
            // references it.
            unsafe { write_persist(pool, seg, &zeros)? };
            segments.push(seg);
        }
        Ok(Pht {
            heap,
            pool,
            segments,
            buckets,
        })
    }

    /// The pool offset of the head of `key`'s bucket.
    fn head_at(&self, key: &[u8]) -> u64 {
        let b = hash(key) % self.buckets;
        self.segments[(b / SEGMENT_BUCKETS) as usize] + 8 * (b % SEGMENT_BUCKETS)
    }

    fn key_is(&self, node: u64, key: &[u8]) -> Result<bool, String> {
        let k = self
            .pool
            .bytes(node + KEY_AT, 64)
            .map_err(|e| format!("reading node {node:#x}: {e}"))?;
        Ok(k == key)
    }

    /// Finds `key`: `(node, offset of the word linking to it)`.
    fn find(&self, key: &[u8]) -> Result<Option<(u64, u64)>, String> {
        let mut link = self.head_at(key);
        let mut node = read_u64(self.pool, link)?;
        while node != 0 {
            if self.key_is(node, key)? {
                return Ok(Some((node, link)));
            }
            link = node;
            node = read_u64(self.pool, link)?;
        }
        Ok(None)
    }

    /// Puts a key that must not be present.
    pub fn put(&self, key: &[u8; 64], value: &[u8; 64]) -> Result<(), String> {
        if self.find(key)?.is_some() {
            return Err("PHT: key already present".into());
        }
        let head_at = self.head_at(key);
        let head = read_u64(self.pool, head_at)?;
        let node = self.heap.alloc(NODE)?;
        let mut buf = [0u8; NODE as usize];
        buf[..8].copy_from_slice(&head.to_le_bytes());
        buf[KEY_AT as usize..VALUE_AT as usize].copy_from_slice(key);
        buf[VALUE_AT as usize..].copy_from_slice(value);
        // SAFETY: the node was just allocated; this single-threaded table is the
        // only user of it and of the bucket head.
        unsafe {
            write_persist(self.pool, node, &buf)?;
            write_persist(self.pool, head_at, &node.to_le_bytes())
        }
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &[u8; 64]) -> Result<Option<[u8; 64]>, String> {
        let Some((node, _)) = self.find(key)? else {
            return Ok(None);
        };
        let v = self
            .pool
            .bytes(node + VALUE_AT, 64)
            .map_err(|e| format!("reading node {node:#x}: {e}"))?;
        let mut out = [0u8; 64];
        out.copy_from_slice(v);
        Ok(Some(out))
    }

    /// Deletes `key`; whether it was present.
    pub fn delete(&self, key: &[u8; 64]) -> Result<bool, String> {
        let Some((node, link)) = self.find(key)? else {
            return Ok(false);
        };
        let next = read_u64(self.pool, node)?;
        // SAFETY: the link word is a bucket head or the `next` of a node of this
        // single-threaded table; no reference to it is live.
        unsafe { write_persist(self.pool, link, &next.to_le_bytes())? };
        // SAFETY: the node is unlinked (durably) and was allocated with NODE bytes.
        unsafe { self.heap.free(node, NODE) }?;
        Ok(true)
    }

    /// Walks every chain: the number of nodes.
    pub fn count(&self) -> Result<u64, String> {
        let mut n = 0u64;
        for b in 0..self.buckets {
            let at = self.segments[(b / SEGMENT_BUCKETS) as usize] + 8 * (b % SEGMENT_BUCKETS);
            let mut node = read_u64(self.pool, at)?;
            while node != 0 {
                n += 1;
                if n > self.buckets.saturating_mul(64) {
                    return Err("PHT: a chain loops".into());
                }
                node = read_u64(self.pool, node)?;
            }
        }
        Ok(n)
    }
}

/// The figures of one PHT run on one allocator.
#[derive(Clone, Debug)]
pub struct PhtRun {
    /// Keys put.
    pub n: u64,
    /// The allocator's counted cost over the puts and deletes.
    pub cost: AllocCost,
    /// The allocator's cost over the puts alone (per insert figures).
    pub put_cost: AllocCost,
    /// All lines flushed during the puts and deletes (the table's own included).
    pub total_lines: u64,
    /// Wall-clock ns per put, per get, per delete.
    pub put_ns: f64,
    /// See `put_ns`.
    pub get_ns: f64,
    /// See `put_ns`.
    pub delete_ns: f64,
}

/// Runs the workload of `n` keys on `heap` (see the module docs) and checks the
/// table at the end.
pub fn run(heap: &Counted<'_>, n: u64, seed: u64) -> Result<PhtRun, String> {
    let t = Pht::create(heap, n)?;
    let before = Counters::current();
    let clock = Instant::now();
    for i in 0..n {
        t.put(&key(i), &value(i))?;
    }
    let put_ns = clock.elapsed().as_nanos() as f64 / n as f64;
    let put_cost = heap.cost();

    let mut rng = Rng::new(seed);
    let gets = n / 2;
    let clock = Instant::now();
    for _ in 0..gets {
        let i = rng.below(n);
        if t.get(&key(i))? != Some(value(i)) {
            return Err(format!("PHT: wrong value for key {i}"));
        }
    }
    let get_ns = clock.elapsed().as_nanos() as f64 / gets.max(1) as f64;

    let mut order: Vec<u64> = (0..n).collect();
    rng.shuffle(&mut order);
    let deletes = &order[..(n / 4) as usize];
    let clock = Instant::now();
    for &i in deletes {
        if !t.delete(&key(i))? {
            return Err(format!("PHT: key {i} missing at its delete"));
        }
    }
    let delete_ns = clock.elapsed().as_nanos() as f64 / deletes.len().max(1) as f64;
    let total_lines = Counters::since(before).lines_flushed;

    check(&t, n, deletes)?;
    Ok(PhtRun {
        n,
        cost: heap.cost(),
        put_cost,
        total_lines,
        put_ns,
        get_ns,
        delete_ns,
    })
}

/// The table holds exactly the keys put and not deleted (sampled for values).
fn check(t: &Pht<'_>, n: u64, deleted: &[u64]) -> Result<(), String> {
    let live = n - deleted.len() as u64;
    let counted = t.count()?;
    if counted != live {
        return Err(format!("PHT holds {counted} nodes, expected {live}"));
    }
    for &i in deleted.iter().take(1000) {
        if t.get(&key(i))?.is_some() {
            return Err(format!("PHT: deleted key {i} is still there"));
        }
    }
    let mut gone = vec![false; n as usize];
    for &i in deleted {
        gone[i as usize] = true;
    }
    let step = (n / 1000).max(1);
    for i in (0..n).step_by(step as usize).filter(|&i| !gone[i as usize]) {
        if t.get(&key(i))? != Some(value(i)) {
            return Err(format!("PHT: key {i} lost or wrong after the deletes"));
        }
    }
    Ok(())
}
