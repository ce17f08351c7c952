//! Shared setup for the `persist` criterion benchmark and the `persist_cost` example,
//! so both time exactly the same code: the raw flush-and-fence baseline written in
//! inline assembly, the store that dirties each persisted line, temporary pool files,
//! and the dereference workloads (independent reads and a dependent pointer chase).
//!
//! The example includes this file with `#[path = "../benches/common/mod.rs"]`; it is
//! not a bench target of its own (cargo only discovers `benches/*.rs` and
//! `benches/*/main.rs`).

// Each includer uses a different subset of the helpers.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use pmem_core::{FlushKind, ModeRequest, PPtr, Pool, PoolError, PoolOptions};

/// Layout name of the pools created here.
pub const LAYOUT: &str = "pmkit-bench";
/// Size of the pool used for the persist and dereference measurements.
pub const WORK_POOL_SIZE: u64 = 1 << 20;
/// Size of the pool whose open time is measured.
pub const BIG_POOL_SIZE: u64 = 1 << 30;

/// Offset of the 4 KiB persist target, relative to the heap start.
const PERSIST_4K_REL: u64 = 0;
/// Offset of the 64 B persist target (one line), relative to the heap start.
const PERSIST_64_REL: u64 = 8192;
/// Offset of the 8 B persist target, relative to the heap start.
const PERSIST_8_REL: u64 = 12288;
/// Offset of the independent-read array (DEREF_SLOTS u64s).
const DEREF_REL: u64 = 16384;
/// Offset of the chase cycle that stores pool offsets.
const CHASE_OFF_REL: u64 = 20480;
/// Offset of the chase cycle that stores absolute addresses.
const CHASE_RAW_REL: u64 = 24576;
/// Bytes of the heap the workloads touch (pre-faulted before timing).
const TOUCHED: u64 = 32768;

/// u64 slots in each dereference region (4 KiB: stays in L1).
pub const DEREF_SLOTS: usize = 512;
/// Dereferences per call of [`sum_pool`] / [`sum_raw`] / the chase functions.
pub const DEREFS_PER_CALL: usize = 64;

/// One persist case: a range of the work pool, and the store work that dirties it.
#[derive(Clone, Copy, Debug)]
pub struct PersistCase {
    /// Short label (`8B`, `64B`, `64B_straddle`, `4KiB`).
    pub label: &'static str,
    /// Key fragment used in the example's JSON (`8b`, `64b`, `64b_straddle`, `4k`).
    pub key: &'static str,
    /// Offset relative to the heap start.
    pub rel: u64,
    /// Bytes persisted.
    pub len: u64,
}

/// The persist cases, line aligned except `64B_straddle` (32 B into a line, so the 64
/// bytes overlap two lines).
pub const PERSIST_CASES: [PersistCase; 4] = [
    PersistCase {
        label: "8B",
        key: "8b",
        rel: PERSIST_8_REL,
        len: 8,
    },
    PersistCase {
        label: "64B",
        key: "64b",
        rel: PERSIST_64_REL,
        len: 64,
    },
    PersistCase {
        label: "64B_straddle",
        key: "64b_straddle",
        rel: PERSIST_64_REL + 32,
        len: 64,
    },
    PersistCase {
        label: "4KiB",
        key: "4k",
        rel: PERSIST_4K_REL,
        len: 4096,
    },
];

// ---------------------------------------------------------------------------------
// The raw baseline.
// ---------------------------------------------------------------------------------

/// A hand-written persist sequence: flush every line overlapping the range with one
/// instruction, then fence if that instruction needs it. Implemented per instruction
/// so the choice is made at compile time (no dispatch inside the timed loop).
pub trait RawSeq {
    /// Name used in benchmark ids and tables.
    const NAME: &'static str;

    /// Flushes every line of `[addr, addr + len)` and fences.
    ///
    /// # Safety
    /// The range must be mapped in this process, and this sequence must be the one
    /// [`raw_for`] picked for [`pmem_core::flush::kind`] (so the CPU has the
    /// instruction).
    unsafe fn persist(addr: *const u8, len: usize);
}

/// `clwb` per line, then `sfence`.
#[cfg(target_arch = "x86_64")]
pub struct RawClwb;
/// `clflushopt` per line, then `sfence`.
#[cfg(target_arch = "x86_64")]
pub struct RawClflushOpt;
/// `clflush` per line (ordered; pmem-core issues no fence for it either).
#[cfg(target_arch = "x86_64")]
pub struct RawClflush;
/// No flush instruction: a full fence, what pmem-core's portable fallback does.
pub struct RawFence;

