//! [`PBTreeMap`]: an ordered persistent map, a B+-tree.
//!
//! Values live in the leaves, which are linked in key order for range scans; inner
//! nodes hold separators and children. Every node is an allocator block of a fixed
//! order `B` (most keys per node: 16 by default, which puts an 8-byte key's node in
//! five cache lines; the `node` module has the layout). The header, after its type tag,
//! holds the entry count (so [`PBTreeMap::len`] is O(1)), the root, the height, the
//! first leaf and the order.
//!
//! Each insertion or removal is one transaction: the nodes it changes are edited
//! in DRAM, their old bytes logged at once, and each written whole, once. An
//! insertion splits the nodes that overflow, bottom up; a removal rebalances for
//! real: a node left with fewer than `B / 2` keys borrows from a sibling or merges
//! with one, and a root left with one child gives way to it. Every walk is bounded
//! by the height (at most 40) and every key count checked against the order, so a
//! damaged pool gives [`Error::Corrupt`], never a panic or an endless loop.

mod check;
mod insert;
mod node;
mod range;
mod remove;
mod search;
mod work;

use std::borrow::Borrow;
use std::marker::PhantomData;
use std::ops::{RangeBounds, RangeFull};

use pmem_core::tx::{Hint, Tx, TxOptions};
use pmem_core::Pool;

use crate::element::{read_u64, write_u64, Element, OrdElement};
use crate::heap::{Claim, PHeap, Size};
use crate::roots::{sealed::Structure, Container};
use crate::tag::{Kind, Tag};
use crate::{Error, Result};
use node::{word, Head, Layout, HEADER_BYTES, ORDER_AT, WHAT};
pub use range::Range;
use work::{hybrid, Work};

/// The header layout's version.
const VERSION: u16 = 1;
/// The default order: most keys per node.
pub const DEFAULT_ORDER: usize = 16;
/// The largest order (a node's key count is a 16-bit field; far beyond any useful
/// node size).
pub const MAX_ORDER: usize = 1024;

/// An ordered map from `K` to `V` in persistent memory, a B+-tree of order `B`
/// (see the [module documentation](self)).
///
/// ```
/// # fn main() -> pmem_collections::Result<()> {
/// use pmem_collections::{PBTreeMap, PHeap};
/// use pmem_core::Pool;
///
/// let pool = Pool::anonymous(&PHeap::pool_options("doc", 8 << 20))?;
/// let heap = PHeap::create(pool)?;
/// let mut prices: PBTreeMap<u64, u64> = heap.root("prices")?;
/// for k in [30, 10, 20] {
///     prices.insert(&heap, &k, &(k * 100))?;
/// }
/// assert_eq!(prices.get(&heap, &20)?, Some(2000));
/// let keys: Vec<u64> = prices
///     .range(&heap, 15..)?
///     .map(|e| e.map(|(k, _)| k))
///     .collect::<Result<_, _>>()?;
/// assert_eq!(keys, [20, 30]);
/// # Ok(()) }
/// ```
pub struct PBTreeMap<K: OrdElement, V: Element, const B: usize = DEFAULT_ORDER> {
    claim: Claim,
    _t: PhantomData<fn() -> (K, V)>,
}

impl<K: OrdElement, V: Element, const B: usize> std::fmt::Debug for PBTreeMap<K, V, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PBTreeMap<{}, {}, {B}>@{:?}",
            K::KEY.name(),
            V::KEY.name(),
            self.claim
        )
    }
}

fn btree_tag<K: Element, V: Element>() -> Tag {
    Tag::new(
        Kind::BTreeMap,
        VERSION,
        Some((K::KEY, K::SLOT)),
        Some((V::KEY, V::SLOT)),
    )
}

impl<K: OrdElement, V: Element, const B: usize> PBTreeMap<K, V, B> {
    const LAYOUT: Layout = Layout {
        ks: K::SLOT,
        vs: V::SLOT,
        order: B,
    };

    fn at(&self) -> u64 {
        self.claim.at()
    }

    /// Entries (O(1): the header counts them).
    pub fn len(&self, heap: &PHeap) -> Result<u64> {
        self.claim.check(heap, WHAT)?;
        Ok(Head::read(heap.pool(), self.at())?.len)
    }

    /// Whether the map is empty.
    pub fn is_empty(&self, heap: &PHeap) -> Result<bool> {
        Ok(self.len(heap)? == 0)
    }

