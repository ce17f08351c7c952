//! PMDK's transactions for the examples that measure them beside pmkit's
//! (`tx_bench`, `collections_bench`): libpmemobj (PMDK 1.12, Debian's
//! `libpmemobj-dev`) loaded at run time with `dlopen` (`pmdk_lib.rs`), so the
//! examples build and run without it (the run then says the peer was skipped and
//! its figures are `null`); a pool, and a transaction's snapshot, allocation, free,
//! reads and writes.
//!
//! Only the function-call form of PMDK's transactions is used (`pmemobj_tx_begin`
//! with no `jmp_buf`, then `pmemobj_tx_commit` / `pmemobj_tx_abort` and
//! `pmemobj_tx_end`): the `TX_BEGIN` macros need `setjmp`, which Rust cannot call
//! soundly. With no `jmp_buf`, a failing call inside a transaction aborts it and
//! returns an error instead of jumping.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::Path;

use libloading::Library;

pub use crate::pmdk_lib::LIBRARY;
use crate::pmdk_lib::{c_path, sym, PmemOid};

type CreateFn = unsafe extern "C" fn(*const c_char, *const c_char, usize, u32) -> *mut c_void;
type CloseFn = unsafe extern "C" fn(*mut c_void);
type RootFn = unsafe extern "C" fn(*mut c_void, usize) -> PmemOid;
type TxBeginFn = unsafe extern "C" fn(*mut c_void, *mut c_void, ...) -> c_int;
type TxAddRangeDirectFn = unsafe extern "C" fn(*const c_void, usize) -> c_int;
type TxAllocFn = unsafe extern "C" fn(usize, u64) -> PmemOid;
type TxFreeFn = unsafe extern "C" fn(PmemOid) -> c_int;
type TxVoidFn = unsafe extern "C" fn();
type TxAbortFn = unsafe extern "C" fn(c_int);
type TxEndFn = unsafe extern "C" fn() -> c_int;
type TxStageFn = unsafe extern "C" fn() -> c_int;
type ErrormsgFn = unsafe extern "C" fn() -> *const c_char;

/// `TX_STAGE_WORK` of `enum pobj_tx_stage`.
const TX_STAGE_WORK: c_int = 1;
/// `TX_PARAM_NONE`: ends `pmemobj_tx_begin`'s parameter list.
const TX_PARAM_NONE: c_int = 0;
/// `ECANCELED`, the abort code used when our own code fails inside a transaction.
const ECANCELED: c_int = 125;

/// The library's entry points.
pub struct Pmdk {
    create: CreateFn,
    close: CloseFn,
    root: RootFn,
    tx_begin: TxBeginFn,
    tx_add_range_direct: TxAddRangeDirectFn,
    tx_alloc: TxAllocFn,
    tx_zalloc: TxAllocFn,
    tx_free: TxFreeFn,
    tx_commit: TxVoidFn,
    tx_abort: TxAbortFn,
    tx_end: TxEndFn,
    tx_stage: TxStageFn,
    errormsg: ErrormsgFn,
    /// Keeps the function pointers above valid.
    _lib: Library,
}

impl Pmdk {
    /// Loads libpmemobj. `Err` says why it is unavailable (one line).
    pub fn load() -> Result<Pmdk, String> {
        let lib = crate::pmdk_lib::open()?;
        // SAFETY: each symbol is looked up with the signature of its declaration in
        // libpmemobj 1.12's headers (`libpmemobj/{pool_base,base,tx_base}.h`).
        unsafe {
            Ok(Pmdk {
                create: *lib.get(b"pmemobj_create\0").map_err(sym)?,
                close: *lib.get(b"pmemobj_close\0").map_err(sym)?,
                root: *lib.get(b"pmemobj_root\0").map_err(sym)?,
                tx_begin: *lib.get(b"pmemobj_tx_begin\0").map_err(sym)?,
                tx_add_range_direct: *lib.get(b"pmemobj_tx_add_range_direct\0").map_err(sym)?,
                tx_alloc: *lib.get(b"pmemobj_tx_alloc\0").map_err(sym)?,
                tx_zalloc: *lib.get(b"pmemobj_tx_zalloc\0").map_err(sym)?,
                tx_free: *lib.get(b"pmemobj_tx_free\0").map_err(sym)?,
                tx_commit: *lib.get(b"pmemobj_tx_commit\0").map_err(sym)?,
                tx_abort: *lib.get(b"pmemobj_tx_abort\0").map_err(sym)?,
                tx_end: *lib.get(b"pmemobj_tx_end\0").map_err(sym)?,
                tx_stage: *lib.get(b"pmemobj_tx_stage\0").map_err(sym)?,
                errormsg: *lib.get(b"pmemobj_errormsg\0").map_err(sym)?,
                _lib: lib,
            })
        }
    }

