//! The peer: libpmemobj (PMDK 1.12, Debian's `libpmemobj-dev`) loaded at run time
//! with `dlopen`, so the example builds and runs without it (the run then prints one
//! line saying the peer was skipped).
//!
//! Only the function-call form of PMDK's transactions is used (`pmemobj_tx_begin`
//! with no `jmp_buf`, then `pmemobj_tx_commit` / `pmemobj_tx_abort` and
//! `pmemobj_tx_end`): the `TX_BEGIN` macros need `setjmp`, which Rust cannot call
//! soundly. With no `jmp_buf`, a failing call inside a transaction aborts it and
//! returns an error instead of jumping.
//!
//! The hash table here is the same structure as `pmem_collections::PHashMap<PBytes,
//! PBytes>` (`hashmap/table.rs`): open addressing with linear probing, a header
//! (entry count, capacity: a power of two, table offset) in the root object, a
//! table of 40-byte slots (control word `hash | 1 << 63` or 0 for empty, key
//! offset and length, value offset and length) and one object per key and per
//! value, with the same hash (`pmem_collections::hash::hash_bytes`), the same
//! growth (x2 past 7/8 full, into a fresh table, entries moved by pointer) and the
//! same backward-shift removal. An insert allocates the key and the value in the
//! transaction (`pmemobj_tx_alloc`: PMDK neither logs nor needs to log their
//! contents) and snapshots the slot and the count (`pmemobj_tx_add_range_direct`);
//! a removal snapshots every slot it shifts and the count and frees both objects
//! (`pmemobj_tx_free`, carried out at commit).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::Path;

use libloading::Library;
use pmem_collections::hash::hash_bytes;

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