    /// The value of `key`, read in place (no transaction).
    pub fn get(&self, heap: &PHeap, key: &K::Arg) -> Result<Option<V::Out>> {
        self.claim.check(heap, WHAT)?;
        get_in::<K, V>(heap.pool(), &Self::LAYOUT, self.at(), key)
    }

    /// Whether `key` is in the map.
    pub fn contains_key(&self, heap: &PHeap, key: &K::Arg) -> Result<bool> {
        Ok(self.get(heap, key)?.is_some())
    }

    /// Inserts `key` → `value` in one transaction; returns the value it replaced.
    pub fn insert(&mut self, heap: &PHeap, key: &K::Arg, value: &V::Arg) -> Result<Option<V::Out>> {
        self.claim.check(heap, WHAT)?;
        let at = self.at();
        heap.run(self.claim.access(), Size::Small, |tx| {
            let mut w = Work::new(tx, Self::LAYOUT, at)?;
            let old = insert::insert::<K, V>(&mut w, key, value)?;
            w.finish(&hybrid)?;
            Ok(old)
        })
    }

    /// Removes `key` in one transaction, rebalancing; returns its value.
    pub fn remove(&mut self, heap: &PHeap, key: &K::Arg) -> Result<Option<V::Out>> {
        self.claim.check(heap, WHAT)?;
        let at = self.at();
        heap.run(self.claim.access(), Size::Small, |tx| {
            let mut w = Work::new(tx, Self::LAYOUT, at)?;
            let old = remove::remove::<K, V>(&mut w, key)?;
            w.finish(&hybrid)?;
            Ok(old)
        })
    }

    /// [`PBTreeMap::insert`] as one exclusive transaction with explicit options,
    /// each write logged with the hint `hint_for(its length)` (benchmarks compare
    /// log modes and word, object and hybrid logging with it).
    #[doc(hidden)]
    pub fn insert_with(
        &mut self,
        heap: &PHeap,
        key: &K::Arg,
        value: &V::Arg,
        opts: TxOptions,
        hint_for: impl Fn(u64) -> Hint,
    ) -> Result<Option<V::Out>> {
        self.claim.check(heap, WHAT)?;
        let at = self.at();
        heap.run_with(opts, |tx| {
            let mut w = Work::new(tx, Self::LAYOUT, at)?;
            let old = insert::insert::<K, V>(&mut w, key, value)?;
            w.finish(&hint_for)?;
            Ok(old)
        })
    }

    /// [`PBTreeMap::remove`] with explicit options, as [`PBTreeMap::insert_with`].
    #[doc(hidden)]
    pub fn remove_with(
        &mut self,
        heap: &PHeap,
        key: &K::Arg,
        opts: TxOptions,
        hint_for: impl Fn(u64) -> Hint,
    ) -> Result<Option<V::Out>> {
        self.claim.check(heap, WHAT)?;
        let at = self.at();
        heap.run_with(opts, |tx| {
            let mut w = Work::new(tx, Self::LAYOUT, at)?;
            let old = remove::remove::<K, V>(&mut w, key)?;
            w.finish(&hint_for)?;
            Ok(old)
        })
    }

    /// The entries whose keys are in `range`, in key order: `a..b`, `a..`, `..b`,
    /// `..=b`, or a pair of [`std::ops::Bound`]s (all of it: [`PBTreeMap::iter`]); for byte-string keys,
    /// bounds of `&[u8]` or `&str`.
    pub fn range<'a, Q, R>(&'a self, heap: &'a PHeap, range: R) -> Result<Range<'a, K, V, Q, R>>
    where
        Q: Borrow<K::Arg> + ?Sized,
        R: RangeBounds<Q>,
    {
        self.claim.check(heap, WHAT)?;
        Range::new(heap, Self::LAYOUT, self.at(), range)
    }

    /// Every entry, in key order.
    pub fn iter<'a>(&'a self, heap: &'a PHeap) -> Result<Range<'a, K, V, K::Arg, RangeFull>> {
        self.range::<K::Arg, _>(heap, ..)
    }

    /// The entry with the least key.
    pub fn first(&self, heap: &PHeap) -> Result<Option<(K::Out, V::Out)>> {
        self.iter(heap)?.next().transpose()
    }

