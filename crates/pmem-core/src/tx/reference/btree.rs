//! A persistent B+-tree of `u64` keys and values on [`crate::tx`].
//!
//! Layout, every part an allocator block: a header (32 B: root, entry count, order)
//! and nodes of 280 B (`leaf` flag, key count, 16 keys, 17 pointers). In a leaf,
//! `ptrs[i]` is the value of `keys[i]`; in an inner node, `ptrs[0..=n]` are children
//! and `keys[i]` separates `ptrs[i]` (keys below it) from `ptrs[i + 1]` (keys at or
//! above it). The *order* (most keys in a node, 3 to 16) is chosen at creation, so a
//! crash suite can split often.
//!
//! An insert descends from the root splitting every full node on its way (so a split
//! never has to climb back up), all in one transaction; each changed node is
//! written whole, so under [`Logging::Hybrid`] it is one object record, and the
//! entry count one word record. A removal deletes the key from its leaf and does
//! not rebalance: leaves may become sparse or empty, separators stay valid bounds,
//! and lookups stay correct (documented, not a bug: it keeps removal one small
//! transaction).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::Logging;
use crate::tx::{Tx, TxError, TxHeap, TxOptions, TxStats};
use crate::PPtr;

/// Largest order (keys per node) the node layout holds.
pub const MAX_ORDER: u64 = 16;
const CAP: usize = MAX_ORDER as usize;

#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
struct Header {
    root: u64,
    len: u64,
    order: u64,
    reserved: u64,
}
const HEADER_BYTES: u64 = std::mem::size_of::<Header>() as u64;
const LEN: u64 = 8;

#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
struct Node {
    leaf: u64,
    n: u64,
    keys: [u64; CAP],
    ptrs: [u64; CAP + 1],
}
const NODE_BYTES: u64 = std::mem::size_of::<Node>() as u64;
const _: () = assert!(NODE_BYTES == 280);

impl Node {
    fn empty(leaf: bool) -> Node {
        Node {
            leaf: u64::from(leaf),
            n: 0,
            keys: [0; CAP],
            ptrs: [0; CAP + 1],
        }
    }

    fn len(&self) -> usize {
        (self.n as usize).min(CAP)
    }

    /// How many keys are at or below `key`: the child to descend into.
    fn child_index(&self, key: u64) -> usize {
        self.keys[..self.len()]
            .iter()
            .take_while(|&&k| k <= key)
            .count()
    }
}

fn corrupt(what: String) -> TxError {
    TxError::Corrupt(format!("b-tree: {what}"))
}

/// What a walk of the tree found: the pairs in key order, and the nodes' offsets.
struct Walk {
    pairs: Vec<(u64, u64)>,
    nodes: Vec<u64>,
}

/// A handle on a tree in a [`TxHeap`]: the offset of its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BTree {
    header: PPtr<u8>,
}

impl BTree {
    /// A new empty tree whose nodes hold up to `order` keys (3 to [`MAX_ORDER`]).
    pub fn create(heap: &mut TxHeap, order: u64) -> Result<BTree, TxError> {
        if !(3..=MAX_ORDER).contains(&order) {
            return Err(TxError::Aborted(format!(
                "order {order} is not in 3..={MAX_ORDER}"
            )));
        }
        heap.transaction(|tx| {
            let header = tx.alloc(HEADER_BYTES)?;
            let root = tx.alloc(NODE_BYTES)?;
            tx.write(root.cast::<Node>(), &Node::empty(true))?;
            let h = Header {
                root: root.offset(),
                len: 0,
                order,
                reserved: 0,
            };
            tx.write(header.cast::<Header>(), &h)?;
            Ok(BTree { header })
        })
    }

    /// The tree whose header is at `header` (after reopening the heap).
    pub fn at(header: PPtr<u8>) -> BTree {
        BTree { header }
    }

    /// The header's offset (store it in your root to find the tree again).
    pub fn header(&self) -> PPtr<u8> {
        self.header
    }