/// Bytes of the root object every pool gets at creation.
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
    /// Creates a pool file of `size` bytes at `path` (which must not exist).
    pub fn create(lib: &'a Pmdk, path: &Path, size: u64) -> Result<PmdkPool<'a>, String> {
        let _ = std::fs::remove_file(path);
        let c_path = c_path(path)?;
        let layout = CString::new("pmkit-tx-bench").map_err(|e| e.to_string())?;
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

    /// Allocates `size` bytes (zeroed if `zero`) in the transaction: its offset.
    pub fn alloc(&self, size: usize, zero: bool) -> Result<u64, String> {
        let f = if zero {
            self.pool.lib.tx_zalloc
        } else {
            self.pool.lib.tx_alloc
        };
        // SAFETY: inside a transaction.
        let oid = unsafe { f(size, 1) };
        if oid.off == 0 {
            return Err(format!("pmemobj_tx_alloc: {}", self.pool.lib.last_error()));
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
        // SAFETY: `off` is an 8-aligned word inside an object of the open pool.
        unsafe { self.pool.at(off).cast::<u64>().read() }
    }

    /// Writes the u64 at pool offset `off` (snapshot it first, or own the object).
    pub fn write_u64(&self, off: u64, v: u64) {
        // SAFETY: as for `read_u64`; the transaction owns the word.
        unsafe { self.pool.at(off).cast::<u64>().write(v) }
    }

    /// The bytes at pool offset `off`.
    pub fn bytes(&self, off: u64, len: usize) -> &[u8] {
        // SAFETY: `off..off+len` lies inside an object of the open pool, which
        // outlives the transaction handle.
        unsafe { std::slice::from_raw_parts(self.pool.at(off), len) }
    }

    /// Copies `b` to pool offset `off` (an object the transaction allocated, or a
    /// range it snapshotted).
    pub fn write_bytes(&self, off: u64, b: &[u8]) {
        // SAFETY: `off..off+b.len()` lies inside an object of the open pool that
        // this transaction allocated or snapshotted.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), self.pool.at(off), b.len()) }
    }
}

// Header fields (the root object).
const LEN: u64 = 0;
const CAPACITY: u64 = 8;
const TABLE: u64 = 16;
/// Bytes of a slot: control word, key offset and length, value offset and length.
const SLOT: u64 = 40;
const OCCUPIED: u64 = 1 << 63;
const MIN_CAPACITY: u64 = 8;

/// The open-addressing hash table on PMDK (see the module documentation).
pub struct PmdkMap<'p> {
    pool: &'p PmdkPool<'p>,
    header: u64,
}

/// Where a probe ended: the key's slot or the first empty one.
enum Probe {
    Found(u64),
    Vacant(u64),
}

impl<'p> PmdkMap<'p> {
    /// A new table with room for `n` entries without growing, its header in the
    /// pool's root object.
    pub fn create(pool: &'p PmdkPool<'p>, n: u64) -> Result<PmdkMap<'p>, String> {
        let header = pool.root();
        let capacity = ((n + 1) * 8)
            .div_ceil(7)
            .next_power_of_two()
            .max(MIN_CAPACITY);
        pool.tx(|tx| {
            let table = tx.alloc((capacity * SLOT) as usize, true)?;
            tx.add_range(header, 24)?;
            tx.write_u64(header + LEN, 0);
            tx.write_u64(header + CAPACITY, capacity);
            tx.write_u64(header + TABLE, table);
            Ok(())
        })?;
        Ok(PmdkMap { pool, header })
    }

    fn slot(&self, tx: &Tx<'_>, i: u64) -> u64 {
        tx.read_u64(self.header + TABLE) + i * SLOT
    }

    /// Probes for `key` from its home slot (a healthy table has an empty slot).
    fn probe(&self, tx: &Tx<'_>, key: &[u8], ctrl: u64) -> Probe {
        let mask = tx.read_u64(self.header + CAPACITY) - 1;
        let mut i = ctrl & mask;
        loop {
            let at = self.slot(tx, i);
            let c = tx.read_u64(at);
            if c == 0 {
                return Probe::Vacant(i);
            }
            if c == ctrl
                && tx.read_u64(at + 16) == key.len() as u64
                && tx.bytes(tx.read_u64(at + 8), key.len()) == key
            {
                return Probe::Found(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// Doubles the table: a fresh one, every slot moved by pointer (writes into a
    /// fresh object, not logged), the header's capacity and table snapshotted, the
    /// old table freed at commit.
    fn grow(&self, tx: &Tx<'_>) -> Result<(), String> {
        let cap = tx.read_u64(self.header + CAPACITY);
        let old = tx.read_u64(self.header + TABLE);
        let new_cap = cap * 2;
        let table = tx.alloc((new_cap * SLOT) as usize, true)?;
        for i in 0..cap {
            let src = old + i * SLOT;
            let c = tx.read_u64(src);
            if c == 0 {
                continue;
            }
            let mut j = c & (new_cap - 1);
            while tx.read_u64(table + j * SLOT) != 0 {
                j = (j + 1) & (new_cap - 1);
            }
            let bytes = tx.bytes(src, SLOT as usize).to_vec();
            tx.write_bytes(table + j * SLOT, &bytes);
        }
        tx.add_range(self.header + CAPACITY, 16)?;
        tx.write_u64(self.header + CAPACITY, new_cap);
        tx.write_u64(self.header + TABLE, table);
        tx.free(old)
    }

    /// Inserts `key` (new keys only: the benchmark never replaces), growing the
    /// table first (its own transaction) when 7/8 full.
    pub fn insert(&self, key: &[u8], value: &[u8]) -> Result<(), String> {
        let (len, cap) = (self.len(), self.capacity());
        if len + 1 > cap / 8 * 7 {
            self.pool.tx(|tx| self.grow(tx))?;
        }
        self.pool.tx(|tx| {
            let ctrl = hash_bytes(key) | OCCUPIED;
            let Probe::Vacant(i) = self.probe(tx, key, ctrl) else {
                return Err("PMDK table: key already present".into());
            };
            let k = tx.alloc(key.len().max(8), false)?;
            let v = tx.alloc(value.len().max(8), false)?;
            let at = self.slot(tx, i);
            tx.add_range(at, SLOT as usize)?;
            tx.add_range(self.header + LEN, 8)?;
            tx.write_bytes(k, key);
            tx.write_bytes(v, value);
            let mut slot = [0u8; SLOT as usize];
            for (n, w) in [ctrl, k, key.len() as u64, v, value.len() as u64]
                .iter()
                .enumerate()
            {
                slot[n * 8..n * 8 + 8].copy_from_slice(&w.to_le_bytes());
            }
            tx.write_bytes(at, &slot);
            let len = tx.read_u64(self.header + LEN);
            tx.write_u64(self.header + LEN, len + 1);
            Ok(())
        })
    }

    /// Removes `key` (backward-shift deletion); whether it was present.
    pub fn remove(&self, key: &[u8]) -> Result<bool, String> {
        self.pool.tx(|tx| {
            let ctrl = hash_bytes(key) | OCCUPIED;
            let Probe::Found(i) = self.probe(tx, key, ctrl) else {
                return Ok(false);
            };
            let mask = tx.read_u64(self.header + CAPACITY) - 1;
            let at = self.slot(tx, i);
            tx.free(tx.read_u64(at + 8))?;
            tx.free(tx.read_u64(at + 24))?;
            tx.add_range(self.header + LEN, 8)?;
            tx.add_range(at, SLOT as usize)?;
            let (mut hole, mut k) = (i, i);
            loop {
                k = (k + 1) & mask;
                let src = self.slot(tx, k);
                let c = tx.read_u64(src);
                if c == 0 {
                    break;
                }
                let home = c & mask;
                let stays = if hole <= k {
                    hole < home && home <= k
                } else {
                    hole < home || home <= k
                };
                if !stays {
                    tx.add_range(src, SLOT as usize)?;
                    let bytes = tx.bytes(src, SLOT as usize).to_vec();
                    tx.write_bytes(self.slot(tx, hole), &bytes);
                    hole = k;
                }
            }
            tx.write_u64(self.slot(tx, hole), 0);
            let len = tx.read_u64(self.header + LEN);
            tx.write_u64(self.header + LEN, len - 1);
            Ok(true)
        })
    }

    /// The value of `key`, if present (to check the table after a run).
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        self.pool.tx(|tx| {
            let ctrl = hash_bytes(key) | OCCUPIED;
            Ok(match self.probe(tx, key, ctrl) {
                Probe::Found(i) => {
                    let at = self.slot(tx, i);
                    let len = tx.read_u64(at + 32) as usize;
                    Some(tx.bytes(tx.read_u64(at + 24), len).to_vec())
                }
                Probe::Vacant(_) => None,
            })
        })
    }

    fn word(&self, off: u64) -> u64 {
        // SAFETY: the header words lie in the root object of the open pool.
        unsafe { self.pool.at(self.header + off).cast::<u64>().read() }
    }

    /// The entry count.
    pub fn len(&self) -> u64 {
        self.word(LEN)
    }

    /// The number of slots.
    pub fn capacity(&self) -> u64 {
        self.word(CAPACITY)
    }
}

/// A bare 8-byte transactional write: snapshot, store (the `tx_8b_ns` peer).
pub fn tx_8b(pool: &PmdkPool<'_>, word: u64, v: u64) -> Result<(), String> {
    pool.tx(|tx| {
        tx.add_range(word, 8)?;
        tx.write_u64(word, v);
        Ok(())
    })
}
