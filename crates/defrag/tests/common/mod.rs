//! The list node the heap's tests share.

use defrag::persistent_type;
use pmem_core::PPtr;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// A singly linked list node.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct Node {
    pub value: u64,
    pub next: PPtr<Node>,
}
persistent_type!(Node, id = 1, pointers = [next: Node]);
