//! The B+-tree's layout on media: the header's words, a node's bytes, and the DRAM
//! copy of a node that an operation edits before writing it back whole.
//!
//! A node is one allocator block of [`Layout::node_bytes`]:
//!
//! | bytes | leaf | inner node |
//! | --- | --- | --- |
//! | 0..8 | `n` (bits 0..16), kind (16..24), magic (32..64) | same |
//! | 8..16 | the next leaf (0: the last) | 0 |
//! | 16.. | `order` key slots | `order` key slots |
//! | then | `order` value slots | `order + 1` children (8 B each) |
//!
//! In an inner node, key `i` separates child `i` (keys below it) from child `i + 1`
//! (keys at or above it). Separators own their slots (a byte-string separator has a
//! block of its own), so removing a key from a leaf never leaves a separator
//! pointing at freed bytes.

use crate::element::Media;
use crate::error::corrupt;
use crate::tag::TAG_BYTES;
use crate::Result;

/// The structure's name in errors.
pub(crate) const WHAT: &str = "PBTreeMap";

/// Bytes of a node before its key slots.
const NODE_HEAD: usize = 16;
/// The magic in the top half of a node's first word ("BTND").
const NODE_MAGIC: u64 = u32::from_le_bytes(*b"BTND") as u64;
const KIND_LEAF: u64 = 1;
const KIND_INNER: u64 = 2;

/// The header block: the tag, then these words.
pub(crate) const LEN_AT: u64 = TAG_BYTES;
pub(crate) const ROOT_AT: u64 = TAG_BYTES + 8;
pub(crate) const HEIGHT_AT: u64 = TAG_BYTES + 16;
pub(crate) const FIRST_AT: u64 = TAG_BYTES + 24;
pub(crate) const ORDER_AT: u64 = TAG_BYTES + 32;
/// Bytes of the header block (the tag, five words, three reserved).
pub(crate) const HEADER_BYTES: u64 = TAG_BYTES + 64;

/// The most levels a tree may have: far more than any pool can fill at the
/// smallest order (3^40 leaves), so a larger height on media is damage.
pub(crate) const MAX_HEIGHT: u64 = 40;

/// The sizes that place a node's parts.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    /// Key slot bytes.
    pub ks: usize,
    /// Value slot bytes.
    pub vs: usize,
    /// Most keys in a node.
    pub order: usize,
}

impl Layout {
    /// Fewest keys in a node other than the root.
    pub fn min(&self) -> usize {
        self.order / 2
    }

    fn tail_at(&self) -> usize {
        NODE_HEAD + self.order * self.ks
    }

    /// Bytes of a node block (a multiple of 8).
    pub fn node_bytes(&self) -> u64 {
        let tail = (self.order * self.vs).max((self.order + 1) * 8);
        ((self.tail_at() + tail).div_ceil(8) * 8) as u64
    }

    /// Checks a node's first word: its kind (a leaf at `leaf`) and key count.
    pub fn check_word(&self, word: u64, leaf: bool, at: u64) -> Result<usize> {
        let n = (word & 0xffff) as usize;
        let kind = (word >> 16) & 0xff;
        let want = if leaf { KIND_LEAF } else { KIND_INNER };
        if word >> 32 != NODE_MAGIC || kind != want || (word >> 24) & 0xff != 0 {
            return Err(corrupt(
                WHAT,
                format!(
                    "node {at:#x}: first word {word:#x}, expected a {} node",
                    kind_name(leaf)
                ),
            ));
        }
        if n > self.order {
            return Err(corrupt(
                WHAT,
                format!("node {at:#x} holds {n} keys, the order is {}", self.order),
            ));
        }
        Ok(n)
    }

    /// Key `i` of the node bytes `buf`.
    pub fn key<'b>(&self, buf: &'b [u8], i: usize) -> &'b [u8] {
        let at = NODE_HEAD + i * self.ks;
        &buf[at..at + self.ks]
    }

    /// Value `i` of the leaf bytes `buf`.
    pub fn val<'b>(&self, buf: &'b [u8], i: usize) -> &'b [u8] {
        let at = self.tail_at() + i * self.vs;
        &buf[at..at + self.vs]
    }

    /// Child `i` of the inner node bytes `buf`.
    pub fn kid(&self, buf: &[u8], i: usize) -> u64 {
        let at = self.tail_at() + i * 8;
        word(&buf[at..at + 8])
    }

    /// The next leaf of the leaf bytes `buf`.
    pub fn next(&self, buf: &[u8]) -> u64 {
        word(&buf[8..16])
    }
}