/// Emits `$insn [line]` for every line of the range, in a plain counted loop.
#[cfg(target_arch = "x86_64")]
macro_rules! flush_lines_asm {
    ($insn:literal, $addr:expr, $len:expr) => {{
        let start = ($addr as usize) & !63usize;
        let end = ($addr as usize) + $len;
        let mut p = start;
        while p < end {
            // SAFETY: `p` lies in a line overlapping the caller's mapped range (the
            // trait contract), and the CPU supports the instruction (the contract of
            // `RawSeq::persist`: the sequence matches pmem-core's detected kind).
            // Not `nomem`: like pmem-core, the compiler must not move stores across it.
            unsafe {
                core::arch::asm!(concat!($insn, " [{0}]"), in(reg) p, options(nostack, preserves_flags))
            };
            p += 64;
        }
    }};
}

#[cfg(target_arch = "x86_64")]
impl RawSeq for RawClwb {
    const NAME: &'static str = "raw_clwb_sfence";

    #[inline(always)]
    unsafe fn persist(addr: *const u8, len: usize) {
        flush_lines_asm!("clwb", addr, len);
        // SAFETY: sfence is SSE, present on every x86-64 CPU; it only orders stores.
        unsafe { core::arch::asm!("sfence", options(nostack, preserves_flags)) };
    }
}

#[cfg(target_arch = "x86_64")]
impl RawSeq for RawClflushOpt {
    const NAME: &'static str = "raw_clflushopt_sfence";

    #[inline(always)]
    unsafe fn persist(addr: *const u8, len: usize) {
        flush_lines_asm!("clflushopt", addr, len);
        // SAFETY: as for RawClwb.
        unsafe { core::arch::asm!("sfence", options(nostack, preserves_flags)) };
    }
}

#[cfg(target_arch = "x86_64")]
impl RawSeq for RawClflush {
    const NAME: &'static str = "raw_clflush";

    #[inline(always)]
    unsafe fn persist(addr: *const u8, len: usize) {
        flush_lines_asm!("clflush", addr, len);
    }
}

impl RawSeq for RawFence {
    const NAME: &'static str = "raw_fence";

    #[inline(always)]
    unsafe fn persist(_addr: *const u8, _len: usize) {
        std::sync::atomic::fence(Ordering::SeqCst);
    }
}

/// Something to run with the raw sequence matching an instruction (generic dispatch:
/// the caller's code is monomorphised per sequence).
pub trait WithRaw {
    /// What the call returns.
    type Out;
    /// Runs with sequence `S`.
    fn call<S: RawSeq>(self) -> Self::Out;
}

/// Runs `w` with the raw sequence for `kind`: never a different instruction than the
/// one pmem-core uses, so the baseline is never silently skipped or mismatched.
pub fn raw_for<W: WithRaw>(kind: FlushKind, w: W) -> W::Out {
    #[cfg(target_arch = "x86_64")]
    {
        match kind {
            FlushKind::Clwb => w.call::<RawClwb>(),
            FlushKind::ClflushOpt => w.call::<RawClflushOpt>(),
            FlushKind::Clflush => w.call::<RawClflush>(),
            FlushKind::Portable => w.call::<RawFence>(),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = kind;
        w.call::<RawFence>()
    }
}

/// Name of the raw sequence for `kind`.
pub fn raw_name(kind: FlushKind) -> &'static str {
    struct Name;
    impl WithRaw for Name {
        type Out = &'static str;
        fn call<S: RawSeq>(self) -> &'static str {
            S::NAME
        }
    }
    raw_for(kind, Name)
}

/// Dirties every line of `[addr, addr + len)`: one volatile 8-byte store of `v` at the
/// start of the range and at the start of every further line it overlaps. Every
/// persist variant does exactly this before flushing, so the store work is identical.
///
/// # Safety
/// The range must be mapped and writable with no live references to it; `addr` and
/// `len` must be multiples of 8 and `len >= 8`.
#[inline(always)]
pub unsafe fn dirty(addr: *mut u8, len: usize, v: u64) {
    let a = addr as usize;
    let mut o = 0usize;
    while o < len {
        // SAFETY: `o < len` and `o` is 8-aligned relative to an 8-aligned start
        // (either 0 or a line start), and `len` is a multiple of 8, so the 8 bytes
        // `[addr + o, addr + o + 8)` are inside the caller's writable range.
        unsafe { std::ptr::write_volatile(addr.add(o).cast::<u64>(), v) };
        o = ((a + o) & !63usize) + 64 - a;
    }
}

