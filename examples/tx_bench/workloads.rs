//! The workloads' building blocks: keys and values, pool files that remove
//! themselves, per-operation cost accumulation from [`TxStats`], and the chunked
//! timing loop for operations that change state (an insert cannot be repeated, so
//! each variant inserts the same chunk of keys in turn, and a figure is the median
//! over the chunks of ns per operation).

use std::path::{Path, PathBuf};

use pmem_collections::{HeapOptions, PBytes, PHashMap, PHeap};
use pmem_core::tx::{LogMode, Logging, TxGeometry, TxHeap, TxOptions, TxStats};
use pmem_core::{ModeRequest, Pool, PoolOptions};

/// The three logging methods compared, in table order.
pub const LOGGINGS: [(Logging, &str); 3] = [
    (Logging::Word, "word"),
    (Logging::Object, "object"),
    (Logging::Hybrid, "hybrid"),
];

/// Key `i`: 64 bytes (the paper's 64 B keys), unique per `i`.
pub fn key(i: u64) -> Vec<u8> {
    format!("key-{i:060}").into_bytes()
}

/// Value `i` of `len` bytes (deterministic, differs per `i`).
pub fn value(i: u64, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i as usize + j) as u8).collect()
}

/// A pool file removed when dropped (also when a run fails half way).
pub struct PoolFile(pub PathBuf);

impl PoolFile {
    /// A unique file name in `dir`.
    pub fn new(dir: &Path, what: &str) -> PoolFile {
        PoolFile(dir.join(format!("pmkit-tx-bench-{}-{what}.pool", std::process::id())))
    }
}

impl Drop for PoolFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The log geometry of every pmkit heap here: one lane (one thread), room for a
/// 4 KiB value logged word by word under `log_fresh` (the paper's word engine).
pub fn geometry() -> TxGeometry {
    TxGeometry {
        lanes: 1,
        word_records: 1024,
        object_records: 16,
        object_bytes: 16 * 1024,
        alloc_records: 8,
        lazy_ring_bytes: 64 * 1024,
    }
}

/// Allocator page size of the heaps: a 64-byte key or value takes one page.
pub const PAGE: u64 = 64;

/// A pmkit transactional heap on a new pool file of `size` bytes (`durable`:
/// the detected mode, msync on an ordinary file; otherwise forced `Dax`).
pub fn pmkit_heap(file: &PoolFile, size: u64, durable: bool) -> Result<TxHeap, String> {
    let _ = std::fs::remove_file(&file.0);
    let mode = if durable {
        ModeRequest::Auto
    } else {
        ModeRequest::ForceDax
    };
    let pool = Pool::create(
        &file.0,
        &PoolOptions::new("pmkit-tx-bench", size).mode(mode),
    )
    .map_err(|e| format!("{}: {e}", file.0.display()))?;
    TxHeap::create(pool, &geometry(), PAGE).map_err(|e| e.to_string())
}

/// The hash table of the workloads: pmem-collections' map of byte strings.
pub type Map = PHashMap<PBytes, PBytes>;

/// A pmkit hash table with room for `n` entries (grown before the run, so the
/// timings are of inserts, not growth) in a new heap (`durable` as for
/// [`pmkit_heap`]); its operations run in the mode and with the hints each call
/// names (`insert_with`, `remove_with`).
pub fn pmkit_map(
    file: &PoolFile,
    size: u64,
    n: u64,
    durable: bool,
) -> Result<(PHeap, Map), String> {
    let _ = std::fs::remove_file(&file.0);
    let mode = if durable {
        ModeRequest::Auto
    } else {
        ModeRequest::ForceDax
    };
    let pool = Pool::create(
        &file.0,
        &PHeap::pool_options("pmkit-tx-bench", size).mode(mode),
    )
    .map_err(|e| format!("{}: {e}", file.0.display()))?;
    let heap = PHeap::create_with(
        pool,
        HeapOptions {
            geometry: geometry(),
            page_size: PAGE,
            mode: LogMode::Undo,
        },
    )
    .map_err(|e| e.to_string())?;
    let mut map: Map = heap.root("pht").map_err(|e| e.to_string())?;
    map.reserve(&heap, n).map_err(|e| e.to_string())?;
    Ok((heap, map))
}

/// Pool bytes for `n` entries with `value_len`-byte values, generously.
pub fn pool_size(n: u64, value_len: usize) -> u64 {
    let value_pages = (value_len as u64).max(8).div_ceil(PAGE) * PAGE;
    // The key's page, the value's, and up to 2.3 slots of 40 B (the table is at
    // most 7/8 full after a doubling: 8/7 x 2 slots per entry).
    let per_entry = PAGE + value_pages + 96;
    // Allocator bitmap and slack; PMDK's headers.
    (n * (per_entry * 3 / 2 + 64) + (64 << 20)).div_ceil(1 << 20) << 20
}

