//! The map workloads, one generic run for `PHashMap` and `PBTreeMap`: `n` inserts
//! of distinct random 8-byte keys, `n` random gets, range scans of 100 keys (ordered
//! maps), then `n` removes; pmkit beside std (and, for the hash table, PMDK's
//! transactions on the same table), interleaved chunk by chunk.

use pmem_collections::{Container, PBTreeMap, PHashMap, PHeap};

use crate::interleave::Stats;
use crate::pmdk::{Pmdk, PmdkPool};
use crate::pmdk_map::PmdkMap;
use crate::std_peer::StdMap;
use crate::workloads::{
    chunk_of, chunked, counted, err, keys, lookup, ChunkVariant, Count, PoolFile, Val,
};

/// Entries a range scan reads.
pub const SCAN: usize = 100;

/// A persistent map as the workloads drive it.
pub trait PMap<V: Val>: Container {
    /// Name in tables ("PHashMap").
    const NAME: &'static str;
    /// Pool bytes for `n` entries.
    fn pool_size(n: u64) -> u64;
    /// Inserts or updates; the old value.
    fn put(&mut self, heap: &PHeap, k: u64, v: &V) -> Result<Option<V>, String>;
    /// The value of `k`.
    fn find(&self, heap: &PHeap, k: u64) -> Result<Option<V>, String>;
    /// Removes `k`; its value.
    fn del(&mut self, heap: &PHeap, k: u64) -> Result<Option<V>, String>;
    /// Entries.
    fn size(&self, heap: &PHeap) -> Result<u64, String>;
    /// Reads up to `count` entries from the first key at or after `from`, in order;
    /// how many (`None`: the map has no order).
    fn scan(&self, heap: &PHeap, from: u64, count: usize) -> Result<Option<u64>, String>;
}

impl<V: Val> PMap<V> for PHashMap<u64, V> {
    const NAME: &'static str = "PHashMap";
    fn pool_size(n: u64) -> u64 {
        crate::workloads::map_pool_size(n, V::LEN)
    }
    fn put(&mut self, heap: &PHeap, k: u64, v: &V) -> Result<Option<V>, String> {
        self.insert(heap, &k, v).map_err(err)
    }
    fn find(&self, heap: &PHeap, k: u64) -> Result<Option<V>, String> {
        self.get(heap, &k).map_err(err)
    }
    fn del(&mut self, heap: &PHeap, k: u64) -> Result<Option<V>, String> {
        self.remove(heap, &k).map_err(err)
    }
    fn size(&self, heap: &PHeap) -> Result<u64, String> {
        self.len(heap).map_err(err)
    }
    fn scan(&self, _: &PHeap, _: u64, _: usize) -> Result<Option<u64>, String> {
        Ok(None)
    }
}

impl<V: Val> PMap<V> for PBTreeMap<u64, V> {
    const NAME: &'static str = "PBTreeMap";
    fn pool_size(n: u64) -> u64 {
        crate::workloads::btree_pool_size(n, V::LEN)
    }
    fn put(&mut self, heap: &PHeap, k: u64, v: &V) -> Result<Option<V>, String> {
        self.insert(heap, &k, v).map_err(err)
    }
    fn find(&self, heap: &PHeap, k: u64) -> Result<Option<V>, String> {
        self.get(heap, &k).map_err(err)
    }
    fn del(&mut self, heap: &PHeap, k: u64) -> Result<Option<V>, String> {
        self.remove(heap, &k).map_err(err)
    }
    fn size(&self, heap: &PHeap) -> Result<u64, String> {
        self.len(heap).map_err(err)
    }
    fn scan(&self, heap: &PHeap, from: u64, count: usize) -> Result<Option<u64>, String> {
        let mut n = 0u64;
        for e in self.range(heap, from..).map_err(err)?.take(count) {
            std::hint::black_box(e.map_err(err)?);
            n += 1;
        }
        Ok(Some(n))
    }
}

/// One timed phase: per variant, its name and statistics.
pub type Phase = Vec<(String, Stats)>;

/// The figures of one map run.
pub struct MapRun {
    /// The structure ("PHashMap").
    pub name: &'static str,
    /// Bytes of a value.
    pub value_len: usize,
    /// Elements.
    pub n: u64,
    /// Insert, get, remove, and range scans (ordered maps: ns per scan).
    pub insert: Phase,
    /// Gets.
    pub get: Phase,
    /// Removes.
    pub remove: Phase,
    /// Scans of [`SCAN`] entries (empty for a hash table).
    pub scan: Phase,
    /// pmkit's flushes and fences over the inserts.
    pub count: Count,
}

impl MapRun {
    /// The median of `variant` in `phase`.
    pub fn median(phase: &Phase, variant: &str) -> Option<f64> {
        phase
            .iter()
            .find(|(n, _)| n == variant)
            .map(|(_, s)| s.median)
    }
}