/// One iteration of the raw baseline: [`dirty`] the range with `v`, then persist it
/// with the hand-written sequence `S`. Pointer and length pass through `black_box`,
/// so the line count is computed at run time as on the pmem-core side.
///
/// # Safety
/// As for [`dirty`]; `S` must be a sequence this CPU supports (as `raw_for` picks).
#[inline(always)]
pub unsafe fn dirty_and_persist<S: RawSeq>(addr: *mut u8, len: usize, v: u64) {
    // SAFETY: forwarded from the caller.
    unsafe {
        dirty(addr, len, v);
        S::persist(
            std::hint::black_box(addr).cast_const(),
            std::hint::black_box(len),
        );
    }
}

// ---------------------------------------------------------------------------------
// Temporary pool files.
// ---------------------------------------------------------------------------------

/// The default directory: `/dev/shm` if it exists (tmpfs: flushes cost what they
/// cost, no disk involved), else `./target`.
pub fn default_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        PathBuf::from("target")
    }
}

/// A unique file name in `dir` for a pool this process creates.
pub fn unique_path(dir: &Path, what: &str) -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    dir.join(format!(
        "pmkit-bench-{}-{nanos:09}-{seq}-{what}.pool",
        std::process::id()
    ))
}

/// Removes the file when dropped (after the pool using it is gone).
#[derive(Debug)]
pub struct TempFile {
    path: PathBuf,
}