    /// The entry with the greatest key (one descent along the right edge).
    pub fn last(&self, heap: &PHeap) -> Result<Option<(K::Out, V::Out)>> {
        self.claim.check(heap, WHAT)?;
        let (pool, l) = (heap.pool(), Self::LAYOUT);
        let head = Head::read(pool, self.at())?;
        let mut at = head.root;
        for _ in 1..head.height {
            let buf = pool.bytes(at, l.node_bytes())?;
            let n = l.check_word(word(buf), false, at)?;
            at = l.kid(buf, n);
        }
        let buf = pool.bytes(at, l.node_bytes())?;
        let n = l.check_word(word(buf), true, at)?;
        if n == 0 {
            return Ok(None);
        }
        Ok(Some((
            K::get(pool, l.key(buf, n - 1))?,
            V::get(pool, l.val(buf, n - 1))?,
        )))
    }

    /// Checks every invariant of the tree (order within and across nodes, fill
    /// bounds except at the root, equal leaf depth, the leaf chain, the count);
    /// returns the entry count. For tests.
    #[doc(hidden)]
    pub fn check(&self, heap: &PHeap) -> Result<u64> {
        self.claim.check(heap, WHAT)?;
        check::check::<K, V>(heap.pool(), &Self::LAYOUT, self.at())
    }

    /// The header's offset in the pool (tests damage it).
    #[doc(hidden)]
    pub fn header_offset(&self) -> u64 {
        self.at()
    }
}

/// Looks `key` up in the tree at `header`, reading the pool in place.
fn get_in<K: OrdElement, V: Element>(
    pool: &Pool,
    l: &Layout,
    header: u64,
    key: &K::Arg,
) -> Result<Option<V::Out>> {
    let head = Head::read(pool, header)?;
    let mut at = head.root;
    // Bounded by the height, which Head::read checked.
    for _ in 1..head.height {
        let buf = pool.bytes(at, l.node_bytes())?;
        let n = l.check_word(word(buf), false, at)?;
        at = l.kid(buf, search::child::<K>(pool, n, |i| l.key(buf, i), key)?);
    }
    let buf = pool.bytes(at, l.node_bytes())?;
    let n = l.check_word(word(buf), true, at)?;
    match search::find::<K>(pool, n, |i| l.key(buf, i), key)? {
        Ok(i) => Ok(Some(V::get(pool, l.val(buf, i))?)),
        Err(_) => Ok(None),
    }
}

impl<K: OrdElement, V: Element, const B: usize> Structure for PBTreeMap<K, V, B> {
    const WHAT: &'static str = WHAT;

    fn tag() -> Tag {
        btree_tag::<K, V>()
    }

    fn create_in(tx: &mut Tx<'_>) -> Result<u64> {
        if !(3..=MAX_ORDER).contains(&B) || K::SLOT == 0 {
            return Err(Error::TooLarge(format!(
                "a B-tree of order {B} with {}-byte keys: the order must be 3..={MAX_ORDER}, keys at least 1 byte",
                K::SLOT
            )));
        }
        let tag = btree_tag::<K, V>();
        tag.check_ids()?;
        let l = Self::LAYOUT;
        let header = tx.alloc(HEADER_BYTES)?.offset();
        let root = tx.alloc_uninit(l.node_bytes())?.offset();
        tx.write_bytes(root, &node::Node::leaf().encode(&l))?;
        tx.write(pmem_core::PPtr::<Tag>::from_offset(header), &tag)?;
        let head = Head {
            len: 0,
            root,
            height: 1,
            first: root,
        };
        for (off, v) in head.words() {
            write_u64(tx, header + off, v)?;
        }
        write_u64(tx, header + ORDER_AT, B as u64)?;
        Ok(header)
    }

    fn open_claimed(heap: &PHeap, claim: Claim) -> Result<Self> {
        let order = read_u64(heap.pool(), claim.at() + ORDER_AT)?;
        if order != B as u64 {
            let tag = btree_tag::<K, V>().describe();
            return Err(Error::TypeMismatch {
                expected: format!("{tag} of order {B}"),
                found: format!("{tag} of order {order}"),
            });
        }
        Head::read(heap.pool(), claim.at())?;
        Ok(PBTreeMap {
            claim,
            _t: PhantomData,
        })
    }

    fn destroy_in(self, heap: &PHeap, tx: &mut Tx<'_>) -> Result<()> {
        self.claim.check(heap, WHAT)?;
        check::destroy::<K, V>(tx, &Self::LAYOUT, self.at())
    }

    fn offset(&self) -> u64 {
        self.at()
    }
}

impl<K: OrdElement, V: Element, const B: usize> Container for PBTreeMap<K, V, B> {
    fn blocks(&self, heap: &PHeap) -> Result<Vec<u64>> {
        self.claim.check(heap, WHAT)?;
        check::blocks::<K, V>(heap.pool(), &Self::LAYOUT, self.at())
    }
}
