//! The peer: libpmemobj's `pmemobj_defrag` (PMDK 1.12, Debian's `libpmemobj-dev`),
//! loaded at run time with `dlopen` (the run prints one line and skips the peer
//! when it is absent).
//!
//! [`PmdkHeap`] is the generic pool of the workloads (`workloads::pmdk_store`):
//! every object is allocated with a type number that names its kind, and every
//! kind's `PMEMoid` fields are at its start, so one walk of the graph from the
//! root's oids finds every object and every oid naming it, which is what
//! `pmemobj_defrag` must be handed (the application's burden the FFCCD paper
//! criticises; pmkit's heap knows its pointers from the type registry).
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
type ZallocFn = unsafe extern "C" fn(*mut c_void, *mut PmemOid, usize, u64) -> c_int;
type TypeNumFn = unsafe extern "C" fn(PmemOid) -> u64;
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
    zalloc: ZallocFn,
    type_num: TypeNumFn,
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
                zalloc: *lib.get(b"pmemobj_zalloc\0").map_err(sym)?,
                type_num: *lib.get(b"pmemobj_type_num\0").map_err(sym)?,
                _lib: lib,
            })
        }
    }
}

/// Creates (over any file left at `path`) and opens a PMDK pool of `size` bytes.
fn create_pool(lib: &Pmdk, path: &Path, size: u64, layout: &str) -> Result<*mut c_void, String> {
    let _ = std::fs::remove_file(path);
    let c_path = c_path(path)?;
    let layout = CString::new(layout).map_err(|e| e.to_string())?;
    let size = usize::try_from(size).map_err(|e| e.to_string())?;
    // SAFETY: valid NUL-terminated strings; PMDK creates and maps the file.
    let pop = unsafe { (lib.create)(c_path.as_ptr(), layout.as_ptr(), size, 0o600) };
    if pop.is_null() {
        return Err(format!("pmemobj_create {} failed", path.display()));
    }
    Ok(pop)
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
        let pop = create_pool(lib, path, size, "pmkit-defrag-repro")?;
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

/// Bytes of the root object of a [`PmdkHeap`]: its `PMEMoid` roots.
const HEAP_ROOTS: usize = 8;

/// What a walk of a [`PmdkHeap`] found.
pub struct Walk {
    /// Every `PMEMoid` in the pool that names an object (roots included).
    pub oids: Vec<*mut PmemOid>,
    /// Every object reached: (offset, bytes).
    pub objects: Vec<(u64, u64)>,
}

/// A PMDK pool of typed objects (closed and removed on drop). The type number of
/// an object says, through the `layout` function given to [`PmdkHeap::walk`], how
/// many `PMEMoid`s it starts with and its bytes.
pub struct PmdkHeap<'a> {
    lib: &'a Pmdk,
    pop: *mut c_void,
    path: std::path::PathBuf,
    /// Offset of the root object: [`HEAP_ROOTS`] oids.
    root: u64,
    /// `pool_uuid_lo` of this pool (written in every non-null oid).
    pub uuid: u64,
    /// Bytes of the mapping.
    size: u64,
}

impl<'a> PmdkHeap<'a> {
    /// Creates a pool of `size` bytes at `path`.
    pub fn create(lib: &'a Pmdk, path: &Path, size: u64) -> Result<Self, String> {
        let pop = create_pool(lib, path, size, "pmkit-defrag-heap")?;
        let mut heap = PmdkHeap {
            lib,
            pop,
            path: path.to_owned(),
            root: 0,
            uuid: 0,
            size,
        };
        // SAFETY: `pop` is open; PMDK zeroes a new root object.
        let root = unsafe { (lib.root)(pop, HEAP_ROOTS * 16) };
        if root.off == 0 {
            return Err("pmemobj_root failed".into());
        }
        heap.root = root.off;
        heap.uuid = root.pool_uuid_lo;
        Ok(heap)
    }

    fn at(&self, off: u64) -> *mut u8 {
        self.pop.cast::<u8>().wrapping_add(off as usize)
    }

    /// The `i`th root oid.
    pub fn root_oid(&self, i: usize) -> *mut PmemOid {
        self.at(self.root + 16 * (i % HEAP_ROOTS) as u64).cast()
    }

    /// A zeroed object of `size` bytes and type number `type_num`; its offset.
    pub fn alloc(&mut self, size: usize, type_num: u64) -> Result<u64, String> {
        let mut oid = PmemOid::default();
        // SAFETY: `pop` is open; `oid` is a DRAM out-parameter (these workloads'
        // updates are not crash-consistent: PMDK is measured on its footprint and
        // `pmemobj_defrag`, not on recovery).
        let r = unsafe { (self.lib.zalloc)(self.pop, &mut oid, size, type_num) };
        if r != 0 || oid.off == 0 {
            return Err(format!("pmemobj_zalloc of {size} bytes failed"));
        }
        Ok(oid.off)
    }

    /// Frees the object at `off`.
    pub fn free(&mut self, off: u64) {
        let mut oid = PmemOid {
            pool_uuid_lo: self.uuid,
            off,
        };
        // SAFETY: `off` is a live object of this pool (the caller's structure
        // names it); PMDK frees it and nulls the DRAM oid.
        unsafe { (self.lib.free)(&mut oid) };
    }