fn kind_name(leaf: bool) -> &'static str {
    if leaf {
        "leaf"
    } else {
        "inner"
    }
}

/// The little-endian word in an 8-byte slice.
pub(crate) fn word(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[..8]);
    u64::from_le_bytes(w)
}

/// A node decoded for editing: its slots as packed bytes, so inserting or removing
/// one is a splice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Node {
    /// A leaf (values and a next link) or an inner node (children).
    pub leaf: bool,
    /// Leaves: the next leaf (0: the last).
    pub next: u64,
    /// `n` key slots.
    pub keys: Vec<u8>,
    /// Leaves: `n` value slots.
    pub vals: Vec<u8>,
    /// Inner nodes: `n + 1` children.
    pub kids: Vec<u64>,
}

impl Node {
    /// An empty leaf.
    pub fn leaf() -> Node {
        Node {
            leaf: true,
            next: 0,
            keys: Vec::new(),
            vals: Vec::new(),
            kids: Vec::new(),
        }
    }

    /// An empty inner node.
    pub fn inner() -> Node {
        Node {
            leaf: false,
            ..Node::leaf()
        }
    }

    /// Keys held.
    pub fn n(&self, l: &Layout) -> usize {
        self.keys.len() / l.ks.max(1)
    }

    /// Key slot `i`.
    pub fn key<'a>(&'a self, l: &Layout, i: usize) -> &'a [u8] {
        &self.keys[i * l.ks..(i + 1) * l.ks]
    }

    /// Value slot `i`.
    pub fn val<'a>(&'a self, l: &Layout, i: usize) -> &'a [u8] {
        &self.vals[i * l.vs..(i + 1) * l.vs]
    }

    /// Inserts key slot `k` at `i`.
    pub fn insert_key(&mut self, l: &Layout, i: usize, k: &[u8]) {
        let at = i * l.ks;
        self.keys.splice(at..at, k.iter().copied());
    }

    /// Inserts value slot `v` at `i`.
    pub fn insert_val(&mut self, l: &Layout, i: usize, v: &[u8]) {
        let at = i * l.vs;
        self.vals.splice(at..at, v.iter().copied());
    }

    /// Removes and returns key slot `i`.
    pub fn remove_key(&mut self, l: &Layout, i: usize) -> Vec<u8> {
        self.keys.drain(i * l.ks..(i + 1) * l.ks).collect()
    }

    /// Removes and returns value slot `i`.
    pub fn remove_val(&mut self, l: &Layout, i: usize) -> Vec<u8> {
        self.vals.drain(i * l.vs..(i + 1) * l.vs).collect()
    }

    /// Replaces key slot `i`, returning the old one.
    pub fn set_key(&mut self, l: &Layout, i: usize, k: &[u8]) -> Vec<u8> {
        let slot = &mut self.keys[i * l.ks..(i + 1) * l.ks];
        let old = slot.to_vec();
        slot.copy_from_slice(k);
        old
    }

    /// Splits off the keys (and values or children) from key `m` on: a leaf gives
    /// keys `m..`, an inner node keys `m..` and children `m + 1..` (its key `m` is
    /// the caller's to move up).
    pub fn split_off(&mut self, l: &Layout, m: usize) -> Node {
        let keys = self.keys.split_off(m * l.ks);
        if self.leaf {
            Node {
                leaf: true,
                next: self.next,
                keys,
                vals: self.vals.split_off(m * l.vs),
                kids: Vec::new(),
            }
        } else {
            Node {
                leaf: false,
                next: 0,
                keys,
                vals: Vec::new(),
                kids: self.kids.split_off(m + 1),
            }
        }
    }

    /// The node's bytes on media.
    pub fn encode(&self, l: &Layout) -> Vec<u8> {
        let mut buf = vec![0u8; l.node_bytes() as usize];
        let kind = if self.leaf { KIND_LEAF } else { KIND_INNER };
        let first = self.n(l) as u64 | kind << 16 | NODE_MAGIC << 32;
        buf[..8].copy_from_slice(&first.to_le_bytes());
        buf[8..16].copy_from_slice(&self.next.to_le_bytes());
        buf[NODE_HEAD..NODE_HEAD + self.keys.len()].copy_from_slice(&self.keys);
        let tail = l.tail_at();
        if self.leaf {
            buf[tail..tail + self.vals.len()].copy_from_slice(&self.vals);
        } else {
            for (i, k) in self.kids.iter().enumerate() {
                buf[tail + i * 8..tail + i * 8 + 8].copy_from_slice(&k.to_le_bytes());
            }
        }
        buf
    }

    /// Decodes the node bytes `buf` of the node at `at`, which must be a leaf iff
    /// `leaf` (its level says which).
    pub fn decode(l: &Layout, buf: &[u8], at: u64, leaf: bool) -> Result<Node> {
        let n = l.check_word(word(buf), leaf, at)?;
        let keys = buf[NODE_HEAD..NODE_HEAD + n * l.ks].to_vec();
        let tail = l.tail_at();
        if leaf {
            Ok(Node {
                leaf,
                next: l.next(buf),
                keys,
                vals: buf[tail..tail + n * l.vs].to_vec(),
                kids: Vec::new(),
            })
        } else {
            let kids = (0..=n).map(|i| l.kid(buf, i)).collect::<Vec<_>>();
            if kids.contains(&0) {
                return Err(corrupt(WHAT, format!("node {at:#x} has a null child")));
            }
            Ok(Node {
                leaf,
                next: 0,
                keys,
                vals: Vec::new(),
                kids,
            })
        }
    }

    /// Reads and decodes the node at `at` from `m`.
    pub fn load(m: &(impl Media + ?Sized), l: &Layout, at: u64, leaf: bool) -> Result<Node> {
        if at == 0 {
            return Err(corrupt(WHAT, "a null node"));
        }
        let mut buf = vec![0u8; l.node_bytes() as usize];
        m.read_into(at, &mut buf)?;
        Node::decode(l, &buf, at, leaf)
    }
}

