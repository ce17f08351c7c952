//! Whole-tree walks: the invariant check the tests run after every recovery, the
//! list of blocks for the exact leak check, and the teardown that frees them.
//!
//! A walk visits each node once (a node reached twice is damage, so a cycle on
//! media ends in [`crate::Error::Corrupt`], never an endless loop) and never goes
//! deeper than the header's height.

use std::cmp::Ordering;
use std::collections::HashSet;

use pmem_core::tx::Tx;
use pmem_core::PPtr;

use super::node::{Head, Layout, Node, HEADER_BYTES, WHAT};
use crate::element::{Element, Media, OrdElement};
use crate::error::corrupt;
use crate::Result;

/// A node as a walk found it: its offset, contents and level (1: a leaf).
pub(crate) struct Visited {
    pub at: u64,
    pub node: Node,
    pub level: u64,
}

/// Every node of the tree, depth first, children left to right (so the leaves
/// come in key order).
pub(crate) fn walk(m: &(impl Media + ?Sized), l: &Layout, head: &Head) -> Result<Vec<Visited>> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let mut stack = vec![(head.root, head.height)];
    while let Some((at, level)) = stack.pop() {
        if !seen.insert(at) {
            return Err(corrupt(WHAT, format!("node {at:#x} is reached twice")));
        }
        let node = Node::load(m, l, at, level == 1)?;
        if level > 1 {
            stack.extend(node.kids.iter().rev().map(|&k| (k, level - 1)));
        }
        out.push(Visited { at, node, level });
    }
    Ok(out)
}

/// How the key slot `a` compares with the key slot `b`.
fn cmp_slots<K: OrdElement>(m: &(impl Media + ?Sized), a: &[u8], b: &[u8]) -> Result<Ordering> {
    let b = K::get(m, b)?;
    K::cmp_slot(m, a, K::out_arg(&b))
}

/// Checks every invariant of the tree whose header is at `header`: node kinds by
/// level (so all leaves are at one depth), key counts within the order and above
/// half of it except at the root, keys ascending within each node and within the
/// bounds their separators set, the leaf chain in key order from the first leaf,
/// every element readable, and the entry count. Returns the entry count.
pub(crate) fn check<K: OrdElement, V: Element>(
    m: &(impl Media + ?Sized),
    l: &Layout,
    header: u64,
) -> Result<u64> {
    let head = Head::read(m, header)?;
    let nodes = walk(m, l, &head)?;
    // Each node's bounds: [lo, hi) as key slots (None: unbounded).
    let mut bounds = std::collections::HashMap::new();
    bounds.insert(head.root, (None::<Vec<u8>>, None::<Vec<u8>>));
    let mut leaves = Vec::new();
    let mut count = 0u64;
    for v in &nodes {
        let n = v.node.n(l);
        let bad = |what: String| corrupt(WHAT, format!("node {:#x}: {what}", v.at));
        if v.at != head.root && n < l.min() {
            return Err(bad(format!("{n} keys, fewer than {}", l.min())));
        }
        if v.level > 1 && n == 0 {
            return Err(bad("an inner node without keys".into()));
        }
        let (lo, hi) = bounds.remove(&v.at).unwrap_or((None, None));
        for i in 0..n {
            let k = v.node.key(l, i);
            K::get(m, k)?;
            if i > 0 && cmp_slots::<K>(m, v.node.key(l, i - 1), k)? != Ordering::Less {
                return Err(bad(format!("keys {} and {i} out of order", i - 1)));
            }
            if let Some(lo) = &lo {
                if cmp_slots::<K>(m, k, lo)? == Ordering::Less {
                    return Err(bad(format!("key {i} below its separator")));
                }
            }
            if let Some(hi) = &hi {
                if cmp_slots::<K>(m, k, hi)? != Ordering::Less {
                    return Err(bad(format!("key {i} at or above its separator")));
                }
            }
        }
        if v.level == 1 {
            for i in 0..n {
                V::get(m, v.node.val(l, i))?;
            }
            count += n as u64;
            leaves.push((v.at, v.node.next));
        } else {
            for (i, &kid) in v.node.kids.iter().enumerate() {
                let klo = if i == 0 {
                    lo.clone()
                } else {
                    Some(v.node.key(l, i - 1).to_vec())
                };
                let khi = if i == n {
                    hi.clone()
                } else {
                    Some(v.node.key(l, i).to_vec())
                };
                bounds.insert(kid, (klo, khi));
            }
        }
    }
    if leaves.first().map(|&(at, _)| at) != Some(head.first) {
        return Err(corrupt(
            WHAT,
            format!("the first leaf is not {:#x}", head.first),
        ));
    }
    for (i, &(at, next)) in leaves.iter().enumerate() {
        let want = leaves.get(i + 1).map_or(0, |&(a, _)| a);
        if next != want {
            return Err(corrupt(
                WHAT,
                format!("leaf {at:#x} links to {next:#x}, the next leaf is {want:#x}"),
            ));
        }
    }
    if count != head.len {
        return Err(corrupt(
            WHAT,
            format!("{count} entries, the header says {}", head.len),
        ));
    }
    Ok(count)
}

/// Every block of the tree: its header, nodes, and what their slots own.
pub(crate) fn blocks<K: Element, V: Element>(
    m: &(impl Media + ?Sized),
    l: &Layout,
    header: u64,
) -> Result<Vec<u64>> {
    let head = Head::read(m, header)?;
    let mut out = vec![header];
    for v in walk(m, l, &head)? {
        out.push(v.at);
        let n = v.node.n(l);
        for i in 0..n {
            K::blocks(v.node.key(l, i), &mut out);
            if v.node.leaf {
                V::blocks(v.node.val(l, i), &mut out);
            }
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Frees every block of the tree at the commit of `tx`.
pub(crate) fn destroy<K: Element, V: Element>(
    tx: &mut Tx<'_>,
    l: &Layout,
    header: u64,
) -> Result<()> {
    let head = Head::read(&*tx, header)?;
    for v in walk(&*tx, l, &head)? {
        for i in 0..v.node.n(l) {
            K::release(tx, v.node.key(l, i))?;
            if v.node.leaf {
                V::release(tx, v.node.val(l, i))?;
            }
        }
        tx.free(PPtr::from_offset(v.at), l.node_bytes())?;
    }
    Ok(tx.free(PPtr::from_offset(header), HEADER_BYTES)?)
}
