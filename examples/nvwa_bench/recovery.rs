//! Recovery time (`recovery_ms_1m`): a forced-DAX NVWA heap with `n` live 64-byte
//! objects (1 M in the full run) is built and dropped with its pool; then, three
//! times, the pool file is mapped again and `Nvwa::open_heap` — the replay of the
//! allocation log and the rebuilding of the DRAM state — is timed; the figure is
//! the median. Mapping the file (`Pool::open_with`) is timed apart. Each open must
//! find all `n` objects live.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use nvwa::Nvwa;
use pmem_core::{ModeRequest, OpenOptions, Pool};

use crate::common::{unique_path, TempFile};
use crate::heaps::{create_file_pool, nvwa_options, pool_bytes, LAYOUT};

/// Bytes of each object.
const OBJECT: u64 = 64;
/// Opens timed.
const OPENS: usize = 3;

/// The recovery figures.
#[derive(Clone, Debug)]
pub struct Recovery {
    /// Live objects.
    pub objects: u64,
    /// Median ms of `open_heap`.
    pub open_heap_ms: f64,
    /// Median ms of mapping the pool file.
    pub pool_open_ms: f64,
    /// Every `open_heap` time, ms.
    pub all_ms: Vec<f64>,
    /// Log words per area.
    pub log_words: u64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Builds the heap and times its recovery (see the module docs).
pub fn measure(dir: &Path, n: u64) -> Result<Recovery, String> {
    let file = TempFile::new(unique_path(dir, "nvwa-recovery"));
    let opts = nvwa_options(n);
    {
        let pool = Arc::new(create_file_pool(file.path(), pool_bytes(n, OBJECT))?);
        // SAFETY: the pool was just created; nothing else uses its heap area.
        let heap = unsafe { Nvwa::format_heap(pool, &opts) }
            .map_err(|e| format!("formatting nvwa: {e}"))?;
        for _ in 0..n {
            pmem_core::PersistentAllocator::alloc(&heap, OBJECT)
                .map_err(|e| format!("nvwa alloc: {e}"))?;
        }
        let live = heap.stats().live_objects;
        if live != n {
            return Err(format!("recovery heap: {live} live objects, expected {n}"));
        }
    }
    let open = OpenOptions::new()
        .layout(LAYOUT)
        .mode(ModeRequest::ForceDax);
    let (mut heap_ms, mut pool_ms) = (Vec::new(), Vec::new());
    for _ in 0..OPENS {
        let clock = Instant::now();
        let pool = Pool::open_with(file.path(), &open)
            .map_err(|e| format!("opening {}: {e}", file.path().display()))?;
        pool_ms.push(clock.elapsed().as_secs_f64() * 1e3);
        let pool = Arc::new(pool);
        let clock = Instant::now();
        // SAFETY: the heap formatted on this pool above is gone; this is the only one.
        let heap =
            unsafe { Nvwa::open_heap(pool, &opts) }.map_err(|e| format!("recovering nvwa: {e}"))?;
        heap_ms.push(clock.elapsed().as_secs_f64() * 1e3);
        let live = heap.stats().live_objects;
        if live != n {
            return Err(format!("recovered {live} live objects, expected {n}"));
        }
    }
    Ok(Recovery {
        objects: n,
        open_heap_ms: median(heap_ms.clone()),
        pool_open_ms: median(pool_ms),
        all_ms: heap_ms,
        log_words: opts.log_words.unwrap_or(0),
    })
}