/// The header's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Head {
    /// Entries.
    pub len: u64,
    /// The root node.
    pub root: u64,
    /// Levels (1: the root is a leaf).
    pub height: u64,
    /// The leftmost leaf, where iteration starts.
    pub first: u64,
}

impl Head {
    /// Reads the header at `at` from `m`, checking what a walk relies on.
    pub fn read(m: &(impl Media + ?Sized), at: u64) -> Result<Head> {
        let mut b = [0u8; 32];
        m.read_into(at + LEN_AT, &mut b)?;
        let h = Head {
            len: word(&b[0..8]),
            root: word(&b[8..16]),
            height: word(&b[16..24]),
            first: word(&b[24..32]),
        };
        if h.root == 0 || h.first == 0 || h.height == 0 || h.height > MAX_HEIGHT {
            return Err(corrupt(WHAT, format!("header {at:#x}: {h:?}")));
        }
        Ok(h)
    }

    /// The header's words as `(offset from the header, value)`.
    pub fn words(&self) -> [(u64, u64); 4] {
        [
            (LEN_AT, self.len),
            (ROOT_AT, self.root),
            (HEIGHT_AT, self.height),
            (FIRST_AT, self.first),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_round_trips_and_fits_its_block() {
        let l = Layout {
            ks: 8,
            vs: 8,
            order: 16,
        };
        assert_eq!(l.node_bytes(), 16 + 128 + 136);
        let mut n = Node::leaf();
        for i in 0..3u64 {
            n.insert_key(&l, i as usize, &i.to_le_bytes());
            n.insert_val(&l, i as usize, &(i * 10).to_le_bytes());
        }
        n.next = 0x1000;
        let buf = n.encode(&l);
        assert_eq!(Node::decode(&l, &buf, 64, true).expect("a leaf"), n);
        assert!(
            Node::decode(&l, &buf, 64, false).is_err(),
            "a leaf is no inner node"
        );
        let mut inner = Node::inner();
        inner.insert_key(&l, 0, &5u64.to_le_bytes());
        inner.kids = vec![0x40, 0x80];
        let buf = inner.encode(&l);
        assert_eq!(Node::decode(&l, &buf, 64, false).expect("inner"), inner);
    }
}
