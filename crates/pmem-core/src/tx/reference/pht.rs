//! A persistent chained hash table (the NVWA paper's PHT) on [`crate::tx`].
//!
//! Layout, every part an allocator block:
//!
//! | block | contents |
//! | --- | --- |
//! | header (32 B) | bucket count, entry count, offset of the bucket array, 0 |
//! | bucket array | one head offset (8 B) per bucket, 0 = empty |
//! | node (96 B) | next node, key length, value offset, value length, key (64 B) |
//! | value | the value's bytes (at least 8 B allocated) |
//!
//! An insert of a new key allocates the node and the value — writes into blocks the
//! transaction allocated are not logged at all — and then changes two logged words:
//! the bucket head and the entry count. Replacing a value allocates a new value block,
//! frees the old one at commit, and changes two words of the node. A removal unlinks
//! the node (one word: the bucket head or the previous node's link), decrements the
//! count and frees node and value at commit. Each operation is one transaction; its
//! [`Logging`] picks the hint per write.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::Logging;
#[cfg(doc)]
use crate::tx::LogMode;
use crate::tx::{Tx, TxError, TxHeap, TxOptions, TxStats};
use crate::PPtr;

/// Longest key, in bytes.
pub const MAX_KEY: usize = 64;
/// Longest value, in bytes (a bound on what `check` accepts from media).
pub const MAX_VALUE: u64 = 1 << 20;

#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
struct Header {
    buckets: u64,
    len: u64,
    table: u64,
    reserved: u64,
}
const HEADER_BYTES: u64 = std::mem::size_of::<Header>() as u64;

#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
struct Node {
    next: u64,
    key_len: u64,
    value: u64,
    value_len: u64,
    key: [u8; MAX_KEY],
}
const NODE_BYTES: u64 = std::mem::size_of::<Node>() as u64;
const _: () = assert!(NODE_BYTES == 96);

// Field offsets, for writing single words.
const NEXT: u64 = 0;
const VALUE: u64 = 16;
const LEN: u64 = 8;

/// A key and its value.
pub type Entry = (Vec<u8>, Vec<u8>);

/// What [`Pht::walk`] hands each entry: its node and value blocks, key and value.
type Visit<'a> = &'a mut dyn FnMut(&[u64; 2], Vec<u8>, Vec<u8>);

/// A handle on a table in a [`TxHeap`]: the offset of its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pht {
    header: PPtr<u8>,
}

fn corrupt(what: String) -> TxError {
    TxError::Corrupt(format!("hash table: {what}"))
}