    fn last_error(&self) -> String {
        // SAFETY: pmemobj_errormsg returns a thread-local NUL-terminated string.
        let p = unsafe { (self.errormsg)() };
        if p.is_null() {
            return "unknown PMDK error".into();
        }
        // SAFETY: non-null, NUL-terminated (above); copied out at once.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// Bytes of the root object every pool gets at creation (the table's header).
pub const ROOT_BYTES: usize = 64;

/// An open PMDK pool (closed and removed on drop).
pub struct PmdkPool<'a> {
    lib: &'a Pmdk,
    pop: *mut c_void,
    path: std::path::PathBuf,
    root: u64,
    uuid_lo: u64,
}

impl<'a> PmdkPool<'a> {
    /// Creates a pool file of `size` bytes at `path` (removed first if there).
    pub fn create(lib: &'a Pmdk, path: &Path, size: u64) -> Result<PmdkPool<'a>, String> {
        let _ = std::fs::remove_file(path);
        let c_path = c_path(path)?;
        let layout = CString::new("pmkit-bench").map_err(|e| e.to_string())?;
        let size = usize::try_from(size).map_err(|e| e.to_string())?;
        // SAFETY: valid NUL-terminated strings; PMDK creates and maps the file.
        let pop = unsafe { (lib.create)(c_path.as_ptr(), layout.as_ptr(), size, 0o600) };
        if pop.is_null() {
            return Err(format!(
                "pmemobj_create {}: {}",
                path.display(),
                lib.last_error()
            ));
        }
        let mut pool = PmdkPool {
            lib,
            pop,
            path: path.to_owned(),
            root: 0,
            uuid_lo: 0,
        };
        // SAFETY: `pop` is an open pool.
        let oid = unsafe { (lib.root)(pop, ROOT_BYTES) };
        if oid.off == 0 {
            return Err(format!("pmemobj_root: {}", lib.last_error()));
        }
        pool.root = oid.off;
        pool.uuid_lo = oid.pool_uuid_lo;
        Ok(pool)
    }

    /// The address of the object at pool offset `off` (PMDK's `pmemobj_direct`
    /// for an object of this pool is the pool's base plus the offset).
    fn at(&self, off: u64) -> *mut u8 {
        self.pop.cast::<u8>().wrapping_add(off as usize)
    }

    /// The offset of the root object ([`ROOT_BYTES`], zeroed at creation).
    pub fn root(&self) -> u64 {
        self.root
    }

    /// Reads the u64 at pool offset `off`, outside any transaction (the benchmark
    /// runs one thread per pool: no transaction is writing it).
    pub fn read_u64(&self, off: u64) -> u64 {
        // SAFETY: callers pass an 8-aligned word inside an object of this open
        // pool (the table's header or a slot of its table).
        unsafe { self.at(off).cast::<u64>().read() }
    }

    /// The bytes at pool offset `off`.
    pub fn bytes(&self, off: u64, len: usize) -> &[u8] {
        // SAFETY: callers pass a range inside an object of the open pool, which
        // outlives the borrow; no transaction writes it meanwhile (one thread).
        unsafe { std::slice::from_raw_parts(self.at(off), len) }
    }

    /// Runs `f` as one PMDK transaction: commits if it returns `Ok` (and PMDK did
    /// not abort it), aborts otherwise.
    pub fn tx<R>(&self, f: impl FnOnce(&Tx<'_>) -> Result<R, String>) -> Result<R, String> {
        let l = self.lib;
        // SAFETY: `pop` is open; no jmp_buf (errors are returned); the parameter
        // list is terminated by TX_PARAM_NONE.
        if unsafe { (l.tx_begin)(self.pop, std::ptr::null_mut(), TX_PARAM_NONE) } != 0 {
            let e = self.lib.last_error();
            // SAFETY: pmemobj_tx_end must follow every pmemobj_tx_begin.
            unsafe { (l.tx_end)() };
            return Err(format!("pmemobj_tx_begin: {e}"));
        }
        let r = f(&Tx { pool: self });
        // SAFETY: inside the transaction begun above, on this thread.
        let working = unsafe { (l.tx_stage)() } == TX_STAGE_WORK;
        match (&r, working) {
            // SAFETY: as above.
            (Ok(_), true) => unsafe { (l.tx_commit)() },
            // SAFETY: as above.
            (Err(_), true) => unsafe { (l.tx_abort)(ECANCELED) },
            // PMDK already aborted it (a failing call inside).
            (_, false) => {}
        }
        // SAFETY: ends the transaction begun above (after commit or abort).
        let code = unsafe { (l.tx_end)() };
        match r {
            Ok(v) if code == 0 && working => Ok(v),
            Ok(_) => Err(format!("PMDK transaction aborted: {}", l.last_error())),
            Err(e) => Err(e),
        }
    }
}

impl Drop for PmdkPool<'_> {
    fn drop(&mut self) {
        // SAFETY: `pop` is open and not used after this.
        unsafe { (self.lib.close)(self.pop) };
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The handle of a running PMDK transaction.
pub struct Tx<'p> {
    pool: &'p PmdkPool<'p>,
}

impl Tx<'_> {
    /// Snapshots `len` bytes at pool offset `off` (`pmemobj_tx_add_range_direct`).
    pub fn add_range(&self, off: u64, len: usize) -> Result<(), String> {
        let p = self.pool.at(off);
        // SAFETY: inside a transaction; `off..off+len` lies in an object of the pool.
        if unsafe { (self.pool.lib.tx_add_range_direct)(p.cast(), len) } != 0 {
            return Err(format!(
                "pmemobj_tx_add_range_direct: {}",
                self.pool.lib.last_error()
            ));
        }
        Ok(())
    }

    /// Allocates `size` bytes in the transaction (`pmemobj_tx_zalloc` if `zero`,
    /// else `pmemobj_tx_alloc`): its offset. PMDK neither logs nor needs to log
    /// writes into it.
    pub fn alloc(&self, size: usize, zero: bool) -> Result<u64, String> {
        let (f, name) = if zero {
            (self.pool.lib.tx_zalloc, "pmemobj_tx_zalloc")
        } else {
            (self.pool.lib.tx_alloc, "pmemobj_tx_alloc")
        };
        // SAFETY: inside a transaction.
        let oid = unsafe { f(size, 1) };
        if oid.off == 0 {
            return Err(format!("{name}({size}): {}", self.pool.lib.last_error()));
        }
        Ok(oid.off)
    }

    /// Frees the object at `off` when the transaction commits.
    pub fn free(&self, off: u64) -> Result<(), String> {
        let oid = PmemOid {
            pool_uuid_lo: self.pool.uuid_lo,
            off,
        };
        // SAFETY: inside a transaction; `off` is an object of this pool.
        if unsafe { (self.pool.lib.tx_free)(oid) } != 0 {
            return Err(format!("pmemobj_tx_free: {}", self.pool.lib.last_error()));
        }
        Ok(())
    }

    /// Reads the u64 at pool offset `off`.
    pub fn read_u64(&self, off: u64) -> u64 {
        self.pool.read_u64(off)
    }

    /// The bytes at pool offset `off`.
    pub fn bytes(&self, off: u64, len: usize) -> &[u8] {
        self.pool.bytes(off, len)
    }

    /// Writes the u64 at pool offset `off` (snapshot it first, or own the object).
    pub fn write_u64(&self, off: u64, v: u64) {
        // SAFETY: `off` is an 8-aligned word inside an object of the open pool that
        // this transaction snapshotted or allocated; one thread per pool.
        unsafe { self.pool.at(off).cast::<u64>().write(v) }
    }

    /// Copies `b` to pool offset `off` (snapshot it first, or own the object).
    pub fn write_bytes(&self, off: u64, b: &[u8]) {
        // SAFETY: `off..off+b.len()` lies inside an object this transaction
        // snapshotted or allocated; `b` is DRAM, so the ranges cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), self.pool.at(off), b.len()) }
    }
}