/// Sums of [`TxStats`] over operations.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cost {
    /// Operations summed.
    pub ops: u64,
    /// The stats summed.
    pub sum: TxStats,
}

impl Cost {
    /// Adds one operation's stats.
    pub fn add(&mut self, s: &TxStats) {
        self.ops += 1;
        self.sum += *s;
    }

    fn per(&self, v: u64) -> f64 {
        if self.ops == 0 {
            f64::NAN
        } else {
            v as f64 / self.ops as f64
        }
    }

    /// Data-record metadata bytes per operation.
    pub fn meta_bytes(&self) -> f64 {
        self.per(self.sum.log_meta_bytes)
    }

    /// Logged data bytes per operation.
    pub fn data_bytes(&self) -> f64 {
        self.per(self.sum.log_data_bytes)
    }

    /// Allocation-record bytes per operation.
    pub fn alloc_bytes(&self) -> f64 {
        self.per(self.sum.alloc_record_bytes)
    }

    /// Metadata line flushes per operation.
    pub fn meta_flushes(&self) -> f64 {
        self.per(self.sum.meta_lines_flushed)
    }

    /// All lines flushed per operation.
    pub fn lines(&self) -> f64 {
        self.per(self.sum.lines_flushed)
    }

    /// Fences per operation.
    pub fn fences(&self) -> f64 {
        self.per(self.sum.fences)
    }
}

/// The log cost of `n` inserts then `n` removals of 64-byte keys with
/// `value_len`-byte values, one transaction each (undo), on a forced-DAX heap in
/// `dir`: `(insert cost, removal cost)`.
pub fn pht_costs(
    dir: &Path,
    n: u64,
    value_len: usize,
    logging: Logging,
    log_fresh: bool,
) -> Result<(Cost, Cost), String> {
    let file = PoolFile::new(dir, "cost");
    let (heap, mut t) = pmkit_map(&file, pool_size(n, value_len), n.max(1), false)?;
    let opts = TxOptions::from(LogMode::Undo).log_fresh(log_fresh);
    let (mut ins, mut del) = (Cost::default(), Cost::default());
    for i in 0..n {
        let (_, s) = t
            .insert_with(&heap, &key(i), &value(i, value_len), opts, logging)
            .map_err(|e| e.to_string())?;
        ins.add(&s);
    }
    for i in 0..n {
        let (found, s) = t
            .remove_with(&heap, &key(i), opts, logging)
            .map_err(|e| e.to_string())?;
        if found.is_none() {
            return Err(format!("pmkit table lost key {i}"));
        }
        del.add(&s);
    }
    Ok((ins, del))
}

pub use crate::interleave::{chunked, median_ns, ChunkVariant};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_64_bytes_and_unique() {
        assert_eq!(key(0).len(), 64);
        assert_eq!(key(u64::MAX / 2).len(), 64);
        assert_ne!(key(1), key(2));
        assert_ne!(value(1, 64), value(2, 64));
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

    #[test]
    fn hybrid_logging_of_an_insert_costs_less_than_word_logging() {
        let dir = std::env::temp_dir();
        let (word, _) = pht_costs(&dir, 20, 64, Logging::Word, true).expect("word");
        let (hybrid, _) = pht_costs(&dir, 20, 64, Logging::Hybrid, true).expect("hybrid");
        // The paper's engine: key (8 words) + value (8) + slot (5: control word,
        // key and value offsets and lengths) + count, word by word: 22 records;
        // hybrid: three object records and one word record.
        assert_eq!(word.meta_bytes(), 22.0 * 24.0);
        assert_eq!(hybrid.meta_bytes(), 3.0 * 32.0 + 24.0);
        let (default, _) = pht_costs(&dir, 20, 64, Logging::Hybrid, false).expect("default");
        assert_eq!(
            default.meta_bytes(),
            32.0 + 24.0,
            "only the slot and the count"
        );
        // One batch, but a word record and an object record live in two logs:
        // two metadata lines. Object records for both: one line (what
        // `PHashMap::insert` uses).
        assert_eq!(default.meta_flushes(), 2.0, "one batch, two logs");
        let (object, _) = pht_costs(&dir, 20, 64, Logging::Object, false).expect("object");
        assert_eq!(object.meta_bytes(), 2.0 * 32.0);
        assert_eq!(object.meta_flushes(), 1.0, "one batch, one line");
    }
}
