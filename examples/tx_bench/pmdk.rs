//! The peer: libpmemobj (PMDK 1.12, Debian's `libpmemobj-dev`) loaded at run time
//! with `dlopen`, so the example builds and runs without it (the run then prints one
//! line saying the peer was skipped); the bindings are `examples/common/pmdk_tx.rs`,
//! shared with `collections_bench`.
//!
//! Only the function-call form of PMDK's transactions is used (`pmemobj_tx_begin`
//! with no `jmp_buf`, then `pmemobj_tx_commit` / `pmemobj_tx_abort` and
//! `pmemobj_tx_end`): the `TX_BEGIN` macros need `setjmp`, which Rust cannot call
//! soundly. With no `jmp_buf`, a failing call inside a transaction aborts it and
//! returns an error instead of jumping.
//!
//! The hash table here is the same structure as `pmem_collections::PHashMap<PBytes,
//! PBytes>` (`hashmap/table.rs`): open addressing with linear probing, a header
//! (entry count, capacity: a power of two, table offset) in the root object, a
//! table of 40-byte slots (control word `hash | 1 << 63` or 0 for empty, key
//! offset and length, value offset and length) and one object per key and per
//! value, with the same hash (`pmem_collections::hash::hash_bytes`), the same
//! growth (x2 past 7/8 full, into a fresh table, entries moved by pointer) and the
//! same backward-shift removal. An insert allocates the key and the value in the
//! transaction (`pmemobj_tx_alloc`: PMDK neither logs nor needs to log their
//! contents) and snapshots the slot and the count (`pmemobj_tx_add_range_direct`);
//! a removal snapshots every slot it shifts and the count and frees both objects
//! (`pmemobj_tx_free`, carried out at commit).

use pmem_collections::hash::hash_bytes;

pub use crate::pmdk_tx::{Pmdk, PmdkPool, Tx, LIBRARY};

// Header fields (the root object).
const LEN: u64 = 0;
const CAPACITY: u64 = 8;
const TABLE: u64 = 16;
/// Bytes of a slot: control word, key offset and length, value offset and length.
const SLOT: u64 = 40;
const OCCUPIED: u64 = 1 << 63;
const MIN_CAPACITY: u64 = 8;

/// The open-addressing hash table on PMDK (see the module documentation).
pub struct PmdkMap<'p> {
    pool: &'p PmdkPool<'p>,
    header: u64,
}

/// Where a probe ended: the key's slot or the first empty one.
enum Probe {
    Found(u64),
    Vacant(u64),
}