    /// Inserts or replaces `key`. Returns whether it replaced a value, and what the
    /// transaction cost.
    pub fn insert(
        &self,
        heap: &mut TxHeap,
        key: u64,
        value: u64,
        logging: Logging,
        opts: impl Into<TxOptions>,
    ) -> Result<(bool, TxStats), TxError> {
        let header = self.header;
        heap.transaction_stats(opts.into(), |tx| {
            let mut h: Header = tx.read(header.cast())?;
            let order = h.order.clamp(3, MAX_ORDER) as usize;
            let root: Node = tx.read(PPtr::from_offset(h.root))?;
            if root.len() >= order {
                let mut new_root = Node::empty(false);
                new_root.ptrs[0] = h.root;
                let at = tx.alloc(NODE_BYTES)?.offset();
                write_node(tx, logging, at, &new_root)?;
                split_child(tx, logging, at, 0)?;
                h.root = at;
                tx.set_hint(logging.hint_for(8));
                tx.write(header.cast::<u64>(), &at)?;
            }
            let mut at = h.root;
            // Bounded by the tree's height, itself bounded by the entry count.
            for _ in 0..=h.len + 1 {
                let node: Node = tx.read(PPtr::from_offset(at))?;
                if node.leaf != 0 {
                    return insert_in_leaf(tx, logging, header, &h, at, node, key, value);
                }
                let mut i = node.child_index(key);
                let child: Node = tx.read(PPtr::from_offset(node.ptrs[i]))?;
                if child.len() >= order {
                    split_child(tx, logging, at, i)?;
                    let node: Node = tx.read(PPtr::from_offset(at))?;
                    if key >= node.keys[i] {
                        i += 1;
                    }
                    at = node.ptrs[i];
                } else {
                    at = node.ptrs[i];
                }
            }
            Err(corrupt("no leaf reached".into()))
        })
    }

    /// Removes `key`. Returns whether it was present, and what the transaction cost.
    pub fn remove(
        &self,
        heap: &mut TxHeap,
        key: u64,
        logging: Logging,
        opts: impl Into<TxOptions>,
    ) -> Result<(bool, TxStats), TxError> {
        let header = self.header;
        heap.transaction_stats(opts.into(), |tx| {
            let h: Header = tx.read(header.cast())?;
            let mut at = h.root;
            for _ in 0..=h.len + 1 {
                let mut node: Node = tx.read(PPtr::from_offset(at))?;
                if node.leaf == 0 {
                    at = node.ptrs[node.child_index(key)];
                    continue;
                }
                let n = node.len();
                let Some(pos) = node.keys[..n].iter().position(|&k| k == key) else {
                    return Ok(false);
                };
                node.keys.copy_within(pos + 1..n, pos);
                node.ptrs.copy_within(pos + 1..n, pos);
                node.n -= 1;
                write_node(tx, logging, at, &node)?;
                tx.set_hint(logging.hint_for(8));
                tx.write(
                    PPtr::<u64>::from_offset(header.offset() + LEN),
                    &(h.len - 1),
                )?;
                return Ok(true);
            }
            Err(corrupt("no leaf reached".into()))
        })
    }

    /// The value of `key`, if present.
    pub fn get(&self, heap: &TxHeap, key: u64) -> Result<Option<u64>, TxError> {
        let pool = heap.pool();
        let h: Header = pool.read(self.header.cast())?;
        let mut at = h.root;
        for _ in 0..=h.len + 1 {
            let node: Node = pool.read(PPtr::from_offset(at))?;
            if node.leaf != 0 {
                let n = node.len();
                return Ok(node.keys[..n]
                    .iter()
                    .position(|&k| k == key)
                    .map(|i| node.ptrs[i]));
            }
            at = node.ptrs[node.child_index(key)];
        }
        Err(corrupt("no leaf reached".into()))
    }

    /// The number of entries.
    pub fn len(&self, heap: &TxHeap) -> Result<u64, TxError> {
        Ok(heap.pool().read(self.header.cast::<Header>())?.len)
    }

    /// Whether the tree is empty.
    pub fn is_empty(&self, heap: &TxHeap) -> Result<bool, TxError> {
        Ok(self.len(heap)? == 0)
    }

