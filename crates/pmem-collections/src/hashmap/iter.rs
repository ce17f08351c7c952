//! [`Iter`]: the entries of a [`super::PHashMap`], in table order.

use std::marker::PhantomData;

use crate::element::Element;
use crate::heap::PHeap;
use crate::Result;

use super::table::{self, Header};

/// The entries of a [`super::PHashMap`] (from [`super::PHashMap::iter`]), in no
/// particular order, as `Result<(key, value)>`. It borrows the map, so no
/// operation changes the map while it runs. It visits each slot once (so it ends
/// after `capacity` slots whatever the media holds) and stops after the first
/// error (a handle of another heap or a damaged header is the first item).
pub struct Iter<'a, K: Element, V: Element> {
    heap: &'a PHeap,
    /// The header read when the iteration began (`None`: it failed or ended).
    header: Option<Header>,
    /// An error found when the iteration began, yielded first.
    failed: Option<crate::Error>,
    next: u64,
    /// Entries yielded (more than the count is damage).
    seen: u64,
    buf: Vec<u8>,
    _t: PhantomData<fn() -> (K, V)>,
}

impl<K: Element, V: Element> std::fmt::Debug for Iter<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Iter")
            .field("next", &self.next)
            .field("seen", &self.seen)
            .finish()
    }
}

impl<'a, K: Element, V: Element> Iter<'a, K, V> {
    pub(super) fn new(heap: &'a PHeap, header: Result<Header>) -> Self {
        let (header, failed) = match header {
            Ok(h) => (Some(h), None),
            Err(e) => (None, Some(e)),
        };
        Iter {
            heap,
            header,
            failed,
            next: 0,
            seen: 0,
            buf: vec![0u8; table::stride::<K, V>() as usize],
            _t: PhantomData,
        }
    }

    fn step(&mut self, h: Header) -> Result<Option<(K::Out, V::Out)>> {
        let m = self.heap.pool();
        let Some(i) = table::next_occupied::<K, V>(m, &h, self.next, &mut self.buf)? else {
            return Ok(None);
        };
        self.next = i + 1;
        self.seen += 1;
        if self.seen > h.len {
            return Err(crate::error::corrupt(
                "PHashMap",
                format!("more occupied slots than the count {}", h.len),
            ));
        }
        table::entry::<K, V>(m, &self.buf).map(Some)
    }
}

impl<K: Element, V: Element> Iterator for Iter<'_, K, V> {
    type Item = Result<(K::Out, V::Out)>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.failed.take() {
            return Some(Err(e));
        }
        let h = self.header?;
        match self.step(h) {
            Ok(Some(e)) => Some(Ok(e)),
            Ok(None) => {
                self.header = None;
                None
            }
            Err(e) => {
                self.header = None;
                Some(Err(e))
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self.header {
            Some(h) => {
                let left = h.len.saturating_sub(self.seen) as usize;
                (0, Some(left.saturating_add(1)))
            }
            None => (0, Some(usize::from(self.failed.is_some()))),
        }
    }
}
