//! [`PConcurrentHashMap`]: a persistent hash map that many threads insert into,
//! update and remove from at once (the role of libpmemobj++'s
//! `concurrent_hash_map`).
//!
//! **Design: lock striping.** The map is [`STRIPES`] independent open-addressing
//! tables (the [`crate::PHashMap`] algorithm), a key's stripe chosen by the top bits
//! of its hash (a table's slot by the low bits, so the two choices are
//! independent). Each stripe has a reader-writer lock in the DRAM handle: an
//! operation locks its key's stripe and runs one undo transaction on a lane of the
//! log of its own, so operations on different stripes run in parallel, each
//! crash-atomic, and a stripe's growth blocks only that stripe. Reads take the
//! stripe's read lock and no transaction. No step is lock-free (every shared byte
//! is behind a lock), so there is no lock-free protocol for a loom model to check.
//!
//! The locks live in DRAM only: free again whenever the pool is reopened. A stripe's
//! table is created by its first insert, so an empty map is one block.
//!
//! ```
//! use pmem_collections::{PConcurrentHashMap, PHeap};
//! use pmem_core::Pool;
//!
//! # fn main() -> pmem_collections::Result<()> {
//! let heap = PHeap::create(Pool::anonymous(&PHeap::pool_options("doc", 16 << 20))?)?;
//! let hits: PConcurrentHashMap<u64, u64> = heap.root("hits")?;
//! std::thread::scope(|s| {
//!     for t in 0..2u64 {
//!         let (heap, hits) = (&heap, &hits);
//!         s.spawn(move || -> pmem_collections::Result<()> {
//!             for k in 0..100 {
//!                 hits.insert(heap, &(k * 2 + t), &k)?;
//!             }
//!             Ok(())
//!         });
//!     }
//! });
//! assert_eq!(hits.len(&heap)?, 200);
//! assert_eq!(hits.get(&heap, &7)?, Some(3));
//! # Ok(()) }
//! ```

use std::marker::PhantomData;

use parking_lot::RwLock;
use pmem_core::tx::{Logging, Tx};
use pmem_core::PPtr;

use crate::element::{read_u64, Element};
use crate::error::corrupt;
use crate::hashmap::table;
use crate::heap::{Access, Claim, PHeap, Size};
use crate::roots::{sealed::Structure, Container};
use crate::tag::{Kind, Tag, TAG_BYTES};
use crate::Result;

/// Stripes of a map: independent tables, each with its lock.
pub const STRIPES: usize = 32;
const VERSION: u16 = 1;
/// The block: the tag, then each stripe's table offset (0: not created yet).
const BLOCK: u64 = TAG_BYTES + 8 * STRIPES as u64;
const WHAT: &str = "PConcurrentHashMap";

/// A hash map from `K` to `V` that threads share by reference: every method takes
/// `&self`. See the [module documentation](self).
pub struct PConcurrentHashMap<K: Element, V: Element> {
    claim: Claim,
    /// Each stripe's table offset (0: none yet), behind the stripe's lock.
    stripes: Vec<Stripe>,
    _t: PhantomData<fn() -> (K, V)>,
}

impl<K: Element, V: Element> std::fmt::Debug for PConcurrentHashMap<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PConcurrentHashMap<{}, {}>@{:?}",
            K::KEY.name(),
            V::KEY.name(),
            self.claim
        )
    }
}

/// A stripe's lock and table offset, alone on its cache line (threads working on
/// neighbouring stripes do not take each other's line).
#[repr(align(64))]
struct Stripe(RwLock<u64>);

impl std::ops::Deref for Stripe {
    type Target = RwLock<u64>;
    fn deref(&self) -> &RwLock<u64> {
        &self.0
    }
}

fn tag<K: Element, V: Element>() -> Tag {
    Tag::new(
        Kind::ConcurrentHashMap,
        VERSION,
        Some((K::KEY, K::SLOT)),
        Some((V::KEY, V::SLOT)),
    )
}

impl<K: Element, V: Element> PConcurrentHashMap<K, V> {
    fn stripe_of(key: &K::Arg) -> usize {
        // The top bits: the tables index by the low ones.
        (K::hash_arg(key) >> (64 - STRIPES.trailing_zeros())) as usize
    }

    fn stripe_word(&self, i: usize) -> u64 {
        self.claim.at() + TAG_BYTES + 8 * i as u64
    }

    /// The value of `key` (a read: the stripe's read lock, no transaction).
    pub fn get(&self, heap: &PHeap, key: &K::Arg) -> Result<Option<V::Out>> {
        self.claim.check(heap, WHAT)?;
        let stripe = self.stripes[Self::stripe_of(key)].read();
        if *stripe == 0 {
            return Ok(None);
        }
        table::get::<K, V>(heap.pool(), *stripe, key)
    }

    /// Whether `key` has a value.
    pub fn contains_key(&self, heap: &PHeap, key: &K::Arg) -> Result<bool> {
        Ok(self.get(heap, key)?.is_some())
    }