    /// Walks the whole tree and checks it (keys sorted within their bounds, leaves
    /// at one depth, node sizes within the order, the count matches); returns the
    /// pairs in key order. `TxError::Corrupt` names what is wrong.
    pub fn check(&self, heap: &TxHeap) -> Result<Vec<(u64, u64)>, TxError> {
        Ok(self.walk(heap)?.pairs)
    }

    /// Every allocator block the tree references (header and nodes), sorted.
    pub fn blocks(&self, heap: &TxHeap) -> Result<Vec<u64>, TxError> {
        let mut out = self.walk(heap)?.nodes;
        out.push(self.header.offset());
        out.sort_unstable();
        Ok(out)
    }

    /// The pairs in order and the nodes' offsets, checking every invariant.
    fn walk(&self, heap: &TxHeap) -> Result<Walk, TxError> {
        let pool = heap.pool();
        let h: Header = pool.read(self.header.cast())?;
        if !(3..=MAX_ORDER).contains(&h.order) {
            return Err(corrupt(format!("order {}", h.order)));
        }
        let mut pairs = Vec::new();
        let mut nodes = Vec::new();
        let mut leaf_depth = None;
        // (node, depth, low bound, high bound): keys in [low, high).
        let mut stack = vec![(h.root, 0u32, 0u64, None::<u64>)];
        while let Some((at, depth, lo, hi)) = stack.pop() {
            if nodes.len() as u64 > 2 * h.len + 2 + 64 {
                return Err(corrupt(
                    "more nodes than entries can need (a cycle?)".into(),
                ));
            }
            nodes.push(at);
            let node: Node = pool.read(PPtr::from_offset(at))?;
            let n = node.n as usize;
            if n > h.order as usize {
                return Err(corrupt(format!("node {at:#x} holds {n} keys")));
            }
            let keys = &node.keys[..n];
            let in_bounds = keys.iter().all(|&k| k >= lo && hi.is_none_or(|h| k < h));
            if !keys.windows(2).all(|w| w[0] < w[1]) || !in_bounds {
                return Err(corrupt(format!("node {at:#x} keys out of order or bounds")));
            }
            if node.leaf != 0 {
                if *leaf_depth.get_or_insert(depth) != depth {
                    return Err(corrupt("leaves at different depths".into()));
                }
                pairs.extend(keys.iter().zip(&node.ptrs[..n]).map(|(&k, &v)| (k, v)));
                continue;
            }
            // Children pushed in reverse, so they pop (and their keys come) in order.
            for i in (0..=n).rev() {
                let clo = if i == 0 { lo } else { keys[i - 1] };
                let chi = if i == n { hi } else { Some(keys[i]) };
                stack.push((node.ptrs[i], depth + 1, clo, chi));
            }
        }
        if pairs.len() as u64 != h.len {
            return Err(corrupt(format!(
                "{} keys but the count is {}",
                pairs.len(),
                h.len
            )));
        }
        Ok(Walk { pairs, nodes })
    }
}

fn write_node(tx: &mut Tx<'_>, logging: Logging, at: u64, node: &Node) -> Result<(), TxError> {
    tx.set_hint(logging.hint_for(NODE_BYTES));
    tx.write(PPtr::<Node>::from_offset(at), node)
}

