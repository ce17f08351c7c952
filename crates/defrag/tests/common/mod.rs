//! The list node the heap's tests share.

use pmem_core::PPtr;
use pmem_defrag::{persistent_type, DefragError, DefragTx};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// A singly linked list node.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct Node {
    pub value: u64,
    pub next: PPtr<Node>,
}
persistent_type!(Node, id = 1, pointers = [next: Node]);

/// Pushes a node holding `value` on the list under `root`; returns it.
pub fn push(t: &mut DefragTx<'_, '_>, root: &str, value: u64) -> Result<PPtr<Node>, DefragError> {
    let next = t.root::<Node>(root)?;
    let n = t.alloc::<Node>()?;
    t.write(n, &Node { value, next })?;
    t.set_root(root, n)?;
    Ok(n)
}