    /// `Err` unless `off..off + len` is inside the mapping past its first page (a
    /// corrupted offset must not be dereferenced).
    fn check(&self, off: u64, len: usize) -> Result<(), String> {
        match off.checked_add(len as u64) {
            Some(end) if off >= 4096 && end <= self.size => Ok(()),
            _ => Err(format!(
                "PMDK: offset {off:#x} (+{len}) is outside the pool"
            )),
        }
    }

    /// The `len` bytes at `off`, copied out.
    pub fn read(&self, off: u64, len: usize) -> Result<Vec<u8>, String> {
        self.check(off, len)?;
        let mut out = vec![0u8; len];
        // SAFETY: `off..off + len` is inside the mapped pool (checked), in a live
        // object of the caller's structure (of its kind's size).
        unsafe { std::ptr::copy_nonoverlapping(self.at(off), out.as_mut_ptr(), len) };
        Ok(out)
    }

    /// Writes `bytes` at `off` and persists them.
    pub fn write(&mut self, off: u64, bytes: &[u8]) -> Result<(), String> {
        self.check(off, bytes.len())?;
        let p = self.at(off);
        // SAFETY: as in `read`; no other reference to these bytes is live.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len());
            (self.lib.persist)(self.pop, p.cast(), bytes.len());
        }
        Ok(())
    }

    /// Sets root `i` to `off` (0: null) and persists it.
    pub fn set_root(&mut self, i: usize, off: u64) {
        let oid = PmemOid {
            pool_uuid_lo: if off == 0 { 0 } else { self.uuid },
            off,
        };
        let p = self.root_oid(i);
        // SAFETY: the root object holds `HEAP_ROOTS` oids.
        unsafe {
            p.write_unaligned(oid);
            (self.lib.persist)(self.pop, p.cast(), 16);
        }
    }

    /// Root `i`'s offset.
    pub fn root(&self, i: usize) -> u64 {
        // SAFETY: as in `set_root`.
        unsafe { self.root_oid(i).read_unaligned().off }
    }

    /// Walks the graph from the roots: `layout(type number)` gives (oids at the
    /// object's start, bytes). Every object once, every oid naming it.
    pub fn walk(&self, layout: &dyn Fn(u64) -> Option<(usize, u64)>) -> Result<Walk, String> {
        let mut w = Walk {
            oids: Vec::new(),
            objects: Vec::new(),
        };
        let mut seen = std::collections::HashSet::new();
        let mut stack: Vec<*mut PmemOid> = (0..HEAP_ROOTS).map(|i| self.root_oid(i)).collect();
        while let Some(p) = stack.pop() {
            // SAFETY: `p` points at an oid in a live object of this pool (a root
            // or a field within the oid prefix of an object reached).
            let oid = unsafe { p.read_unaligned() };
            if oid.off == 0 {
                continue;
            }
            w.oids.push(p);
            if !seen.insert(oid.off) {
                continue;
            }
            self.check(oid.off, 16)?;
            // SAFETY: `oid` names a live object of this pool.
            let t = unsafe { (self.lib.type_num)(oid) };
            let (n, bytes) =
                layout(t).ok_or_else(|| format!("PMDK object {:#x}: type {t}", oid.off))?;
            self.check(oid.off, bytes as usize)?;
            w.objects.push((oid.off, bytes));
            for i in 0..n {
                stack.push(self.at(oid.off + 16 * i as u64).cast());
            }
        }
        Ok(w)
    }

    /// (footprint, live bytes): the 4 KiB pages holding a byte of a walked
    /// object, and the objects' bytes.
    pub fn footprint(walk: &Walk) -> (u64, u64) {
        let mut pages: Vec<u64> = Vec::with_capacity(walk.objects.len() * 2);
        let mut live = 0;
        for &(off, size) in &walk.objects {
            pages.extend(off / 4096..=(off + size.max(1) - 1) / 4096);
            live += size;
        }
        pages.sort_unstable();
        pages.dedup();
        (pages.len() as u64 * 4096, live)
    }

    /// Runs `pmemobj_defrag` over every oid of `walk` (made by [`PmdkHeap::walk`]
    /// with no change to the pool since).
    pub fn defrag(&mut self, walk: &mut Walk) -> Result<DefragResult, String> {
        let mut result = DefragResult::default();
        // SAFETY: `pop` is open; `walk.oids` holds a pointer to every oid naming a
        // live object of the pool (found by the walk), valid during the call.
        let r = unsafe {
            (self.lib.defrag)(
                self.pop,
                walk.oids.as_mut_ptr(),
                walk.oids.len(),
                &mut result,
            )
        };
        if r != 0 {
            return Err("pmemobj_defrag failed".into());
        }
        Ok(result)
    }
}

impl Drop for PmdkHeap<'_> {
    fn drop(&mut self) {
        // SAFETY: `pop` is open and not used after this.
        unsafe { (self.lib.close)(self.pop) };
        let _ = std::fs::remove_file(&self.path);
    }
}