impl TempFile {
    /// Takes ownership of `path` (which this process created).
    pub fn new(path: PathBuf) -> Self {
        TempFile { path }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A pool in a temporary file, forced into `Dax` mode so `persist` issues exactly the
/// flush and fence instructions it would on real PM. Field order matters: the pool
/// is dropped (unmapped, unlocked) before the file is removed.
pub struct WorkPool {
    /// The pool (forced `Dax`, not durable).
    pub pool: Pool,
    /// The file behind it.
    pub file: TempFile,
}

impl WorkPool {
    /// Creates the work pool in `dir` and pre-faults the pages the workloads touch.
    pub fn create(dir: &Path) -> Result<WorkPool, PoolError> {
        let file = TempFile::new(unique_path(dir, "work"));
        let mut pool = Pool::create(
            file.path(),
            &PoolOptions::new(LAYOUT, WORK_POOL_SIZE).mode(ModeRequest::ForceDax),
        )?;
        let heap = pool.heap().start;
        pool.bytes_mut(heap, TOUCHED)?.fill(0);
        Ok(WorkPool { pool, file })
    }

    /// Absolute pool offset of a persist case.
    pub fn offset(&self, case: &PersistCase) -> u64 {
        self.pool.heap().start + case.rel
    }

    /// Address of a persist case's first byte (derived from the mapping's base
    /// pointer, not from a reference, so writing through it is sound while no
    /// reference to those bytes is live).
    pub fn addr(&self, case: &PersistCase) -> Result<*mut u8, PoolError> {
        self.raw(self.offset(case), case.len)
    }

    /// Address of pool byte `off` after checking that `[off, off + len)` is inside.
    pub fn raw(&self, off: u64, len: u64) -> Result<*mut u8, PoolError> {
        self.pool.bytes(off, len)?;
        Ok(self.pool.base_ptr().wrapping_add(off as usize))
    }
}

/// Creates a sparse pool of [`BIG_POOL_SIZE`] bytes in `dir` and closes it, returning
/// the file guard; opening it is then what the `open` measurement times.
pub fn create_big_pool(dir: &Path) -> Result<TempFile, PoolError> {
    let file = TempFile::new(unique_path(dir, "1gib"));
    let pool = Pool::create(
        file.path(),
        &PoolOptions::new(LAYOUT, BIG_POOL_SIZE).mode(ModeRequest::ForceDax),
    )?;
    pool.close()?;
    Ok(file)
}

/// One open-and-close of the pool at `path`, as a user would do it.
#[inline(never)]
pub fn open_close(path: &Path) -> Result<(), PoolError> {
    let pool = Pool::open(path, LAYOUT)?;
    std::hint::black_box(&pool);
    drop(pool);
    Ok(())
}

// ---------------------------------------------------------------------------------
// Dereference workloads.
// ---------------------------------------------------------------------------------

/// Pointers for the dereference measurements, all into the work pool's heap.
pub struct DerefSet {
    /// [`DEREFS_PER_CALL`] offset pointers to distinct random slots.
    pub pptrs: Vec<PPtr<u64>>,
    /// The same slots as raw pointers.
    pub raws: Vec<*const u64>,
    /// Start of the offset chase (a random cycle through [`DEREF_SLOTS`] slots whose
    /// values are the pool offsets of their successors).
    pub chase_off: u64,
    /// Start of the raw chase (the same cycle; values are absolute addresses).
    pub chase_raw: *const u64,
}

/// The workspace's one seeded generator, so runs are reproducible.
pub use pmem_core::SplitMix64 as Rng;

impl DerefSet {
    /// Fills the dereference regions of `wp` and builds the pointer sets.
    pub fn build(wp: &mut WorkPool) -> Result<DerefSet, PoolError> {
        let heap = wp.pool.heap().start;
        let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);

        // Independent reads: distinct random slots, each holding its own index.
        let mut slots: Vec<usize> = (0..DEREF_SLOTS).collect();
        rng.shuffle(&mut slots);
        let base_off = heap + DEREF_REL;
        for i in 0..DEREF_SLOTS {
            wp.pool.write(
                PPtr::<u64>::from_offset(base_off + 8 * i as u64),
                &(i as u64),
            )?;
        }
        let pptrs: Vec<PPtr<u64>> = slots[..DEREFS_PER_CALL]
            .iter()
            .map(|&s| PPtr::from_offset(base_off + 8 * s as u64))
            .collect();

        // One random cycle (Sattolo's algorithm) through all slots, stored twice.
        let mut next: Vec<usize> = (0..DEREF_SLOTS).collect();
        for i in (1..next.len()).rev() {
            let j = rng.index(i);
            next.swap(i, j);
        }
        let off_base = heap + CHASE_OFF_REL;
        let raw_base_off = heap + CHASE_RAW_REL;
        let raw_region = wp.raw(raw_base_off, 8 * DEREF_SLOTS as u64)?;
        // The cycle stores addresses as integers: expose the mapping's provenance so
        // `chase_raw` can turn them back into pointers.
        let raw_addr =
            |slot: usize| -> usize { raw_region.wrapping_add(8 * slot).expose_provenance() };
        for (i, &n) in next.iter().enumerate() {
            let i8 = 8 * i as u64;
            wp.pool.write(
                PPtr::<u64>::from_offset(off_base + i8),
                &(off_base + 8 * n as u64),
            )?;
            wp.pool.write(
                PPtr::<u64>::from_offset(raw_base_off + i8),
                &(raw_addr(n) as u64),
            )?;
        }

        let region = wp.raw(base_off, 8 * DEREF_SLOTS as u64)?;
        let raws = slots[..DEREFS_PER_CALL]
            .iter()
            .map(|&s| region.wrapping_add(8 * s).cast_const().cast::<u64>())
            .collect();
        let chase_raw = raw_region.cast_const().cast::<u64>();
        Ok(DerefSet {
            pptrs,
            raws,
            chase_off: off_base,
            chase_raw,
        })
    }
}

/// Sums the `u64`s behind `ptrs`, each read through [`Pool::get`] (bounds, null and
/// alignment checked), propagating errors with `?` as user code would.
#[inline]
pub fn sum_pool(pool: &Pool, ptrs: &[PPtr<u64>]) -> Result<u64, PoolError> {
    let mut s = 0u64;
    for &p in ptrs {
        s = s.wrapping_add(*pool.get(p)?);
    }
    Ok(s)
}

/// Sums the `u64`s behind raw pointers.
///
/// # Safety
/// Every pointer must be valid for an aligned 8-byte read.
#[inline]
pub unsafe fn sum_raw(ptrs: &[*const u64]) -> u64 {
    let mut s = 0u64;
    for &p in ptrs {
        // SAFETY: the caller guarantees each pointer is readable and aligned.
        s = s.wrapping_add(unsafe { p.read() });
    }
    s
}

/// Follows [`DEREFS_PER_CALL`] links of the offset cycle from `off` through
/// [`Pool::get`]; each load depends on the previous one (latency, not throughput).
#[inline]
pub fn chase_pool(pool: &Pool, mut off: u64) -> Result<u64, PoolError> {
    for _ in 0..DEREFS_PER_CALL {
        off = *pool.get(PPtr::<u64>::from_offset(off))?;
    }
    Ok(off)
}

/// Follows [`DEREFS_PER_CALL`] links of the address cycle from `p`.
///
/// # Safety
/// `p` must point into the raw chase cycle built by [`DerefSet::build`], whose pool is
/// still mapped.
#[inline]
pub unsafe fn chase_raw(mut p: *const u64) -> *const u64 {
    for _ in 0..DEREFS_PER_CALL {
        // SAFETY: every value of the cycle is the exposed address of another slot of
        // the same mapped, aligned region (the caller's contract).
        let next = unsafe { p.read() };
        p = std::ptr::with_exposed_provenance::<u64>(next as usize);
    }
    p
}
