//! [`PHashMap`]: a persistent hash map, open addressing with linear probing (the
//! algorithm and layout are in the private `table` module).
//!
//! ```
//! use pmem_collections::{PHashMap, PHeap, PString};
//! use pmem_core::Pool;
//!
//! # fn main() -> pmem_collections::Result<()> {
//! let heap = PHeap::create(Pool::anonymous(&PHeap::pool_options("doc", 4 << 20))?)?;
//! let mut phones: PHashMap<PString, u64> = heap.root("phones")?;
//! assert_eq!(phones.insert(&heap, "ada", &5550101)?, None);
//! assert_eq!(phones.insert(&heap, "ada", &5550102)?, Some(5550101));
//! assert_eq!(phones.get(&heap, "ada")?, Some(5550102));
//! assert_eq!(phones.len(&heap)?, 1);
//! for entry in phones.iter(&heap) {
//!     let (name, number) = entry?;
//!     assert_eq!((name.as_str(), number), ("ada", 5550102));
//! }
//! assert_eq!(phones.remove(&heap, "ada")?, Some(5550102));
//! # Ok(()) }
//! ```
//!
//! Each operation is one transaction (an insert that must grow the table first
//! runs the growth as a transaction of its own before it, which changes no
//! entry). Reads run without one.

mod iter;
pub(crate) mod table;

use std::marker::PhantomData;

use pmem_core::tx::{Logging, Tx, TxOptions, TxStats};

use crate::element::Element;
use crate::heap::{Claim, PHeap, Size};
use crate::roots::{sealed::Structure, Container};
use crate::tag::Tag;
use crate::Result;

pub use iter::Iter;

const WHAT: &str = "PHashMap";

/// The hints of the map's own operations: object records for the slots and the
/// count alike. An insert logs its slot and the count in one batch either way (one
/// fence in undo mode), but a word record and an object record live in two logs,
/// so hybrid hints flush two metadata lines where object hints flush one (measured
/// by `tx_bench`: 64 B of metadata in 1 line against 56 B in 2).
const API_LOGGING: Logging = Logging::Object;

/// A persistent hash map from `K` to `V` ([`Element`]s: any [`crate::PType`], or
/// the byte strings [`crate::PBytes`] / [`crate::PString`]). Open it by name with
/// [`PHeap::root`]; share it between threads in a [`crate::PMutex`]. See the
/// [module documentation](self).
pub struct PHashMap<K: Element, V: Element> {
    claim: Claim,
    _t: PhantomData<fn() -> (K, V)>,
}

impl<K: Element, V: Element> std::fmt::Debug for PHashMap<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PHashMap<{}, {}>@{:?}",
            K::KEY.name(),
            V::KEY.name(),
            self.claim
        )
    }
}

impl<K: Element, V: Element> PHashMap<K, V> {
    fn at(&self) -> u64 {
        self.claim.at()
    }

    /// The number of entries (one word of the header: O(1)).
    pub fn len(&self, heap: &PHeap) -> Result<u64> {
        self.claim.check(heap, WHAT)?;
        table::len::<K, V>(heap.pool(), self.at())
    }

    /// Whether the map has no entry.
    pub fn is_empty(&self, heap: &PHeap) -> Result<bool> {
        Ok(self.len(heap)? == 0)
    }

    /// The number of slots of the table (it grows x2 past 7/8 full).
    pub fn capacity(&self, heap: &PHeap) -> Result<u64> {
        self.claim.check(heap, WHAT)?;
        Ok(table::header::<K, V>(heap.pool(), self.at())?.capacity)
    }

    /// The value of `key`.
    pub fn get(&self, heap: &PHeap, key: &K::Arg) -> Result<Option<V::Out>> {
        self.claim.check(heap, WHAT)?;
        table::get::<K, V>(heap.pool(), self.at(), key)
    }

    /// Whether `key` has a value.
    pub fn contains_key(&self, heap: &PHeap, key: &K::Arg) -> Result<bool> {
        Ok(self.get(heap, key)?.is_some())
    }

    /// Inserts `key` with `value`, or replaces its value; returns the old value.
    /// One transaction (after a growth of its own, when the table is 7/8 full).
    pub fn insert(&mut self, heap: &PHeap, key: &K::Arg, value: &V::Arg) -> Result<Option<V::Out>> {
        self.claim.check(heap, WHAT)?;
        self.grow_if_full(heap)?;
        let at = self.at();
        heap.run(self.claim.access(), Size::Small, |tx| {
            table::insert::<K, V>(tx, at, key, value, API_LOGGING)
        })
    }

    /// Removes `key`; returns its value. One transaction.
    pub fn remove(&mut self, heap: &PHeap, key: &K::Arg) -> Result<Option<V::Out>> {
        self.claim.check(heap, WHAT)?;
        let at = self.at();
        heap.run(self.claim.access(), Size::Small, |tx| {
            table::remove::<K, V>(tx, at, key, API_LOGGING)
        })
    }

    /// Removes every entry and shrinks the table to its smallest size. One
    /// transaction empties the map (after a crash it is empty or untouched); the
    /// blocks of byte-string entries are then freed by further transactions of a
    /// few entries each (so that no transaction frees more than a log holds),
    /// finished when the map is next opened if a crash interrupts them.
    pub fn clear(&mut self, heap: &PHeap) -> Result<()> {
        self.claim.check(heap, WHAT)?;
        let at = self.at();
        // An earlier clear stopped by an error may have left a table to drain.
        drain::<K, V>(heap, &self.claim)?;
        heap.run(self.claim.access(), Size::Small, |tx| {
            table::clear::<K, V>(tx, at)
        })?;
        drain::<K, V>(heap, &self.claim)
    }