/// Runs the workloads on a `M` in a new forced-DAX heap in `dir` beside std's
/// `S` and, with `pmdk`, PMDK's table.
pub fn run_map<M: PMap<V>, S: StdMap<V>, V: Val>(
    dir: &std::path::Path,
    n: u64,
    pmdk: Option<&Pmdk>,
) -> Result<MapRun, String> {
    let file = PoolFile::new(dir, &format!("{}-{}", M::NAME, V::LEN));
    let (heap, _) = crate::workloads::pmkit_heap(&file, M::pool_size(n), false)?;
    let mut map: M = heap.root("map").map_err(err)?;
    let mut std_map = S::default();
    let pmdk_file = PoolFile::new(dir, &format!("pmdk-{}", V::LEN));
    let pmdk_pool = match pmdk {
        Some(l) => Some(PmdkPool::create(
            l,
            &pmdk_file.0,
            crate::workloads::map_pool_size(n, V::LEN) * 2,
        )?),
        None => None,
    };
    let pmdk_map = match &pmdk_pool {
        Some(p) => Some(PmdkMap::create(p, crate::PMDK_INITIAL_CAPACITY, V::LEN)?),
        None => None,
    };
    let ks = keys(n, 0x5eed ^ V::LEN as u64);
    let chunk = chunk_of(n);
    let mut count = Count::default();

    let insert = {
        let mut v: Vec<ChunkVariant<'_>> = Vec::new();
        let (ks, heap_r, map_r) = (&ks, &heap, &mut map);
        v.push(counted("pmkit", &mut count, move |i| {
            match map_r.put(heap_r, ks[i as usize], &V::make(i))? {
                None => Ok(()),
                Some(_) => Err(format!("key {i} was present")),
            }
        }));
        let s = &mut std_map;
        v.push(ChunkVariant::each("std", move |i| {
            match s.put(ks[i as usize], V::make(i)) {
                None => Ok(()),
                Some(_) => Err(format!("std: key {i} was present")),
            }
        }));
        if let Some(pm) = &pmdk_map {
            v.push(ChunkVariant::each("pmdk", move |i| {
                pm.insert(ks[i as usize], V::make(i).bytes())?
                    .then_some(())
                    .ok_or(format!("PMDK: key {i} was present"))
            }));
        }
        named(&mut v, n, chunk)?
    };

    // Spot checks: every map holds what was inserted.
    for i in [0, n / 2, n - 1] {
        let want = V::make(i);
        let k = ks[i as usize];
        if map.find(&heap, k)? != Some(want) || std_map.find(k) != Some(want) {
            return Err(format!("{}: wrong value for key {i}", M::NAME));
        }
        if let Some(pm) = &pmdk_map {
            if pm.get(k)? != Some(want.bytes()) {
                return Err(format!("PMDK table: wrong value for key {i}"));
            }
        }
    }
    if map.size(&heap)? != n || pmdk_map.as_ref().is_some_and(|p| p.len() != n) {
        return Err(format!("{}: wrong length after the inserts", M::NAME));
    }

    let get = {
        let mut v: Vec<ChunkVariant<'_>> = Vec::new();
        let (ks, heap_r, map_r) = (&ks, &heap, &map);
        v.push(ChunkVariant::each("pmkit", move |i| {
            let j = lookup(i, n);
            hit(map_r.find(heap_r, ks[j])?.is_some(), j)
        }));
        let s = &std_map;
        v.push(ChunkVariant::each("std", move |i| {
            let j = lookup(i, n);
            hit(s.find(ks[j]).is_some(), j)
        }));
        if let Some(pm) = &pmdk_map {
            v.push(ChunkVariant::each("pmdk", move |i| {
                let j = lookup(i, n);
                hit(pm.get(ks[j])?.is_some(), j)
            }));
        }
        named(&mut v, n, chunk)?
    };

    let scan = if map.scan(&heap, 0, 1)?.is_some() {
        let scans = (n / 10).max(1);
        let mut v: Vec<ChunkVariant<'_>> = Vec::new();
        let (ks, heap_r, map_r) = (&ks, &heap, &map);
        v.push(ChunkVariant::each("pmkit", move |i| {
            let from = ks[lookup(i, n)];
            map_r
                .scan(heap_r, from, SCAN)?
                .map(|_| ())
                .ok_or("no order".into())
        }));
        let s = &std_map;
        v.push(ChunkVariant::each("std", move |i| {
            let from = ks[lookup(i, n)];
            s.scan(from, SCAN).map(|_| ()).ok_or("no order".into())
        }));
        named(&mut v, scans, chunk_of(scans))?
    } else {
        Vec::new()
    };

    let remove = {
        let mut v: Vec<ChunkVariant<'_>> = Vec::new();
        let (ks, heap_r, map_r) = (&ks, &heap, &mut map);
        v.push(ChunkVariant::each("pmkit", move |i| {
            hit(map_r.del(heap_r, ks[i as usize])?.is_some(), i as usize)
        }));
        let s = &mut std_map;
        v.push(ChunkVariant::each("std", move |i| {
            hit(s.del(ks[i as usize]).is_some(), i as usize)
        }));
        named(&mut v, n, chunk)?
    };
    if map.size(&heap)? != 0 || std_map.size() != 0 {
        return Err(format!("{}: not empty after the removals", M::NAME));
    }
    Ok(MapRun {
        name: M::NAME,
        value_len: V::LEN,
        n,
        insert,
        get,
        remove,
        scan,
        count,
    })
}

/// `Ok` if the key at index `j` was found.
fn hit(found: bool, j: usize) -> Result<(), String> {
    found.then_some(()).ok_or(format!("key {j} missing"))
}

/// Runs [`chunked`] and pairs each variant's name with its statistics.
fn named(v: &mut [ChunkVariant<'_>], n: u64, chunk: u64) -> Result<Phase, String> {
    let stats = chunked(v, n, chunk)?;
    Ok(v.iter().map(|c| c.name.clone()).zip(stats).collect())
}