/// Splits the full child `i` of the inner node at `parent_at`.
fn split_child(tx: &mut Tx<'_>, logging: Logging, parent_at: u64, i: usize) -> Result<(), TxError> {
    let mut parent: Node = tx.read(PPtr::from_offset(parent_at))?;
    let child_at = parent.ptrs[i];
    let mut child: Node = tx.read(PPtr::from_offset(child_at))?;
    let n = child.len();
    let mid = n / 2;
    let mut right = Node::empty(child.leaf != 0);
    let separator = if child.leaf != 0 {
        // Leaf: the right half keeps its keys; the separator is its first key.
        right.keys[..n - mid].copy_from_slice(&child.keys[mid..n]);
        right.ptrs[..n - mid].copy_from_slice(&child.ptrs[mid..n]);
        right.n = (n - mid) as u64;
        child.n = mid as u64;
        right.keys[0]
    } else {
        // Inner: the middle key moves up.
        right.keys[..n - mid - 1].copy_from_slice(&child.keys[mid + 1..n]);
        right.ptrs[..n - mid].copy_from_slice(&child.ptrs[mid + 1..=n]);
        right.n = (n - mid - 1) as u64;
        child.n = mid as u64;
        child.keys[mid]
    };
    let right_at = tx.alloc(NODE_BYTES)?.offset();
    write_node(tx, logging, right_at, &right)?;
    write_node(tx, logging, child_at, &child)?;
    let pn = parent.len();
    parent.keys.copy_within(i..pn, i + 1);
    parent.ptrs.copy_within(i + 1..=pn, i + 2);
    parent.keys[i] = separator;
    parent.ptrs[i + 1] = right_at;
    parent.n += 1;
    write_node(tx, logging, parent_at, &parent)
}

#[allow(clippy::too_many_arguments)]
fn insert_in_leaf(
    tx: &mut Tx<'_>,
    logging: Logging,
    header: PPtr<u8>,
    h: &Header,
    at: u64,
    mut node: Node,
    key: u64,
    value: u64,
) -> Result<bool, TxError> {
    let n = node.len();
    if let Some(pos) = node.keys[..n].iter().position(|&k| k == key) {
        node.ptrs[pos] = value;
        write_node(tx, logging, at, &node)?;
        return Ok(true);
    }
    if n >= CAP {
        return Err(corrupt(format!("leaf {at:#x} is full")));
    }
    let pos = node.keys[..n].iter().take_while(|&&k| k < key).count();
    node.keys.copy_within(pos..n, pos + 1);
    node.ptrs.copy_within(pos..n, pos + 1);
    node.keys[pos] = key;
    node.ptrs[pos] = value;
    node.n += 1;
    write_node(tx, logging, at, &node)?;
    tx.set_hint(logging.hint_for(8));
    tx.write(
        PPtr::<u64>::from_offset(header.offset() + LEN),
        &(h.len + 1),
    )?;
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tx::{LogMode, TxGeometry};
    use crate::{Pool, PoolOptions};
    use std::collections::BTreeMap;

    #[test]
    fn matches_a_btreemap_over_random_operations() {
        for order in [3u64, 4, 16] {
            let pool = Pool::anonymous(&PoolOptions::new("btree", 8 << 20)).expect("pool");
            let mut heap = TxHeap::create(pool, &TxGeometry::default(), 64).expect("heap");
            let t = BTree::create(&mut heap, order).expect("tree");
            let mut model = BTreeMap::new();
            let mut seed = order;
            for i in 0..3000u64 {
                let r = crate::splitmix64(&mut seed);
                let key = r % 500;
                let logging = [Logging::Word, Logging::Object, Logging::Hybrid][(i % 3) as usize];
                let mode = if i % 2 == 0 {
                    LogMode::Undo
                } else {
                    LogMode::Redo
                };
                if r % 5 < 3 {
                    let (replaced, _) = t.insert(&mut heap, key, r, logging, mode).expect("insert");
                    assert_eq!(replaced, model.insert(key, r).is_some());
                } else {
                    let (removed, _) = t.remove(&mut heap, key, logging, mode).expect("remove");
                    assert_eq!(removed, model.remove(&key).is_some());
                }
            }
            let pairs = t.check(&heap).expect("consistent");
            assert_eq!(
                pairs,
                model.clone().into_iter().collect::<Vec<_>>(),
                "order {order}"
            );
            for (&k, &v) in &model {
                assert_eq!(t.get(&heap, k).expect("get"), Some(v));
            }
            assert_eq!(t.get(&heap, 10_000).expect("get"), None);
            let live = heap.live_blocks().expect("enumerate");
            assert_eq!(
                live,
                t.blocks(&heap).expect("blocks"),
                "order {order}: no leak"
            );
        }
    }
}
