//! Removal with rebalancing: take the key out of its leaf; then, climbing the
//! path, a node left with fewer than `order / 2` keys borrows one from a sibling
//! that can spare it, or else merges with a sibling (the right one into the left,
//! so the leaf chain only loses a link); a root left with one child gives way to
//! it. All of it is staged in a [`Work`] and commits as one transaction.

use super::insert::descend;
use super::node::{Node, WHAT};
use super::search;
use super::work::Work;
use crate::element::{Element, OrdElement};
use crate::error::corrupt;
use crate::Result;

/// Removes `key`; returns its value if it was there.
pub(crate) fn remove<K: OrdElement, V: Element>(
    w: &mut Work<'_, '_>,
    key: &K::Arg,
) -> Result<Option<V::Out>> {
    let l = w.l;
    let (mut path, leaf_at, mut leaf) = descend::<K>(w, key)?;
    let i = match search::find::<K>(&*w.tx, leaf.n(&l), |i| leaf.key(&l, i), key)? {
        Ok(i) => i,
        Err(_) => return Ok(None),
    };
    let kslot = leaf.remove_key(&l, i);
    let vslot = leaf.remove_val(&l, i);
    let out = V::get(&*w.tx, &vslot)?;
    K::release(w.tx, &kslot)?;
    V::release(w.tx, &vslot)?;
    w.head.len = w.head.len.saturating_sub(1);
    let mut underfull = leaf.n(&l) < l.min();
    w.store(leaf_at, leaf);
    let mut child_at = leaf_at;
    let mut child_leaf = true;
    while underfull {
        let Some((parent_at, idx)) = path.pop() else {
            break; // the root may hold fewer
        };
        underfull = rebalance::<K>(w, parent_at, idx, child_at, child_leaf)?;
        child_at = parent_at;
        child_leaf = false;
    }
    // A root inner node left without keys gives way to its only child.
    if w.head.height > 1 {
        let root = w.load(w.head.root, false)?;
        if root.n(&l) == 0 {
            let old = w.head.root;
            w.head.root = root.kids[0];
            w.head.height -= 1;
            w.free(old)?;
        }
    }
    Ok(Some(out))
}

/// Child `idx` (at `child_at`, a leaf iff `leaf`) of the inner node `parent_at`
/// has too few keys: borrows from a sibling or merges with one. Returns whether
/// the parent is left with too few.
fn rebalance<K: OrdElement>(
    w: &mut Work<'_, '_>,
    parent_at: u64,
    idx: usize,
    child_at: u64,
    leaf: bool,
) -> Result<bool> {
    let l = w.l;
    let mut parent = w.load(parent_at, false)?;
    if parent.n(&l) == 0 || idx > parent.n(&l) || parent.kids[idx] != child_at {
        return Err(corrupt(
            WHAT,
            format!("inner node {parent_at:#x} has no sibling for child {idx}"),
        ));
    }
    let child = w.load(child_at, leaf)?;
    if idx > 0 {
        let left_at = parent.kids[idx - 1];
        let left = w.load(left_at, leaf)?;
        if left.n(&l) > l.min() {
            borrow_left::<K>(w, &mut parent, idx, left_at, left, child_at, child)?;
            w.store(parent_at, parent);
            return Ok(false);
        }
    }
    if idx < parent.n(&l) {
        let right_at = parent.kids[idx + 1];
        let right = w.load(right_at, leaf)?;
        if right.n(&l) > l.min() {
            borrow_right::<K>(w, &mut parent, idx, child_at, child, right_at, right)?;
            w.store(parent_at, parent);
            return Ok(false);
        }
        merge::<K>(w, &mut parent, idx, child_at, child, right_at, right)?;
    } else {
        let left_at = parent.kids[idx - 1];
        let left = w.load(left_at, leaf)?;
        merge::<K>(w, &mut parent, idx - 1, left_at, left, child_at, child)?;
    }
    let under = parent.n(&l) < l.min();
    w.store(parent_at, parent);
    Ok(under)
}

/// Moves the left sibling's last entry to the front of the child. A leaf's
/// separator becomes (a copy of) the child's new first key; an inner node's
/// separator comes down and the sibling's last key goes up in its place.
fn borrow_left<K: OrdElement>(
    w: &mut Work<'_, '_>,
    parent: &mut Node,
    idx: usize,
    left_at: u64,
    mut left: Node,
    child_at: u64,
    mut child: Node,
) -> Result<()> {
    let l = w.l;
    let last = left.n(&l) - 1;
    let k = left.remove_key(&l, last);
    if child.leaf {
        let v = left.remove_val(&l, last);
        child.insert_key(&l, 0, &k);
        child.insert_val(&l, 0, &v);
        let sep = w.dup_key::<K>(&k)?;
        let old = parent.set_key(&l, idx - 1, &sep);
        w.release_key::<K>(&old)?;
    } else {
        let kid = left
            .kids
            .pop()
            .ok_or_else(|| corrupt(WHAT, "an inner node without children"))?;
        let down = parent.set_key(&l, idx - 1, &k);
        child.insert_key(&l, 0, &down);
        child.kids.insert(0, kid);
    }
    w.store(left_at, left);
    w.store(child_at, child);
    Ok(())
}

/// Moves the right sibling's first entry to the end of the child, the mirror of
/// [`borrow_left`].
fn borrow_right<K: OrdElement>(
    w: &mut Work<'_, '_>,
    parent: &mut Node,
    idx: usize,
    child_at: u64,
    mut child: Node,
    right_at: u64,
    mut right: Node,
) -> Result<()> {
    let l = w.l;
    let k = right.remove_key(&l, 0);
    let end = child.n(&l);
    if child.leaf {
        let v = right.remove_val(&l, 0);
        child.insert_key(&l, end, &k);
        child.insert_val(&l, end, &v);
        let sep = w.dup_key::<K>(right.key(&l, 0))?;
        let old = parent.set_key(&l, idx, &sep);
        w.release_key::<K>(&old)?;
    } else {
        let kid = right.kids.remove(0);
        let down = parent.set_key(&l, idx, &k);
        child.insert_key(&l, end, &down);
        child.kids.push(kid);
    }
    w.store(child_at, child);
    w.store(right_at, right);
    Ok(())
}

/// Merges child `idx + 1` of `parent` (at `right_at`) into child `idx` (at
/// `left_at`) and frees it: separator `idx` leaves the parent (released for
/// leaves, whose separators are copies; moved down between the halves for inner
/// nodes).
fn merge<K: OrdElement>(
    w: &mut Work<'_, '_>,
    parent: &mut Node,
    idx: usize,
    left_at: u64,
    mut left: Node,
    right_at: u64,
    right: Node,
) -> Result<()> {
    let l = w.l;
    let sep = parent.remove_key(&l, idx);
    parent.kids.remove(idx + 1);
    if left.leaf {
        w.release_key::<K>(&sep)?;
        left.next = right.next;
        left.vals.extend_from_slice(&right.vals);
    } else {
        left.keys.extend_from_slice(&sep);
        left.kids.extend_from_slice(&right.kids);
    }
    left.keys.extend_from_slice(&right.keys);
    w.store(left_at, left);
    w.free(right_at)
}
