//! Binary searches over a node's sorted key slots.

use std::cmp::Ordering;

use crate::element::{Media, OrdElement};
use crate::Result;

/// Where `key` is among the `n` sorted slots `slot(i)`: `Ok(i)` if slot `i`
/// holds it, else `Err(i)`, the index it would be inserted at.
pub(crate) fn find<'b, K: OrdElement>(
    m: &(impl Media + ?Sized),
    n: usize,
    slot: impl Fn(usize) -> &'b [u8],
    key: &K::Arg,
) -> Result<std::result::Result<usize, usize>> {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match K::cmp_slot(m, slot(mid), key)? {
            Ordering::Less => lo = mid + 1,
            Ordering::Greater => hi = mid,
            Ordering::Equal => return Ok(Ok(mid)),
        }
    }
    Ok(Err(lo))
}

/// How many of the `n` sorted separators `slot(i)` are at or below `key`: the
/// child of an inner node that holds `key` (separator `i` is the least key of
/// child `i + 1`).
pub(crate) fn child<'b, K: OrdElement>(
    m: &(impl Media + ?Sized),
    n: usize,
    slot: impl Fn(usize) -> &'b [u8],
    key: &K::Arg,
) -> Result<usize> {
    Ok(match find::<K>(m, n, slot, key)? {
        Ok(i) => i + 1,
        Err(i) => i,
    })
}
