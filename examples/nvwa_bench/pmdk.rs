//! The PMDK peer of the pair figure: libpmemobj's non-transactional atomic
//! allocator, `pmemobj_alloc` of 64 bytes into a `PMEMoid` in DRAM and
//! `pmemobj_free` of it, on a pool file in `--dir`. The library is loaded at run
//! time (`examples/common/pmdk_lib.rs`); the caller sets `PMEM_IS_PMEM_FORCE=1`
//! before loading it, so that on `/dev/shm` PMDK issues the flushes and fences of
//! real PM, as pmem-core's forced-DAX pools do. The durable workload
//! ([`crate::durable`]) runs it again in a child process with
//! `PMEM_IS_PMEM_FORCE=0` on an ordinary file ([`PmdkHeap::create_at`]), where
//! PMDK takes its msync path.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};

use libloading::Library;

use crate::common::{unique_path, TempFile};
use crate::pmdk_lib::{c_path, sym, PmemOid};

type CreateFn = unsafe extern "C" fn(*const c_char, *const c_char, usize, u32) -> *mut c_void;
type CloseFn = unsafe extern "C" fn(*mut c_void);
type ConstrFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_void) -> c_int;
type AllocFn = unsafe extern "C" fn(
    *mut c_void,
    *mut PmemOid,
    usize,
    u64,
    Option<ConstrFn>,
    *mut c_void,
) -> c_int;
type FreeFn = unsafe extern "C" fn(*mut PmemOid);
type ErrormsgFn = unsafe extern "C" fn() -> *const c_char;

/// Bytes of PMDK's pool (its minimum is 8 MiB).
const POOL_BYTES: usize = 64 << 20;

/// An open PMDK pool with the allocator's entry points; closed (and its file
/// removed) on drop.
pub struct PmdkHeap {
    close: CloseFn,
    alloc: AllocFn,
    free: FreeFn,
    errormsg: ErrormsgFn,
    pop: *mut c_void,
    /// Removed after the pool is closed (fields drop in order, after `drop`).
    _file: TempFile,
    /// Keeps the function pointers above valid.
    _lib: Library,
}

impl PmdkHeap {
    /// Loads libpmemobj and creates a pool in `dir`. `Err` says why (one line).
    pub fn create(dir: &Path) -> Result<PmdkHeap, String> {
        PmdkHeap::create_at(unique_path(dir, "pmdk-pair"))
    }

    /// Loads libpmemobj and creates a pool file at `path` (which must not exist;
    /// removed on drop, also when this fails). `Err` says why (one line).
    pub fn create_at(path: PathBuf) -> Result<PmdkHeap, String> {
        let file = TempFile::new(path);
        let lib = crate::pmdk_lib::open()?;
        // SAFETY: each symbol is looked up with the signature of its declaration in
        // libpmemobj 1.12's headers (`libpmemobj/{pool_base,atomic_base,base}.h`).
        let (create, close, alloc, free, errormsg) = unsafe {
            (
                *lib.get::<CreateFn>(b"pmemobj_create\0").map_err(sym)?,
                *lib.get::<CloseFn>(b"pmemobj_close\0").map_err(sym)?,
                *lib.get::<AllocFn>(b"pmemobj_alloc\0").map_err(sym)?,
                *lib.get::<FreeFn>(b"pmemobj_free\0").map_err(sym)?,
                *lib.get::<ErrormsgFn>(b"pmemobj_errormsg\0").map_err(sym)?,
            )
        };
        let path = c_path(file.path())?;
        let layout = CString::new("pmkit-nvwa-bench").map_err(|e| e.to_string())?;
        // SAFETY: valid NUL-terminated strings; PMDK creates and maps the file.
        let pop = unsafe { create(path.as_ptr(), layout.as_ptr(), POOL_BYTES, 0o600) };
        let heap = PmdkHeap {
            close,
            alloc,
            free,
            errormsg,
            pop,
            _file: file,
            _lib: lib,
        };
        if pop.is_null() {
            return Err(format!("pmemobj_create: {}", heap.last_error()));
        }
        Ok(heap)
    }

    fn last_error(&self) -> String {
        // SAFETY: pmemobj_errormsg returns a thread-local NUL-terminated string.
        let p = unsafe { (self.errormsg)() };
        if p.is_null() {
            return "unknown PMDK error".into();
        }
        // SAFETY: non-null and NUL-terminated (above); copied out at once.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// One `pmemobj_alloc(size)` and its `pmemobj_free`.
    #[inline]
    pub fn pair(&self, size: usize) -> Result<(), String> {
        let mut oid = PmemOid::default();
        // SAFETY: `pop` is open; `oid` is a valid PMEMoid in DRAM (PMDK allows the
        // pointer outside the pool; it then only stores the result there); no
        // constructor.
        let rc = unsafe {
            (self.alloc)(
                self.pop,
                std::hint::black_box(&mut oid),
                size,
                0,
                None,
                std::ptr::null_mut(),
            )
        };
        if rc != 0 || oid.off == 0 {
            return Err(format!("pmemobj_alloc: {}", self.last_error()));
        }
        // SAFETY: `oid` names the object just allocated, freed once.
        unsafe { (self.free)(std::hint::black_box(&mut oid)) };
        Ok(())
    }
}

impl Drop for PmdkHeap {
    fn drop(&mut self) {
        if !self.pop.is_null() {
            // SAFETY: `pop` is open and not used after this.
            unsafe { (self.close)(self.pop) };
        }
    }
}