/// The table's bucket hash, FNV-1a: small and deterministic across runs (the bucket
/// choice is on media). Public so a peer implementation places keys identically.
pub fn hash(key: &[u8]) -> u64 {
    key.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn value_block(len: usize) -> u64 {
    (len as u64).max(8)
}

impl Pht {
    /// A new empty table with `buckets` buckets (at least 1), in one transaction.
    pub fn create(heap: &mut TxHeap, buckets: u64) -> Result<Pht, TxError> {
        if buckets == 0 || buckets > 1 << 24 {
            return Err(TxError::Aborted(format!("invalid bucket count {buckets}")));
        }
        heap.transaction(|tx| {
            let header = tx.alloc(HEADER_BYTES)?;
            let table = tx.alloc(8 * buckets)?;
            let h = Header {
                buckets,
                len: 0,
                table: table.offset(),
                reserved: 0,
            };
            tx.write(header.cast::<Header>(), &h)?;
            Ok(Pht { header })
        })
    }

    /// The table whose header is at `header` (after reopening the heap).
    pub fn at(header: PPtr<u8>) -> Pht {
        Pht { header }
    }

    /// The header's offset (store it in your root to find the table again).
    pub fn header(&self) -> PPtr<u8> {
        self.header
    }

    /// Inserts or replaces `key` (at most [`MAX_KEY`] bytes). Returns whether it
    /// replaced a value, and what the transaction cost. `opts` gives the mode (a
    /// [`LogMode`] converts) and `log_fresh`; `logging` picks each range's hint.
    pub fn insert(
        &self,
        heap: &mut TxHeap,
        key: &[u8],
        value: &[u8],
        logging: Logging,
        opts: impl Into<TxOptions>,
    ) -> Result<(bool, TxStats), TxError> {
        if key.len() > MAX_KEY || value.len() as u64 > MAX_VALUE {
            return Err(TxError::Aborted(format!(
                "key of {} bytes or value of {} bytes is too long",
                key.len(),
                value.len()
            )));
        }
        let header = self.header;
        heap.transaction_stats(opts.into(), |tx| {
            let h: Header = tx.read(header.cast())?;
            let head_at = bucket_at(&h, key);
            let vlen = value.len() as u64;
            if let Some((node_at, _)) = find(tx, &h, head_at, key)? {
                let node: Node = tx.read(PPtr::from_offset(node_at))?;
                let fresh = tx.alloc(value_block(value.len()))?;
                // What the replacement changes, logged with one fence (the fresh
                // value only under `log_fresh`).
                tx.add_ranges(&[
                    (fresh.offset(), vlen, logging.hint_for(vlen)),
                    (node_at + VALUE, 16, logging.hint_for(16)),
                ])?;
                tx.write_bytes(fresh.offset(), value)?;
                tx.free(
                    PPtr::from_offset(node.value),
                    value_block(node.value_len as usize),
                )?;
                tx.write(
                    PPtr::<[u64; 2]>::from_offset(node_at + VALUE),
                    &[fresh.offset(), value.len() as u64],
                )?;
                return Ok(true);
            }
            let node_at = tx.alloc(NODE_BYTES)?;
            let value_at = tx.alloc(value_block(value.len()))?;
            let len_at = header.offset() + LEN;
            // Everything the insert changes, logged with one fence: the bucket head
            // and the count (the fresh node and value only under `log_fresh`).
            tx.add_ranges(&[
                (value_at.offset(), vlen, logging.hint_for(vlen)),
                (node_at.offset(), NODE_BYTES, logging.hint_for(NODE_BYTES)),
                (head_at, 8, logging.hint_for(8)),
                (len_at, 8, logging.hint_for(8)),
            ])?;
            tx.write_bytes(value_at.offset(), value)?;
            let mut node = Node {
                next: tx.read(PPtr::<u64>::from_offset(head_at))?,
                key_len: key.len() as u64,
                value: value_at.offset(),
                value_len: value.len() as u64,
                key: [0; MAX_KEY],
            };
            node.key[..key.len()].copy_from_slice(key);
            tx.write(node_at.cast::<Node>(), &node)?;
            tx.write(PPtr::<u64>::from_offset(head_at), &node_at.offset())?;
            tx.write(PPtr::<u64>::from_offset(len_at), &(h.len + 1))?;
            Ok(false)
        })
    }

    /// Removes `key`. Returns whether it was present, and what the transaction cost.
    pub fn remove(
        &self,
        heap: &mut TxHeap,
        key: &[u8],
        logging: Logging,
        opts: impl Into<TxOptions>,
    ) -> Result<(bool, TxStats), TxError> {
        let header = self.header;
        heap.transaction_stats(opts.into(), |tx| {
            let h: Header = tx.read(header.cast())?;
            let head_at = bucket_at(&h, key);
            let Some((node_at, link_at)) = find(tx, &h, head_at, key)? else {
                return Ok(false);
            };
            let node: Node = tx.read(PPtr::from_offset(node_at))?;
            let len_at = header.offset() + LEN;
            // The unlink and the count, logged with one fence.
            tx.add_ranges(&[
                (link_at, 8, logging.hint_for(8)),
                (len_at, 8, logging.hint_for(8)),
            ])?;
            tx.write(PPtr::<u64>::from_offset(link_at), &node.next)?;
            tx.write(PPtr::<u64>::from_offset(len_at), &(h.len - 1))?;
            tx.free(
                PPtr::from_offset(node.value),
                value_block(node.value_len as usize),
            )?;
            tx.free(PPtr::from_offset(node_at), NODE_BYTES)?;
            Ok(true)
        })
    }

    /// The value of `key`, if present.
    pub fn get(&self, heap: &TxHeap, key: &[u8]) -> Result<Option<Vec<u8>>, TxError> {
        let pool = heap.pool();
        let h: Header = pool.read(self.header.cast())?;
        let mut at: u64 = pool.read(PPtr::from_offset(bucket_at(&h, key)))?;
        for _ in 0..=h.len {
            if at == 0 {
                return Ok(None);
            }
            let node: Node = pool.read(PPtr::from_offset(at))?;
            if node_key(&node)? == key {
                return Ok(Some(pool.bytes(node.value, node.value_len)?.to_vec()));
            }
            at = node.next;
        }
        Err(corrupt("a chain is longer than the entry count".into()))
    }

    /// The number of entries.
    pub fn len(&self, heap: &TxHeap) -> Result<u64, TxError> {
        Ok(heap.pool().read(self.header.cast::<Header>())?.len)
    }

    /// Whether the table is empty.
    pub fn is_empty(&self, heap: &TxHeap) -> Result<bool, TxError> {
        Ok(self.len(heap)? == 0)
    }

    /// Walks the whole table and checks it (every chain ends, every node sits in the
    /// bucket of its key, keys are unique, the count matches); returns the pairs,
    /// sorted by key. `TxError::Corrupt` names what is wrong.
    pub fn check(&self, heap: &TxHeap) -> Result<Vec<Entry>, TxError> {
        let mut out = Vec::new();
        self.walk(heap, &mut |_, node, value| {
            out.push((node, value));
        })?;
        out.sort();
        if out.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(corrupt("a key appears twice".into()));
        }
        Ok(out)
    }

    /// Every allocator block the table references: header, bucket array, nodes and
    /// values, sorted (to compare with the allocator's live blocks).
    pub fn blocks(&self, heap: &TxHeap) -> Result<Vec<u64>, TxError> {
        let h: Header = heap.pool().read(self.header.cast())?;
        let mut out = vec![self.header.offset(), h.table];
        self.walk(heap, &mut |nodes, _, _| out.extend_from_slice(nodes))?;
        out.sort_unstable();
        Ok(out)
    }

    /// Calls `f([node, value], key, value bytes)` for every entry, checking as it goes.
    fn walk(&self, heap: &TxHeap, f: Visit<'_>) -> Result<(), TxError> {
        let pool = heap.pool();
        let h: Header = pool.read(self.header.cast())?;
        if h.buckets == 0 || h.buckets > 1 << 24 {
            return Err(corrupt(format!("bucket count {}", h.buckets)));
        }
        let mut seen = 0u64;
        for b in 0..h.buckets {
            let mut at: u64 = pool.read(PPtr::from_offset(h.table + 8 * b))?;
            while at != 0 {
                seen += 1;
                if seen > h.len {
                    return Err(corrupt(format!("more nodes than the count {}", h.len)));
                }
                let node: Node = pool.read(PPtr::from_offset(at))?;
                let key = node_key(&node)?.to_vec();
                if hash(&key) % h.buckets != b {
                    return Err(corrupt(format!("node {at:#x} is in the wrong bucket")));
                }
                if node.value_len > MAX_VALUE {
                    return Err(corrupt(format!(
                        "node {at:#x} has value length {}",
                        node.value_len
                    )));
                }
                let value = pool.bytes(node.value, node.value_len)?.to_vec();
                f(&[at, node.value], key, value);
                at = node.next;
            }
        }
        if seen != h.len {
            return Err(corrupt(format!("{seen} nodes but the count is {}", h.len)));
        }
        Ok(())
    }
}

