//! What the key-value and table workloads share: a tiny deterministic generator
//! (SplitMix64, written inline so no `rand` crate is needed), the content streams
//! their values are made of, and the error a failed check returns.
//!
//! Every byte a workload stores is a function of `(seed, key, version)`, so a
//! reader can regenerate what it must find and compare it whole.

use thiserror::Error;

/// A check of stored data against its expected content failed.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum VerifyError {
    /// A key-value value differs from the bytes of its `(key, version)`.
    #[error("kv: key {key} version {version}: value differs at byte {offset}")]
    Value {
        /// The key read.
        key: u64,
        /// The version the shadow expects.
        version: u32,
        /// The first differing byte (the length, when the length differs).
        offset: usize,
    },
    /// A key or row the shadow says is live is absent.
    #[error("{what}: {key} is live in the shadow but missing")]
    Missing {
        /// `"kv key"`, `"sql row"` or `"sql index"`.
        what: &'static str,
        /// The key or row id.
        key: u64,
    },
    /// A row's field differs from the one its `(id, version)` gives.
    #[error("sql: row {id} version {version}: field {field} differs")]
    Row {
        /// The row id.
        id: u64,
        /// The version the shadow expects.
        version: u32,
        /// The differing field (`name`, `balance`, `payload`, `id`).
        field: &'static str,
    },
    /// The secondary index maps a name to another row.
    #[error("sql: index maps the name of row {id} to {found:?}")]
    Index {
        /// The row whose name was looked up.
        id: u64,
        /// What the index returned.
        found: Option<u64>,
    },
    /// A structure holds a different number of entries than the shadow.
    #[error("{what}: {found} entries, the shadow says {expected}")]
    Count {
        /// Which structure.
        what: &'static str,
        /// Live entries according to the shadow.
        expected: u64,
        /// Entries found.
        found: u64,
    },
}

/// The SplitMix64 increment (the golden ratio in 64 bits).
const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's output function: a bijective 64-bit mixer.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The content seed of `(seed, key, version)`: distinct triples give unrelated
/// streams.
#[inline]
pub fn content_seed(seed: u64, key: u64, version: u32) -> u64 {
    mix64(mix64(seed ^ GOLDEN).wrapping_add(key).wrapping_mul(GOLDEN) ^ u64::from(version))
}

/// The workspace's one seeded generator.
pub use pmem_core::SplitMix64;

/// Fills `buf` with the content stream of `content` (little-endian 64-bit words
/// of a SplitMix64 started there; a tail shorter than 8 bytes takes the first
/// bytes of one more word).
pub fn fill_stream(buf: &mut [u8], content: u64) {
    let mut g = SplitMix64::new(content);
    let mut words = buf.chunks_exact_mut(8);
    for w in &mut words {
        w.copy_from_slice(&g.next_u64().to_le_bytes());
    }
    let tail = words.into_remainder();
    let n = tail.len();
    tail.copy_from_slice(&g.next_u64().to_le_bytes()[..n]);
}

/// The first byte at which `buf` differs from the content stream of `content`
/// ([`fill_stream`]), or `None` when it matches whole.
pub fn check_stream(buf: &[u8], content: u64) -> Option<usize> {
    let mut g = SplitMix64::new(content);
    let mut words = buf.chunks_exact(8);
    for (i, w) in (&mut words).enumerate() {
        if w != g.next_u64().to_le_bytes() {
            let expect = SplitMix64::new(content);
            return Some(i * 8 + first_diff_in_word(w, expect, i));
        }
    }
    let tail = words.remainder();
    let want = g.next_u64().to_le_bytes();
    tail.iter()
        .zip(want.iter())
        .position(|(a, b)| a != b)
        .map(|p| buf.len() - tail.len() + p)
}

/// The byte within word `i` of the stream of `g` at which `w` differs.
fn first_diff_in_word(w: &[u8], mut g: SplitMix64, i: usize) -> usize {
    let mut want = 0;
    for _ in 0..=i {
        want = g.next_u64();
    }
    w.iter()
        .zip(want.to_le_bytes().iter())
        .position(|(a, b)| a != b)
        .unwrap_or(0)
}
