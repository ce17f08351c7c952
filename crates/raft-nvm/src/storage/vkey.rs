//! The index's key type: `(user key, Raft index)` encoded as one byte string,
//! `len(key) as u16 BE ‖ key ‖ index as u64 BE`, stored inline when short.
//!
//! The encoding is prefix-free (the length comes first, so two encodings either
//! differ in their first two bytes or have the same length), which makes comparing
//! two zero-padded inline buffers word by word give exactly the byte-string order.
//! Short keys (up to 14 bytes: the thesis's 10-byte keys and many real ones) therefore live in the B-tree's nodes themselves and compare with three
//! big-endian word compares: no pointer chase, no `memcmp` call, no allocation per
//! insert. Longer keys fall back to a boxed slice.

use std::cmp::Ordering;
use std::ops::Deref;

/// Bytes of an inline encoding.
const INLINE: usize = 24;

/// An encoded `(key, index)`.
#[derive(Clone)]
pub enum VKey {
    /// Zero-padded encoding of a short key.
    Inline([u8; INLINE]),
    /// Encoding of a long key.
    Heap(Box<[u8]>),
}

impl VKey {
    /// Encodes `(key, ts)`. Keys longer than 65535 bytes are rejected by the record
    /// encoder before they get here; they are truncated in the length field only.
    #[inline]
    pub fn new(key: &[u8], ts: u64) -> VKey {
        let n = key.len() + 10;
        let len = (key.len() as u16).to_be_bytes();
        if n <= INLINE {
            let mut b = [0u8; INLINE];
            b[..2].copy_from_slice(&len);
            b[2..2 + key.len()].copy_from_slice(key);
            b[2 + key.len()..n].copy_from_slice(&ts.to_be_bytes());
            VKey::Inline(b)
        } else {
            let mut v = Vec::with_capacity(n);
            v.extend_from_slice(&len);
            v.extend_from_slice(key);
            v.extend_from_slice(&ts.to_be_bytes());
            VKey::Heap(v.into_boxed_slice())
        }
    }

    /// The user key.
    #[inline]
    pub fn key(&self) -> &[u8] {
        let b = &**self;
        &b[2..b.len() - 8]
    }

    /// The Raft index.
    #[inline]
    pub fn ts(&self) -> u64 {
        let b = &**self;
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&b[b.len() - 8..]);
        u64::from_be_bytes(ts)
    }
}

impl Deref for VKey {
    type Target = [u8];

    /// The encoding without padding.
    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            VKey::Inline(b) => {
                let n = usize::from(u16::from_be_bytes([b[0], b[1]])) + 10;
                &b[..n.min(INLINE)]
            }
            VKey::Heap(b) => b,
        }
    }
}

#[inline(always)]
fn words(b: &[u8; INLINE]) -> [u64; 3] {
    let w = |i: usize| {
        let mut x = [0u8; 8];
        x.copy_from_slice(&b[i * 8..i * 8 + 8]);
        u64::from_be_bytes(x)
    };
    [w(0), w(1), w(2)]
}

impl Ord for VKey {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (VKey::Inline(a), VKey::Inline(b)) => words(a).cmp(&words(b)),
            _ => (**self).cmp(&**other),
        }
    }
}

impl PartialOrd for VKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for VKey {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for VKey {}

impl std::fmt::Debug for VKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "({:?}, {})",
            String::from_utf8_lossy(self.key()),
            self.ts()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn order_matches_the_byte_order(
            a in proptest::collection::vec(any::<u8>(), 0..40),
            b in proptest::collection::vec(any::<u8>(), 0..40),
            ta in any::<u64>(),
            tb in any::<u64>(),
        ) {
            let (x, y) = (VKey::new(&a, ta), VKey::new(&b, tb));
            prop_assert_eq!(x.cmp(&y), (*x).cmp(&*y));
            prop_assert_eq!((x.key(), x.ts()), (&a[..], ta));
        }
    }
}
