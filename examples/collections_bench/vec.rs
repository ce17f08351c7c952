//! The vector workload: `n` pushes of 8-byte values to a `PVec<u64>` beside a std
//! `Vec<u64>`, then `n` gets at random indices, interleaved chunk by chunk.

use pmem_collections::PVec;

use crate::maps::Phase;
use crate::workloads::{
    chunk_of, chunked, err, lookup, pmkit_heap, vec_pool_size, ChunkVariant, PoolFile, Val,
};

/// Push and get figures.
pub struct VecRun {
    /// Elements.
    pub n: u64,
    /// Pushes.
    pub push: Phase,
    /// Gets.
    pub get: Phase,
}

/// Runs the workload in a new forced-DAX heap in `dir`.
pub fn run_vec(dir: &std::path::Path, n: u64) -> Result<VecRun, String> {
    let file = PoolFile::new(dir, "vec");
    let (heap, _) = pmkit_heap(&file, vec_pool_size(n, 8), false)?;
    let mut pv: PVec<u64> = heap.root("vec").map_err(err)?;
    let mut sv: Vec<u64> = Vec::new();
    let chunk = chunk_of(n);
    let push = {
        let (heap_r, pv_r, sv_r) = (&heap, &mut pv, &mut sv);
        let mut v = vec![
            ChunkVariant::each("pmkit", move |i| {
                pv_r.push(heap_r, &u64::make(i)).map_err(err)
            }),
            ChunkVariant::each("std", move |i| {
                sv_r.push(u64::make(i));
                Ok(())
            }),
        ];
        let s = chunked(&mut v, n, chunk)?;
        v.iter().map(|c| c.name.clone()).zip(s).collect::<Phase>()
    };
    if pv.len(&heap).map_err(err)? != n || sv.len() as u64 != n {
        return Err("PVec: wrong length after the pushes".into());
    }
    let get = {
        let (heap_r, pv_r, sv_r) = (&heap, &pv, &sv);
        let mut v = vec![
            ChunkVariant::each("pmkit", move |i| {
                let j = lookup(i, n) as u64;
                match pv_r.get(heap_r, j).map_err(err)? {
                    Some(x) if x == u64::make(j) => Ok(()),
                    other => Err(format!("PVec[{j}] = {other:?}")),
                }
            }),
            ChunkVariant::each("std", move |i| {
                let j = lookup(i, n);
                match sv_r.get(j) {
                    Some(x) if *std::hint::black_box(x) == u64::make(j as u64) => Ok(()),
                    other => Err(format!("Vec[{j}] = {other:?}")),
                }
            }),
        ];
        let s = chunked(&mut v, n, chunk)?;
        v.iter().map(|c| c.name.clone()).zip(s).collect::<Phase>()
    };
    Ok(VecRun { n, push, get })
}
