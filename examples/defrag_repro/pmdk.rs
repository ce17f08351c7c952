//! The peer: libpmemobj's `pmemobj_defrag` (PMDK 1.12, Debian's `libpmemobj-dev`),
//! loaded at run time with `dlopen` (the run prints one line and skips the peer
//! when it is absent).
//!
//! The list is PMDK's usual shape: a root holding the head's `PMEMoid`, nodes of a
//! `PMEMoid next` and a value. `pmemobj_defrag` must be handed a pointer to every
//! `PMEMoid` that names a relocatable object (the root's head and every node's
//! `next`): a forgotten one would dangle. Fragmentation is measured the same way
//! for both heaps: the 4 KiB pages holding a byte of a live node, over the bytes of
//! the live nodes. (PMDK's `stats.heap.run_active` did not move across
//! `pmemobj_defrag` in our runs, so it is not used.)

use std::ffi::{c_char, c_int, c_void, CString};
use std::path::Path;

use libloading::Library;

pub use crate::pmdk_lib::LIBRARY;
use crate::pmdk_lib::{c_path, sym, PmemOid};

/// `struct pobj_defrag_result`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct DefragResult {
    /// Objects considered.
    pub total: usize,
    /// Objects moved.
    pub relocated: usize,
}

type CreateFn = unsafe extern "C" fn(*const c_char, *const c_char, usize, u32) -> *mut c_void;
type CloseFn = unsafe extern "C" fn(*mut c_void);
type RootFn = unsafe extern "C" fn(*mut c_void, usize) -> PmemOid;
type AllocFn = unsafe extern "C" fn(
    *mut c_void,
    *mut PmemOid,
    usize,
    u64,
    *const c_void,
    *mut c_void,
) -> c_int;
type FreeFn = unsafe extern "C" fn(*mut PmemOid);
type DefragFn =
    unsafe extern "C" fn(*mut c_void, *mut *mut PmemOid, usize, *mut DefragResult) -> c_int;
type CtlFn = unsafe extern "C" fn(*mut c_void, *const c_char, *mut c_void) -> c_int;
type PersistFn = unsafe extern "C" fn(*mut c_void, *const c_void, usize);

/// The library's entry points used here.
pub struct Pmdk {
    create: CreateFn,
    close: CloseFn,
    root: RootFn,
    alloc: AllocFn,
    free: FreeFn,
    defrag: DefragFn,
    ctl_set: CtlFn,
    persist: PersistFn,
    _lib: Library,
}

impl Pmdk {
    /// Loads libpmemobj. `Err` says why it is unavailable (one line).
    pub fn load() -> Result<Pmdk, String> {
        let lib = crate::pmdk_lib::open()?;
        // SAFETY: each symbol is looked up with the signature of its declaration in
        // libpmemobj 1.12's headers (`libpmemobj/{pool_base,base,atomic_base,ctl}.h`).
        unsafe {
            Ok(Pmdk {
                create: *lib.get(b"pmemobj_create\0").map_err(sym)?,
                close: *lib.get(b"pmemobj_close\0").map_err(sym)?,
                root: *lib.get(b"pmemobj_root\0").map_err(sym)?,
                alloc: *lib.get(b"pmemobj_alloc\0").map_err(sym)?,
                free: *lib.get(b"pmemobj_free\0").map_err(sym)?,
                defrag: *lib.get(b"pmemobj_defrag\0").map_err(sym)?,
                ctl_set: *lib.get(b"pmemobj_ctl_set\0").map_err(sym)?,
                persist: *lib.get(b"pmemobj_persist\0").map_err(sym)?,
                _lib: lib,
            })
        }
    }
}

/// A PMDK pool holding one singly linked list (closed and removed on drop).
pub struct PmdkList<'a> {
    lib: &'a Pmdk,
    pop: *mut c_void,
    path: std::path::PathBuf,
    /// Offset of the root, whose first 16 bytes are the head's `PMEMoid`.
    root: u64,
    value: usize,
}

/// Bytes of a node: the `next` oid, then the value.
fn node_bytes(value: usize) -> usize {
    16 + value
}

impl<'a> PmdkList<'a> {
    /// Creates a pool of `size` bytes at `path` with statistics on.
    pub fn create(lib: &'a Pmdk, path: &Path, size: u64, value: usize) -> Result<Self, String> {
        let _ = std::fs::remove_file(path);
        let c_path = c_path(path)?;
        let layout = CString::new("pmkit-defrag-repro").map_err(|e| e.to_string())?;
        let size = usize::try_from(size).map_err(|e| e.to_string())?;
        // SAFETY: valid NUL-terminated strings; PMDK creates and maps the file.
        let pop = unsafe { (lib.create)(c_path.as_ptr(), layout.as_ptr(), size, 0o600) };
        if pop.is_null() {
            return Err(format!("pmemobj_create {} failed", path.display()));
        }
        let mut list = PmdkList {
            lib,
            pop,
            path: path.to_owned(),
            root: 0,
            value,
        };
        let mut on: c_int = 1;
        let name = CString::new("stats.enabled").map_err(|e| e.to_string())?;
        // SAFETY: `pop` is open; the entry point takes an `int *`.
        if unsafe { (lib.ctl_set)(pop, name.as_ptr(), (&raw mut on).cast()) } != 0 {
            return Err("pmemobj_ctl_set stats.enabled failed".into());
        }
        // SAFETY: `pop` is open.
        let root = unsafe { (lib.root)(pop, 64) };
        if root.off == 0 {
            return Err("pmemobj_root failed".into());
        }
        list.root = root.off;
        Ok(list)
    }