    /// Inserts `key` with `value` or replaces its value; returns the old value.
    /// One transaction (after a growth of the stripe's table, a transaction of its
    /// own that changes no entry, when the table is 7/8 full).
    pub fn insert(&self, heap: &PHeap, key: &K::Arg, value: &V::Arg) -> Result<Option<V::Out>> {
        self.claim.check(heap, WHAT)?;
        let i = Self::stripe_of(key);
        let mut stripe = self.stripes[i].write();
        if *stripe == 0 {
            let word = self.stripe_word(i);
            // The stripe's table and its word, one transaction.
            *stripe = heap.run(Access::Shared, Size::Small, |tx| {
                let at = table::create::<K, V>(tx, &table::tag::<K, V>(), table::MIN_CAPACITY)?;
                tx.write(PPtr::<u64>::from_offset(word), &at)?;
                Ok(at)
            })?;
        }
        let at = *stripe;
        if table::needs_growth::<K, V>(heap.pool(), at)? {
            heap.run(Access::Shared, Size::Bulk, |tx| table::grow::<K, V>(tx, at))?;
        }
        heap.run(Access::Shared, Size::Small, |tx| {
            table::insert::<K, V>(tx, at, key, value, Logging::Hybrid)
        })
    }

    /// Removes `key`; returns its value. One transaction.
    pub fn remove(&self, heap: &PHeap, key: &K::Arg) -> Result<Option<V::Out>> {
        self.claim.check(heap, WHAT)?;
        let stripe = self.stripes[Self::stripe_of(key)].write();
        if *stripe == 0 {
            return Ok(None);
        }
        let at = *stripe;
        heap.run(Access::Shared, Size::Small, |tx| {
            table::remove::<K, V>(tx, at, key, Logging::Hybrid)
        })
    }

    /// The number of entries: the stripes' counts, each read under its lock (a
    /// sum of [`STRIPES`] words; exact when no other thread writes meanwhile).
    pub fn len(&self, heap: &PHeap) -> Result<u64> {
        self.claim.check(heap, WHAT)?;
        let mut n = 0u64;
        for s in &self.stripes {
            let at = *s.read();
            if at != 0 {
                n = n.saturating_add(table::len::<K, V>(heap.pool(), at)?);
            }
        }
        Ok(n)
    }

    /// Whether the map has no entry.
    pub fn is_empty(&self, heap: &PHeap) -> Result<bool> {
        Ok(self.len(heap)? == 0)
    }

    /// Every entry, stripe by stripe (each stripe read under its lock: a snapshot
    /// per stripe, not of the whole map while others write).
    pub fn entries(&self, heap: &PHeap) -> Result<Vec<(K::Out, V::Out)>> {
        self.claim.check(heap, WHAT)?;
        let mut out = Vec::new();
        for s in &self.stripes {
            let at = s.read();
            if *at == 0 {
                continue;
            }
            let h = table::header::<K, V>(heap.pool(), *at)?;
            table::for_each::<K, V>(heap.pool(), &h, |_, slot| {
                out.push(table::entry::<K, V>(heap.pool(), slot)?);
                Ok(())
            })?;
        }
        Ok(out)
    }

    /// Checks every stripe's table (as [`crate::PHashMap::check`]) and that each
    /// key sits in its stripe; returns the number of entries.
    #[doc(hidden)]
    pub fn check(&self, heap: &PHeap) -> Result<u64> {
        self.claim.check(heap, WHAT)?;
        let mut n = 0;
        for s in &self.stripes {
            let at = *s.read();
            if at != 0 {
                n += table::check::<K, V>(heap.pool(), at)?;
            }
        }
        Ok(n)
    }
}

impl<K: Element, V: Element> Structure for PConcurrentHashMap<K, V> {
    const WHAT: &'static str = WHAT;

    fn tag() -> Tag {
        tag::<K, V>()
    }

    fn create_in(tx: &mut Tx<'_>) -> Result<u64> {
        let tag = tag::<K, V>();
        tag.check_ids()?;
        let block = tx.alloc(BLOCK)?;
        tx.write(block.cast::<Tag>(), &tag)?;
        Ok(block.offset())
    }

    fn open_claimed(heap: &PHeap, claim: Claim) -> Result<Self> {
        let mut stripes = Vec::with_capacity(STRIPES);
        for i in 0..STRIPES {
            let at = read_u64(heap.pool(), claim.at() + TAG_BYTES + 8 * i as u64)?;
            if at != 0 {
                // A damaged word is caught here, not at the first operation.
                heap.check_tag(at, &table::tag::<K, V>())
                    .map_err(|e| corrupt(WHAT, format!("stripe {i} at {at:#x}: {e}")))?;
            }
            stripes.push(Stripe(RwLock::new(at)));
        }
        Ok(PConcurrentHashMap {
            claim,
            stripes,
            _t: PhantomData,
        })
    }

    fn destroy_in(self, heap: &PHeap, tx: &mut Tx<'_>) -> Result<()> {
        self.claim.check(heap, WHAT)?;
        for s in &self.stripes {
            let at = *s.read();
            if at != 0 {
                table::destroy::<K, V>(tx, at)?;
            }
        }
        Ok(tx.free(PPtr::from_offset(self.claim.at()), BLOCK)?)
    }

    fn offset(&self) -> u64 {
        self.claim.at()
    }
}

impl<K: Element, V: Element> Container for PConcurrentHashMap<K, V> {
    fn blocks(&self, heap: &PHeap) -> Result<Vec<u64>> {
        self.claim.check(heap, WHAT)?;
        let mut out = vec![self.claim.at()];
        for s in &self.stripes {
            let at = *s.read();
            if at != 0 {
                out.extend(table::blocks::<K, V>(heap.pool(), at)?);
            }
        }
        out.sort_unstable();
        Ok(out)
    }
}
