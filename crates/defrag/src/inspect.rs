//! A read-only look at a defragmenting heap: what `pmkit pool info` and `pmkit
//! pool check` report about it.
//!
//! [`DefragHeap::open`] recovers (transactions, an interrupted compaction) and
//! needs the program's type registry. [`DefragHeap::inspect`] needs neither and
//! writes nothing: it checks the heap root, the transaction heap under it
//! ([`TxHeap::inspect`]), the persisted type table's checksum and encoding, every
//! slab page's header against the allocator's block it lives in, every live
//! object's header (a stored type, a size that fits its slot), every reference
//! from the named roots on (null or a live object of its declared type), and the
//! chain of an interrupted compaction's plans (each plan's checksum).

use std::collections::{BTreeMap, BTreeSet};

use pmem_core::tx::{TxHeap, TxHeapSummary};
use pmem_core::{AllocError, PPtr, PageAllocator, Pool};

use crate::compact::read_plan;
use crate::heap::{crc, page_info, DefragHeap};
use crate::layout::{
    HeapRoot, ObjHeader, PageHeader, TableHeader, HEAP_MAGIC, OBJ_HEADER, PAGE_HEADER, PAGE_MAGIC,
    TABLE_MAGIC,
};
use crate::types::Registry;
use crate::DefragError;

/// What [`DefragHeap::inspect`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct DefragSummary {
    /// Slab pages (page runs holding objects).
    pub pages: u64,
    /// Live objects.
    pub live_objects: u64,
    /// Bytes of live objects.
    pub live_bytes: u64,
    /// Bytes of the slab pages.
    pub footprint_bytes: u64,
    /// `footprint_bytes / live_bytes` (1.0 for an empty heap): the FFCCD paper's
    /// fragmentation ratio.
    pub frag_ratio: f64,
    /// Live objects reachable from the named roots through declared pointers
    /// (`None` while an interrupted compaction leaves references to be healed, or
    /// when the slabs were not checked).
    pub reachable_objects: Option<u64>,
    /// Whether the slab pages, their objects and the references were checked:
    /// over pmem-core's page allocator, or another allocator whose blocks
    /// [`DefragHeap::inspect_with_blocks`] was given a way to list (`pages`,
    /// `live_objects`, `live_bytes` and `footprint_bytes` are 0 when not).
    pub slabs_checked: bool,
    /// Types in the persisted type table.
    pub types: usize,
    /// Plans of an interrupted compaction the next open finishes (or undoes, if
    /// it was still being planned); 0 when none was interrupted.
    pub compaction_plans: usize,
    /// The transaction heap the objects live in.
    pub tx: TxHeapSummary,
}

fn corrupt(reason: String) -> DefragError {
    DefragError::Corrupt(reason)
}

impl DefragHeap {
    /// Reads and checks the heap of `pool` (made by [`DefragHeap::create`])
    /// without writing anything and without the program's registry (works on a
    /// read-only pool): the root, the transaction heap under it, the type table's
    /// checksum, every slab page header against its allocator block, every live
    /// object's type and size, and the plan chain of an interrupted compaction.
    ///
    /// Takes `&mut Pool` so that no heap can be live on the pool while it reads.
    ///
    /// # Errors
    /// [`DefragError::NotFormatted`] if the pool holds no defragmenting heap,
    /// [`DefragError::Corrupt`] (or the transaction heap's error) naming the
    /// damage.
    pub fn inspect(pool: &mut Pool) -> Result<DefragSummary, DefragError> {
        inspect_heap(pool, None)
    }

    /// [`DefragHeap::inspect`] of a heap over another allocator
    /// ([`DefragHeap::create_with`]): `list_blocks(pool, allocator_start)` lists
    /// that allocator's live blocks (pool offset, bytes) without writing, so the
    /// slab pages among them are walked too. For a heap on NVWA, pass
    /// `nvwa::Nvwa::inspect_blocks`. Over pmem-core's page allocator it is
    /// [`DefragHeap::inspect`], and `list_blocks` is not called.
    ///
    /// A lister that finds no allocator of its kind there
    /// ([`AllocError::NotFormatted`]) leaves the slab pages unwalked, as
    /// [`DefragHeap::inspect`] does over an allocator it cannot list.
    ///
    /// # Errors
    /// As [`DefragHeap::inspect`], and the lister's other errors (the
    /// allocator's corruption).
    pub fn inspect_with_blocks(
        pool: &mut Pool,
        list_blocks: BlockLister,
    ) -> Result<DefragSummary, DefragError> {
        inspect_heap(pool, Some(list_blocks))
    }
}

/// Lists an allocator's live blocks (pool offset, bytes) from the start of its
/// region, reading only: see [`DefragHeap::inspect_with_blocks`].
pub type BlockLister = fn(&mut Pool, u64) -> Result<Vec<(u64, u64)>, AllocError>;