    fn oid_at(&self, off: u64) -> *mut PmemOid {
        self.pop.cast::<u8>().wrapping_add(off as usize).cast()
    }

    /// Pushes a node holding `byte` repeated at the head.
    pub fn push(&mut self, byte: u8) -> Result<(), String> {
        let head = self.oid_at(self.root);
        let mut oid = PmemOid::default();
        let size = node_bytes(self.value);
        // SAFETY: `pop` is open; `oid` is a DRAM out-parameter (crash safety is not
        // what this peer is measured on); no constructor.
        let r = unsafe {
            (self.lib.alloc)(
                self.pop,
                &mut oid,
                size,
                1,
                std::ptr::null(),
                std::ptr::null_mut(),
            )
        };
        if r != 0 {
            return Err("pmemobj_alloc failed".into());
        }
        let node = self.pop.cast::<u8>().wrapping_add(oid.off as usize);
        // SAFETY: the node is `size` bytes of this pool, ours alone; the head oid is
        // the root's first 16 bytes.
        unsafe {
            node.cast::<PmemOid>().write_unaligned(*head);
            std::ptr::write_bytes(node.add(16), byte, self.value);
            (self.lib.persist)(self.pop, node.cast(), size);
            *head = oid;
            (self.lib.persist)(self.pop, head.cast(), 16);
        }
        Ok(())
    }

    /// Unlinks and frees every node at an odd position.
    pub fn free_every_other(&mut self) {
        let mut cur = self.oid_at(self.root);
        // SAFETY: every oid in the list names a live node of this pool; `next`
        // is its first 16 bytes.
        unsafe {
            while (*cur).off != 0 {
                let keep = self.oid_at((*cur).off);
                let mut gone = *keep;
                if gone.off == 0 {
                    break;
                }
                *keep = *self.oid_at(gone.off);
                (self.lib.persist)(self.pop, keep.cast(), 16);
                (self.lib.free)(&mut gone);
                cur = keep;
            }
        }
    }

    /// Runs `pmemobj_defrag` over every oid of the list (the root's head and each
    /// node's `next`).
    pub fn defrag(&mut self) -> Result<DefragResult, String> {
        let mut oids: Vec<*mut PmemOid> = Vec::new();
        let mut cur = self.oid_at(self.root);
        // SAFETY: as in `free_every_other`.
        unsafe {
            while (*cur).off != 0 {
                oids.push(cur);
                cur = self.oid_at((*cur).off);
            }
        }
        let mut result = DefragResult::default();
        // SAFETY: `pop` is open; `oids` holds valid pointers into the pool, each an
        // oid of a live object, for the duration of the call.
        let r = unsafe { (self.lib.defrag)(self.pop, oids.as_mut_ptr(), oids.len(), &mut result) };
        if r != 0 {
            return Err("pmemobj_defrag failed".into());
        }
        Ok(result)
    }

    /// Node values, head first (to check the list survived).
    pub fn values(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut cur = self.oid_at(self.root);
        // SAFETY: as in `free_every_other`; the value follows `next`.
        unsafe {
            while (*cur).off != 0 {
                let node = self.pop.cast::<u8>().wrapping_add((*cur).off as usize);
                out.push(*node.add(16));
                cur = node.cast();
            }
        }
        out
    }

    /// The 4 KiB pages holding a byte of a live node, over the live nodes' bytes.
    pub fn frag_ratio(&self) -> f64 {
        let size = node_bytes(self.value) as u64;
        let mut pages = std::collections::BTreeSet::new();
        let mut live = 0u64;
        let mut cur = self.oid_at(self.root);
        // SAFETY: as in `free_every_other`.
        unsafe {
            while (*cur).off != 0 {
                let off = (*cur).off;
                pages.extend(off / 4096..=(off + size - 1) / 4096);
                live += size;
                cur = self.oid_at(off);
            }
        }
        if live == 0 {
            1.0
        } else {
            pages.len() as f64 * 4096.0 / live as f64
        }
    }
}

impl Drop for PmdkList<'_> {
    fn drop(&mut self) {
        // SAFETY: `pop` is open and not used after this.
        unsafe { (self.lib.close)(self.pop) };
        let _ = std::fs::remove_file(&self.path);
    }
}
