//! One operation's edits, staged in DRAM and written at its end: the nodes it
//! read, changed, allocated or freed, and the header words. Staging lets the
//! operation log every old node it changes with one [`Tx::add_ranges`] (one persist
//! barrier in undo mode) before writing any of them, and write each node once even
//! when a split or a merge touches it twice.

use pmem_core::tx::{Hint, Tx};
use pmem_core::PPtr;

use super::node::{Head, Layout, Node, MAX_HEIGHT, WHAT};
use crate::element::{Element, OrdElement};
use crate::error::corrupt;
use crate::Result;

/// How the writes of an operation are logged: the hint for a write of `len`
/// bytes.
pub(crate) type HintFor<'a> = &'a dyn Fn(u64) -> Hint;

/// The default: word records for header words, object records for nodes.
pub(crate) fn hybrid(len: u64) -> Hint {
    if len <= 8 {
        Hint::Word
    } else {
        Hint::Object
    }
}

/// A staged node.
struct Staged {
    at: u64,
    node: Node,
    /// Changed (written at the end).
    dirty: bool,
    /// Allocated by this operation (its writes need no undo record).
    fresh: bool,
}

/// The operation in progress: the transaction, the tree's layout and header, and
/// the staged nodes.
pub(crate) struct Work<'t, 'l> {
    pub tx: &'t mut Tx<'l>,
    pub l: Layout,
    header: u64,
    pub head: Head,
    old_head: Head,
    staged: Vec<Staged>,
}

impl<'t, 'l> Work<'t, 'l> {
    /// Starts an operation on the tree whose header is at `header`.
    pub fn new(tx: &'t mut Tx<'l>, l: Layout, header: u64) -> Result<Work<'t, 'l>> {
        let head = Head::read(&*tx, header)?;
        Ok(Work {
            tx,
            l,
            header,
            head,
            old_head: head,
            staged: Vec::new(),
        })
    }

    fn find(&self, at: u64) -> Option<usize> {
        self.staged.iter().position(|s| s.at == at)
    }

    /// The node at `at` (a leaf iff `leaf`), as this operation left it.
    pub fn load(&mut self, at: u64, leaf: bool) -> Result<Node> {
        if let Some(i) = self.find(at) {
            let node = &self.staged[i].node;
            if node.leaf != leaf {
                return Err(corrupt(
                    WHAT,
                    format!("node {at:#x} is reached at two levels"),
                ));
            }
            return Ok(node.clone());
        }
        let node = Node::load(&*self.tx, &self.l, at, leaf)?;
        self.staged.push(Staged {
            at,
            node: node.clone(),
            dirty: false,
            fresh: false,
        });
        Ok(node)
    }

    /// Stages `node` as the new contents of `at`.
    pub fn store(&mut self, at: u64, node: Node) {
        match self.find(at) {
            Some(i) => {
                self.staged[i].node = node;
                self.staged[i].dirty = true;
            }
            None => self.staged.push(Staged {
                at,
                node,
                dirty: true,
                fresh: false,
            }),
        }
    }

    /// Allocates a node block holding `node`.
    pub fn alloc(&mut self, node: Node) -> Result<u64> {
        // Uninitialised: the node is written whole at the end.
        let at = self.tx.alloc_uninit(self.l.node_bytes())?.offset();
        self.staged.push(Staged {
            at,
            node,
            dirty: true,
            fresh: true,
        });
        Ok(at)
    }

    /// Frees the node block `at` at the commit (its contents are the caller's to
    /// have moved or released).
    pub fn free(&mut self, at: u64) -> Result<()> {
        if let Some(i) = self.find(at) {
            self.staged.swap_remove(i);
        }
        Ok(self.tx.free(PPtr::from_offset(at), self.l.node_bytes())?)
    }

    /// Adds a level (a new root), failing at [`MAX_HEIGHT`].
    pub fn grow(&mut self, root: u64) -> Result<()> {
        if self.head.height >= MAX_HEIGHT {
            return Err(corrupt(WHAT, "the tree would exceed its height bound"));
        }
        self.head.height += 1;
        self.head.root = root;
        Ok(())
    }

    /// A key slot of its own holding the key in `slot` (a separator's copy: a
    /// byte string gets a block of its own).
    pub fn dup_key<K: OrdElement>(&mut self, slot: &[u8]) -> Result<Vec<u8>> {
        let mut owned = Vec::new();
        K::blocks(slot, &mut owned);
        if owned.is_empty() {
            return Ok(slot.to_vec());
        }
        let key = K::get(&*self.tx, slot)?;
        let mut out = vec![0u8; self.l.ks];
        K::put(self.tx, K::out_arg(&key), &mut out)?;
        Ok(out)
    }

    /// Frees what the key slot `slot` owns.
    pub fn release_key<K: Element>(&mut self, slot: &[u8]) -> Result<()> {
        K::release(self.tx, slot)
    }

    /// Writes every changed node and header word: first logs the old bytes of all
    /// of them at once, then writes them, each with the hint `hint_for` gives.
    pub fn finish(self, hint_for: HintFor<'_>) -> Result<()> {
        let Work {
            tx,
            l,
            header,
            head,
            old_head,
            staged,
        } = self;
        let size = l.node_bytes();
        let mut writes: Vec<(u64, Vec<u8>, bool)> = staged
            .iter()
            .filter(|s| s.dirty)
            .map(|s| (s.at, s.node.encode(&l), s.fresh))
            .collect();
        for ((off, new), (_, old)) in head.words().into_iter().zip(old_head.words()) {
            if new != old {
                writes.push((header + off, new.to_le_bytes().to_vec(), false));
            }
        }
        let ranges: Vec<_> = writes
            .iter()
            .filter(|(_, _, fresh)| !fresh)
            .map(|(at, b, _)| (*at, b.len() as u64, hint_for(b.len() as u64)))
            .collect();
        tx.add_ranges(&ranges)?;
        for (at, bytes, _) in &writes {
            debug_assert!(bytes.len() as u64 == 8 || bytes.len() as u64 == size);
            tx.set_hint(hint_for(bytes.len() as u64));
            tx.write_bytes(*at, bytes)?;
        }
        Ok(())
    }
}