fn inspect_heap(
    pool: &mut Pool,
    list_blocks: Option<BlockLister>,
) -> Result<DefragSummary, DefragError> {
    let root = pool.root::<HeapRoot>()?;
    let r: HeapRoot = pool.read(root)?;
    if r.magic != HEAP_MAGIC {
        return Err(DefragError::NotFormatted);
    }
    let tx = TxHeap::inspect(pool)?;
    // Slab pages are found through the allocator's blocks: the page allocator's, or
    // the lister's for another allocator; without one they are not walked.
    let blocks = match (tx.allocator, list_blocks) {
        (Some(_), _) => Some(
            PageAllocator::inspect_blocks(pool, tx.allocator_start)
                .map_err(pmem_core::tx::TxError::from)?,
        ),
        (None, Some(list)) => match list(pool, tx.allocator_start) {
            Ok(blocks) => Some(blocks),
            // Not the lister's kind of allocator: the slabs stay unwalked.
            Err(AllocError::NotFormatted { .. }) => None,
            Err(e) => return Err(pmem_core::tx::TxError::from(e).into()),
        },
        (None, None) => None,
    };
    let pool: &Pool = pool;
    let header: TableHeader = pool.read(PPtr::from_offset(r.type_table))?;
    let table = pool
        .bytes(r.type_table + 32, header.len)
        .map_err(|_| corrupt("type table outside the pool".into()))?;
    if header.magic != TABLE_MAGIC || header.crc != crc(table) {
        return Err(corrupt("type table checksum mismatch".into()));
    }
    let stored = Registry::decode(table).ok_or_else(|| corrupt("type table malformed".into()))?;
    let mut s = DefragSummary {
        pages: 0,
        live_objects: 0,
        live_bytes: 0,
        footprint_bytes: 0,
        frag_ratio: 1.0,
        types: stored.types().count(),
        reachable_objects: None,
        slabs_checked: blocks.is_some(),
        compaction_plans: 0,
        tx,
    };
    // Every live slot, by its page: (slot bytes, capacity, run bytes, header).
    let mut slabs: BTreeMap<u64, (u64, u64, u64, PageHeader)> = BTreeMap::new();
    for (block, bytes) in blocks.unwrap_or_default() {
        let h: PageHeader = pool.read(PPtr::from_offset(block))?;
        if h.magic != PAGE_MAGIC {
            continue;
        }
        let info = page_info(block, &h)?;
        if info.bytes != bytes {
            return Err(corrupt(format!(
                "slab page {block:#x}: its header says {} bytes, its allocator block has {bytes}",
                info.bytes
            )));
        }
        s.pages += 1;
        s.footprint_bytes += bytes;
        slabs.insert(block, (info.slot, info.capacity, bytes, h));
        for i in 0..info.capacity {
            if !h.is_live(i) {
                continue;
            }
            let at = block + PAGE_HEADER + i * info.slot;
            let oh: ObjHeader = pool.read(PPtr::from_offset(at))?;
            if stored.get(oh.type_id).is_none() {
                return Err(corrupt(format!(
                    "object {:#x} has type {}, which the type table does not hold",
                    at + OBJ_HEADER,
                    oh.type_id
                )));
            }
            if u64::from(oh.size) + OBJ_HEADER > info.slot {
                return Err(corrupt(format!(
                    "object {:#x} of {} bytes overflows its {}-byte slot",
                    at + OBJ_HEADER,
                    oh.size,
                    info.slot
                )));
            }
            s.live_objects += 1;
            s.live_bytes += u64::from(oh.size);
        }
    }
    if s.live_bytes > 0 {
        s.frag_ratio = s.footprint_bytes as f64 / s.live_bytes as f64;
    }
    let mut at = r.compaction;
    while at != 0 {
        if s.compaction_plans > 1 << 20 {
            return Err(corrupt("compaction plan chain loops".into()));
        }
        at = read_plan(pool, at)?.next;
        s.compaction_plans += 1;
    }
    if s.compaction_plans == 0 && s.slabs_checked {
        s.reachable_objects = Some(mark(pool, &r, &stored, &slabs)?);
    }
    Ok(s)
}

/// Follows the named roots and every declared pointer of the objects they reach:
/// each must be null or a live object of its declared type (a dangling pointer is
/// corruption). Returns how many objects are reachable.
fn mark(
    pool: &Pool,
    r: &HeapRoot,
    stored: &Registry,
    slabs: &BTreeMap<u64, (u64, u64, u64, PageHeader)>,
) -> Result<u64, DefragError> {
    let mut seen = BTreeSet::new();
    let mut stack: Vec<(u64, Option<u32>, String)> = r
        .roots
        .iter()
        .filter(|slot| slot.ptr != 0)
        .map(|slot| {
            let name = String::from_utf8_lossy(&slot.name);
            (
                slot.ptr,
                None,
                format!("root {:?}", name.trim_end_matches('\0')),
            )
        })
        .collect();
    while let Some((obj, want, from)) = stack.pop() {
        let dangling = |why: &str| corrupt(format!("{from} points at {obj:#x}, {why}"));
        let header = obj
            .checked_sub(OBJ_HEADER)
            .ok_or_else(|| dangling("below the heap"))?;
        let (&page, &(slot, capacity, bytes, h)) = slabs
            .range(..=header)
            .next_back()
            .ok_or_else(|| dangling("not in a slab page"))?;
        let rel = (header - page)
            .checked_sub(PAGE_HEADER)
            .ok_or_else(|| dangling("inside a page header"))?;
        if header >= page + bytes || rel % slot != 0 || rel / slot >= capacity {
            return Err(dangling("not at a slot"));
        }
        if !h.is_live(rel / slot) {
            return Err(dangling("a free slot"));
        }
        let oh: ObjHeader = pool.read(PPtr::from_offset(header))?;
        if want.is_some_and(|t| t != oh.type_id) {
            return Err(dangling("an object of another type"));
        }
        if !seen.insert(obj) {
            continue;
        }
        let desc = stored
            .get(oh.type_id)
            .ok_or_else(|| dangling("an object of no stored type"))?;
        for p in &desc.pointers {
            let target: u64 = pool.read(PPtr::from_offset(obj + u64::from(p.offset)))?;
            if target != 0 {
                stack.push((target, Some(p.target), format!("{obj:#x}+{}", p.offset)));
            }
        }
    }
    Ok(seen.len() as u64)
}