fn bucket_at(h: &Header, key: &[u8]) -> u64 {
    h.table + 8 * (hash(key) % h.buckets.max(1))
}

fn node_key(node: &Node) -> Result<&[u8], TxError> {
    node.key
        .get(..node.key_len as usize)
        .ok_or_else(|| corrupt(format!("key length {}", node.key_len)))
}

/// Finds `key` in the chain starting at the head word `head_at`: the node's offset
/// and the offset of the word that links to it (the head or the previous `next`).
fn find(tx: &Tx<'_>, h: &Header, head_at: u64, key: &[u8]) -> Result<Option<(u64, u64)>, TxError> {
    let mut link_at = head_at;
    let mut at: u64 = tx.read(PPtr::from_offset(head_at))?;
    for _ in 0..=h.len {
        if at == 0 {
            return Ok(None);
        }
        let node: Node = tx.read(PPtr::from_offset(at))?;
        if node_key(&node)? == key {
            return Ok(Some((at, link_at)));
        }
        link_at = at + NEXT;
        at = node.next;
    }
    Err(corrupt("a chain is longer than the entry count".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tx::{LogMode, TxGeometry};
    use crate::{Pool, PoolOptions};
    use std::collections::BTreeMap;

    #[test]
    fn matches_a_btreemap_over_random_operations() {
        let pool = Pool::anonymous(&PoolOptions::new("pht", 8 << 20)).expect("pool");
        let mut heap = TxHeap::create(pool, &TxGeometry::default(), 64).expect("heap");
        let t = Pht::create(&mut heap, 16).expect("table");
        let mut model = BTreeMap::new();
        let mut seed = 7u64;
        for i in 0..3000u64 {
            let r = crate::splitmix64(&mut seed);
            let key = format!("key-{}", r % 200).into_bytes();
            let logging = [Logging::Word, Logging::Object, Logging::Hybrid][(i % 3) as usize];
            let mode = if i % 2 == 0 {
                LogMode::Undo
            } else {
                LogMode::Redo
            };
            if r % 5 < 3 {
                let value = vec![(r >> 8) as u8; (r % 300) as usize];
                let (replaced, _) = t
                    .insert(&mut heap, &key, &value, logging, mode)
                    .expect("insert");
                assert_eq!(replaced, model.insert(key, value).is_some());
            } else {
                let (removed, _) = t.remove(&mut heap, &key, logging, mode).expect("remove");
                assert_eq!(removed, model.remove(&key).is_some());
            }
        }
        let pairs = t.check(&heap).expect("consistent");
        assert_eq!(pairs, model.clone().into_iter().collect::<Vec<_>>());
        assert_eq!(t.len(&heap).expect("len"), model.len() as u64);
        for (k, v) in &model {
            assert_eq!(t.get(&heap, k).expect("get").as_ref(), Some(v));
        }
        assert_eq!(t.get(&heap, b"absent").expect("get"), None);
        let live = heap.live_blocks().expect("enumerate");
        assert_eq!(
            live,
            t.blocks(&heap).expect("blocks"),
            "no leak, no dangling block"
        );
    }

    #[test]
    fn an_overlong_key_is_refused_and_changes_nothing() {
        let pool = Pool::anonymous(&PoolOptions::new("pht2", 1 << 20)).expect("pool");
        let mut heap = TxHeap::create(pool, &TxGeometry::default(), 64).expect("heap");
        let t = Pht::create(&mut heap, 4).expect("table");
        let r = t.insert(&mut heap, &[1; 65], b"v", Logging::Hybrid, LogMode::Undo);
        assert!(matches!(r, Err(TxError::Aborted(_))));
        assert_eq!(t.len(&heap).expect("len"), 0);
    }
}