impl<'p> PmdkMap<'p> {
    /// A new table with room for `n` entries without growing, its header in the
    /// pool's root object.
    pub fn create(pool: &'p PmdkPool<'p>, n: u64) -> Result<PmdkMap<'p>, String> {
        let header = pool.root();
        let capacity = ((n + 1) * 8)
            .div_ceil(7)
            .next_power_of_two()
            .max(MIN_CAPACITY);
        pool.tx(|tx| {
            let table = tx.alloc((capacity * SLOT) as usize, true)?;
            tx.add_range(header, 24)?;
            tx.write_u64(header + LEN, 0);
            tx.write_u64(header + CAPACITY, capacity);
            tx.write_u64(header + TABLE, table);
            Ok(())
        })?;
        Ok(PmdkMap { pool, header })
    }

    /// The table [`PmdkMap::create`] made in `pool` (the `tx` bench re-attaches
    /// after replacing a full pool; the example keeps the map it created).
    #[allow(dead_code)]
    pub fn attach(pool: &'p PmdkPool<'p>) -> PmdkMap<'p> {
        PmdkMap {
            pool,
            header: pool.root(),
        }
    }

    fn slot(&self, tx: &Tx<'_>, i: u64) -> u64 {
        tx.read_u64(self.header + TABLE) + i * SLOT
    }

    /// Probes for `key` from its home slot (a healthy table has an empty slot).
    fn probe(&self, tx: &Tx<'_>, key: &[u8], ctrl: u64) -> Probe {
        let mask = tx.read_u64(self.header + CAPACITY) - 1;
        let mut i = ctrl & mask;
        loop {
            let at = self.slot(tx, i);
            let c = tx.read_u64(at);
            if c == 0 {
                return Probe::Vacant(i);
            }
            if c == ctrl
                && tx.read_u64(at + 16) == key.len() as u64
                && tx.bytes(tx.read_u64(at + 8), key.len()) == key
            {
                return Probe::Found(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// Doubles the table: a fresh one, every slot moved by pointer (writes into a
    /// fresh object, not logged), the header's capacity and table snapshotted, the
    /// old table freed at commit.
    fn grow(&self, tx: &Tx<'_>) -> Result<(), String> {
        let cap = tx.read_u64(self.header + CAPACITY);
        let old = tx.read_u64(self.header + TABLE);
        let new_cap = cap * 2;
        let table = tx.alloc((new_cap * SLOT) as usize, true)?;
        for i in 0..cap {
            let src = old + i * SLOT;
            let c = tx.read_u64(src);
            if c == 0 {
                continue;
            }
            let mut j = c & (new_cap - 1);
            while tx.read_u64(table + j * SLOT) != 0 {
                j = (j + 1) & (new_cap - 1);
            }
            let bytes = tx.bytes(src, SLOT as usize).to_vec();
            tx.write_bytes(table + j * SLOT, &bytes);
        }
        tx.add_range(self.header + CAPACITY, 16)?;
        tx.write_u64(self.header + CAPACITY, new_cap);
        tx.write_u64(self.header + TABLE, table);
        tx.free(old)
    }

    /// Inserts `key` (new keys only: the benchmark never replaces), growing the
    /// table first (its own transaction) when 7/8 full.
    pub fn insert(&self, key: &[u8], value: &[u8]) -> Result<(), String> {
        let (len, cap) = (self.len(), self.capacity());
        if len + 1 > cap / 8 * 7 {
            self.pool.tx(|tx| self.grow(tx))?;
        }
        self.pool.tx(|tx| {
            let ctrl = hash_bytes(key) | OCCUPIED;
            let Probe::Vacant(i) = self.probe(tx, key, ctrl) else {
                return Err("PMDK table: key already present".into());
            };
            let k = tx.alloc(key.len().max(8), false)?;
            let v = tx.alloc(value.len().max(8), false)?;
            let at = self.slot(tx, i);
            tx.add_range(at, SLOT as usize)?;
            tx.add_range(self.header + LEN, 8)?;
            tx.write_bytes(k, key);
            tx.write_bytes(v, value);
            let mut slot = [0u8; SLOT as usize];
            for (n, w) in [ctrl, k, key.len() as u64, v, value.len() as u64]
                .iter()
                .enumerate()
            {
                slot[n * 8..n * 8 + 8].copy_from_slice(&w.to_le_bytes());
            }
            tx.write_bytes(at, &slot);
            let len = tx.read_u64(self.header + LEN);
            tx.write_u64(self.header + LEN, len + 1);
            Ok(())
        })
    }

    /// Removes `key` (backward-shift deletion); whether it was present.
    pub fn remove(&self, key: &[u8]) -> Result<bool, String> {
        self.pool.tx(|tx| {
            let ctrl = hash_bytes(key) | OCCUPIED;
            let Probe::Found(i) = self.probe(tx, key, ctrl) else {
                return Ok(false);
            };
            let mask = tx.read_u64(self.header + CAPACITY) - 1;
            let at = self.slot(tx, i);
            tx.free(tx.read_u64(at + 8))?;
            tx.free(tx.read_u64(at + 24))?;
            tx.add_range(self.header + LEN, 8)?;
            tx.add_range(at, SLOT as usize)?;
            let (mut hole, mut k) = (i, i);
            loop {
                k = (k + 1) & mask;
                let src = self.slot(tx, k);
                let c = tx.read_u64(src);
                if c == 0 {
                    break;
                }
                let home = c & mask;
                let stays = if hole <= k {
                    hole < home && home <= k
                } else {
                    hole < home || home <= k
                };
                if !stays {
                    tx.add_range(src, SLOT as usize)?;
                    let bytes = tx.bytes(src, SLOT as usize).to_vec();
                    tx.write_bytes(self.slot(tx, hole), &bytes);
                    hole = k;
                }
            }
            tx.write_u64(self.slot(tx, hole), 0);
            let len = tx.read_u64(self.header + LEN);
            tx.write_u64(self.header + LEN, len - 1);
            Ok(true)
        })
    }

    /// The value of `key`, if present (to check the table after a run).
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        self.pool.tx(|tx| {
            let ctrl = hash_bytes(key) | OCCUPIED;
            Ok(match self.probe(tx, key, ctrl) {
                Probe::Found(i) => {
                    let at = self.slot(tx, i);
                    let len = tx.read_u64(at + 32) as usize;
                    Some(tx.bytes(tx.read_u64(at + 24), len).to_vec())
                }
                Probe::Vacant(_) => None,
            })
        })
    }

    fn word(&self, off: u64) -> u64 {
        self.pool.read_u64(self.header + off)
    }

    /// The entry count.
    pub fn len(&self) -> u64 {
        self.word(LEN)
    }

    /// The number of slots.
    pub fn capacity(&self) -> u64 {
        self.word(CAPACITY)
    }
}

/// A bare 8-byte transactional write: snapshot, store (the `tx_8b_ns` peer).
pub fn tx_8b(pool: &PmdkPool<'_>, word: u64, v: u64) -> Result<(), String> {
    pool.tx(|tx| {
        tx.add_range(word, 8)?;
        tx.write_u64(word, v);
        Ok(())
    })
}
