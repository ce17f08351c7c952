//! Ordered scans: [`Range`] descends once to the first key in the range, then
//! follows the leaf chain, reading the pool in place (no transaction, no copy of a
//! node).

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};

use super::node::{word, Head, Layout, WHAT};
use super::search;
use crate::element::{Element, OrdElement};
use crate::error::corrupt;
use crate::heap::PHeap;
use crate::Result;

/// An iterator over the entries of a [`crate::PBTreeMap`] whose keys are in a
/// range, in key order: made by [`crate::PBTreeMap::range`] and
/// [`crate::PBTreeMap::iter`]. Yields `Err` once and stops if it meets damage.
/// `R` is the range, of bounds `Q` that borrow as keys (`u64`, `&str`, `&[u8]`).
pub struct Range<'a, K: OrdElement, V: Element, Q: ?Sized, R> {
    heap: &'a PHeap,
    l: Layout,
    /// The leaf being read (0: the end).
    leaf: u64,
    /// The next entry's index in it.
    idx: usize,
    /// Leaves it may still enter: a damaged chain cannot loop for ever.
    leaves_left: u64,
    range: R,
    _t: PhantomData<fn(&Q) -> (K, V)>,
}

impl<K: OrdElement, V: Element, Q: ?Sized, R> std::fmt::Debug for Range<'_, K, V, Q, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Range")
            .field("leaf", &self.leaf)
            .field("idx", &self.idx)
            .finish()
    }
}

impl<'a, K, V, Q, R> Range<'a, K, V, Q, R>
where
    K: OrdElement,
    V: Element,
    Q: Borrow<K::Arg> + ?Sized,
    R: RangeBounds<Q>,
{
    /// A scan of the tree at `header` from the start of `range`.
    pub(crate) fn new(heap: &'a PHeap, l: Layout, header: u64, range: R) -> Result<Self> {
        let pool = heap.pool();
        let head = Head::read(pool, header)?;
        let (leaf, idx) = match range.start_bound() {
            Bound::Unbounded => (head.first, 0),
            Bound::Included(a) | Bound::Excluded(a) => {
                let a = a.borrow();
                let mut at = head.root;
                for _ in 1..head.height {
                    let buf = pool.bytes(at, l.node_bytes())?;
                    let n = l.check_word(word(buf), false, at)?;
                    at = l.kid(buf, search::child::<K>(pool, n, |i| l.key(buf, i), a)?);
                }
                let buf = pool.bytes(at, l.node_bytes())?;
                let n = l.check_word(word(buf), true, at)?;
                let idx = match search::find::<K>(pool, n, |i| l.key(buf, i), a)? {
                    Ok(i) if matches!(range.start_bound(), Bound::Excluded(_)) => i + 1,
                    Ok(i) | Err(i) => i,
                };
                (at, idx)
            }
        };
        Ok(Range {
            heap,
            l,
            leaf,
            idx,
            // Every leaf but a lone root holds a key: more leaves than entries
            // plus one is a damaged chain.
            leaves_left: head.len.saturating_add(1),
            range,
            _t: PhantomData,
        })
    }

    fn step(&mut self) -> Result<Option<(K::Out, V::Out)>> {
        let l = self.l;
        let pool = self.heap.pool();
        loop {
            if self.leaf == 0 {
                return Ok(None);
            }
            let buf = pool.bytes(self.leaf, l.node_bytes())?;
            let n = l.check_word(word(buf), true, self.leaf)?;
            if self.idx < n {
                let k = l.key(buf, self.idx);
                let past = match self.range.end_bound() {
                    Bound::Unbounded => false,
                    Bound::Included(b) => K::cmp_slot(pool, k, b.borrow())? == Ordering::Greater,
                    Bound::Excluded(b) => K::cmp_slot(pool, k, b.borrow())? != Ordering::Less,
                };
                if past {
                    self.leaf = 0;
                    return Ok(None);
                }
                let out = (K::get(pool, k)?, V::get(pool, l.val(buf, self.idx))?);
                self.idx += 1;
                return Ok(Some(out));
            }
            if self.leaves_left == 0 {
                return Err(corrupt(WHAT, "the leaf chain is longer than the tree"));
            }
            self.leaves_left -= 1;
            self.leaf = l.next(buf);
            self.idx = 0;
        }
    }
}

impl<K, V, Q, R> Iterator for Range<'_, K, V, Q, R>
where
    K: OrdElement,
    V: Element,
    Q: Borrow<K::Arg> + ?Sized,
    R: RangeBounds<Q>,
{
    type Item = Result<(K::Out, V::Out)>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.step() {
            Ok(item) => item.map(Ok),
            Err(e) => {
                self.leaf = 0;
                Some(Err(e))
            }
        }
    }
}