    /// Grows the table (one transaction) so that `additional` more entries fit
    /// without growing again.
    pub fn reserve(&mut self, heap: &PHeap, additional: u64) -> Result<()> {
        self.claim.check(heap, WHAT)?;
        let at = self.at();
        let h = table::header::<K, V>(heap.pool(), at)?;
        let want = h
            .len
            .checked_add(additional)
            .ok_or_else(|| crate::Error::TooLarge(format!("{additional} more entries")))?;
        let capacity = table::capacity_for(want)?;
        if capacity <= h.capacity {
            return Ok(());
        }
        heap.run(self.claim.access(), Size::Bulk, |tx| {
            table::grow_to::<K, V>(tx, at, capacity)
        })
    }

    /// The entries, in no particular order, each a `Result` (reads, no
    /// transaction). A handle of another heap or a damaged header gives one
    /// error and nothing else.
    pub fn iter<'a>(&'a self, heap: &'a PHeap) -> Iter<'a, K, V> {
        let header = self
            .claim
            .check(heap, WHAT)
            .and_then(|()| table::header::<K, V>(heap.pool(), self.at()));
        Iter::new(heap, header)
    }

    /// Checks the table's invariants (every entry reachable by a probe from its
    /// home, the count right); returns the number of entries.
    pub fn check(&self, heap: &PHeap) -> Result<u64> {
        self.claim.check(heap, WHAT)?;
        table::check::<K, V>(heap.pool(), self.at())
    }

    fn grow_if_full(&mut self, heap: &PHeap) -> Result<()> {
        let at = self.at();
        if table::needs_growth::<K, V>(heap.pool(), at)? {
            heap.run(self.claim.access(), Size::Bulk, |tx| {
                table::grow::<K, V>(tx, at)
            })?;
        }
        Ok(())
    }

    /// [`PHashMap::insert`] with explicit transaction options and hints, run
    /// exclusively; returns what the transaction cost (benchmarks).
    #[doc(hidden)]
    pub fn insert_with(
        &mut self,
        heap: &PHeap,
        key: &K::Arg,
        value: &V::Arg,
        opts: TxOptions,
        logging: Logging,
    ) -> Result<(Option<V::Out>, TxStats)> {
        self.claim.check(heap, WHAT)?;
        self.grow_if_full(heap)?;
        let at = self.at();
        heap.run_stats(opts, |tx| {
            table::insert::<K, V>(tx, at, key, value, logging)
        })
    }

    /// [`PHashMap::remove`] with explicit transaction options and hints, run
    /// exclusively; returns what the transaction cost (benchmarks).
    #[doc(hidden)]
    pub fn remove_with(
        &mut self,
        heap: &PHeap,
        key: &K::Arg,
        opts: TxOptions,
        logging: Logging,
    ) -> Result<(Option<V::Out>, TxStats)> {
        self.claim.check(heap, WHAT)?;
        let at = self.at();
        heap.run_stats(opts, |tx| table::remove::<K, V>(tx, at, key, logging))
    }
}

/// Entries whose blocks one draining transaction frees (two blocks each at most,
/// within the default geometry's 32 allocation records).
const DRAIN_BATCH: usize = 8;

/// Frees a retired table (left by `clear`) in transactions of [`DRAIN_BATCH`]
/// entries. Each step moves on by at least one slot, so it ends.
fn drain<K: Element, V: Element>(heap: &PHeap, claim: &Claim) -> Result<()> {
    let at = claim.at();
    if table::retired::<K, V>(heap.pool(), at)?.is_none() {
        return Ok(());
    }
    let mut from = 0;
    loop {
        let next = heap.run(claim.access(), Size::Small, |tx| {
            table::drain_step::<K, V>(tx, at, from, DRAIN_BATCH)
        })?;
        match next {
            Some(n) if n > from => from = n,
            Some(n) => {
                return Err(crate::error::corrupt(
                    WHAT,
                    format!("draining a cleared table stalled at slot {n}"),
                ))
            }
            None => return Ok(()),
        }
    }
}

impl<K: Element, V: Element> Structure for PHashMap<K, V> {
    const WHAT: &'static str = WHAT;

    fn tag() -> Tag {
        table::tag::<K, V>()
    }

    fn create_in(tx: &mut Tx<'_>) -> Result<u64> {
        table::create::<K, V>(tx, &table::tag::<K, V>(), table::MIN_CAPACITY)
    }

    fn open_claimed(heap: &PHeap, claim: Claim) -> Result<Self> {
        // A clear that a crash interrupted finishes freeing its old entries.
        drain::<K, V>(heap, &claim)?;
        Ok(PHashMap {
            claim,
            _t: PhantomData,
        })
    }

    fn destroy_in(self, heap: &PHeap, tx: &mut Tx<'_>) -> Result<()> {
        self.claim.check(heap, WHAT)?;
        table::destroy::<K, V>(tx, self.at())
    }

    fn offset(&self) -> u64 {
        self.claim.at()
    }
}

impl<K: Element, V: Element> Container for PHashMap<K, V> {
    fn blocks(&self, heap: &PHeap) -> Result<Vec<u64>> {
        self.claim.check(heap, WHAT)?;
        table::blocks::<K, V>(heap.pool(), self.at())
    }
}

#[cfg(test)]
mod tests;
