//! Insertion: descend to the key's leaf, replace its value or add it, and split
//! every node that overflows on the way back up (a new root when the root splits).
//! All of it is staged in a [`Work`] and commits as the operation's one
//! transaction.

use super::node::Node;
use super::search;
use super::work::Work;
use crate::element::{Element, OrdElement};
use crate::Result;

/// The path from the root to a leaf: each inner node's offset and the child taken.
pub(crate) type Path = Vec<(u64, usize)>;

/// Descends from the root to the leaf that holds (or would hold) `key`; returns
/// the path, the leaf's offset and the leaf.
pub(crate) fn descend<K: OrdElement>(
    w: &mut Work<'_, '_>,
    key: &K::Arg,
) -> Result<(Path, u64, Node)> {
    let l = w.l;
    let mut path = Path::new();
    let mut at = w.head.root;
    // Bounded by the height (checked against MAX_HEIGHT when the header is read).
    for _ in 1..w.head.height {
        let node = w.load(at, false)?;
        let i = search::child::<K>(&*w.tx, node.n(&l), |i| node.key(&l, i), key)?;
        path.push((at, i));
        at = node.kids[i];
    }
    let leaf = w.load(at, true)?;
    Ok((path, at, leaf))
}

/// Inserts `key` → `value`; returns the old value if `key` was there.
pub(crate) fn insert<K: OrdElement, V: Element>(
    w: &mut Work<'_, '_>,
    key: &K::Arg,
    value: &V::Arg,
) -> Result<Option<V::Out>> {
    let l = w.l;
    let (mut path, leaf_at, mut leaf) = descend::<K>(w, key)?;
    let mut vslot = vec![0u8; l.vs];
    match search::find::<K>(&*w.tx, leaf.n(&l), |i| leaf.key(&l, i), key)? {
        Ok(i) => {
            // A replacement: the key's slot stays, the value's is rewritten.
            let old = leaf.val(&l, i).to_vec();
            let out = V::get(&*w.tx, &old)?;
            V::release(w.tx, &old)?;
            V::put(w.tx, value, &mut vslot)?;
            leaf.vals[i * l.vs..(i + 1) * l.vs].copy_from_slice(&vslot);
            w.store(leaf_at, leaf);
            return Ok(Some(out));
        }
        Err(i) => {
            let mut kslot = vec![0u8; l.ks];
            K::put(w.tx, key, &mut kslot)?;
            V::put(w.tx, value, &mut vslot)?;
            leaf.insert_key(&l, i, &kslot);
            leaf.insert_val(&l, i, &vslot);
        }
    }
    w.head.len += 1;
    if leaf.n(&l) <= l.order {
        w.store(leaf_at, leaf);
        return Ok(None);
    }
    // The leaf overflows: its upper half goes to a new leaf after it, whose first
    // key (copied) separates the two in the parent.
    let right = leaf.split_off(&l, leaf.n(&l).div_ceil(2));
    let mut sep = w.dup_key::<K>(right.key(&l, 0))?;
    let right_at = w.alloc(right)?;
    leaf.next = right_at;
    w.store(leaf_at, leaf);
    let mut new_at = right_at;
    let mut left_at = leaf_at;
    while let Some((at, i)) = path.pop() {
        let mut node = w.load(at, false)?;
        node.insert_key(&l, i, &sep);
        node.kids.insert(i + 1, new_at);
        if node.n(&l) <= l.order {
            w.store(at, node);
            return Ok(None);
        }
        // The inner node overflows: its middle key moves up, the keys and
        // children after it go to a new node.
        let mut upper = node.split_off(&l, node.n(&l) / 2);
        sep = upper.remove_key(&l, 0);
        w.store(at, node);
        new_at = w.alloc(upper)?;
        left_at = at;
    }
    // The root split: a new root above the two halves.
    let mut root = Node::inner();
    root.insert_key(&l, 0, &sep);
    root.kids = vec![left_at, new_at];
    let root_at = w.alloc(root)?;
    w.grow(root_at)?;
    Ok(None)
}
