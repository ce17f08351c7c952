//! The PMDK peer's hash table: `PHashMap`'s on-media design written in Rust over
//! libpmemobj's C API, so the two differ in their transactions only.
//!
//! Open addressing with linear probing. The header (the pool's root object) holds
//! `len`, `capacity` (a power of two) and the table's offset; the table holds
//! `capacity` slots of `round_up(8 + 8 + V, 8)` bytes: a control word (0: empty,
//! else `hash | 1 << 63`, the hash being `pmem_collections::hash::hash_bytes` of the
//! key's little-endian bytes), the key, the value. A key's first slot is
//! `hash & (capacity - 1)`.
//!
//! An insert of a new key is one transaction that snapshots the slot and `len`
//! (`pmemobj_tx_add_range_direct`) and writes them; an update snapshots the value.
//! When `len + 1 > capacity / 8 * 7` the same transaction first grows the table:
//! `pmemobj_tx_zalloc` of twice the slots, every entry copied into it (PMDK does not
//! log writes into an object its transaction allocated), the old table freed at
//! commit, the header's capacity and offset snapshotted and switched.
//! Removal is not measured against PMDK (the issue asks for pmkit's alone), so the
//! peer has none.

use pmem_collections::hash::hash_bytes;

use crate::pmdk::{PmdkPool, Tx};

// Header fields (the root object).
const LEN: u64 = 0;
const CAP: u64 = 8;
const TABLE: u64 = 16;
/// A slot's control word marks it taken.
const TAKEN: u64 = 1 << 63;

/// The open-addressing table on PMDK (see the module documentation).
pub struct PmdkMap<'p> {
    pool: &'p PmdkPool<'p>,
    header: u64,
    /// Bytes of a value.
    value_len: usize,
    /// Bytes of a slot.
    slot: u64,
}

/// Bytes of a slot holding an 8-byte key and a `v`-byte value: control word, key,
/// value, rounded up to words (`PHashMap`'s layout).
pub fn slot_bytes(v: usize) -> u64 {
    (16 + v as u64).div_ceil(8) * 8
}

/// The control word of `key`.
fn ctrl_of(key: u64) -> u64 {
    hash_bytes(&key.to_le_bytes()) | TAKEN
}

impl<'p> PmdkMap<'p> {
    /// A new table of `capacity` slots (a power of two) for `value_len`-byte values,
    /// its header in the pool's root object.
    pub fn create(
        pool: &'p PmdkPool<'p>,
        capacity: u64,
        value_len: usize,
    ) -> Result<PmdkMap<'p>, String> {
        if !capacity.is_power_of_two() {
            return Err(format!("capacity {capacity} is not a power of two"));
        }
        let header = pool.root();
        let slot = slot_bytes(value_len);
        pool.tx(|tx| {
            let table = tx.alloc(to_usize(capacity * slot)?, true)?;
            tx.add_range(header, 24)?;
            tx.write_u64(header + LEN, 0);
            tx.write_u64(header + CAP, capacity);
            tx.write_u64(header + TABLE, table);
            Ok(())
        })?;
        Ok(PmdkMap {
            pool,
            header,
            value_len,
            slot,
        })
    }

    /// The table [`PmdkMap::create`] made in `pool` for `value_len`-byte values.
    #[allow(dead_code)] // the criterion bench's
    pub fn attach(pool: &'p PmdkPool<'p>, value_len: usize) -> PmdkMap<'p> {
        PmdkMap {
            pool,
            header: pool.root(),
            value_len,
            slot: slot_bytes(value_len),
        }
    }

    /// The slot of `key` in the table at `table` of `cap` slots: `(offset, found)`,
    /// the slot holding `key` or the empty one that ends its probe.
    fn probe(
        &self,
        read: impl Fn(u64) -> u64,
        table: u64,
        cap: u64,
        key: u64,
    ) -> Result<(u64, bool), String> {
        let ctrl = ctrl_of(key);
        let mask = cap - 1;
        let mut idx = ctrl & mask;
        // A table is never full (7/8 at most), so an empty slot ends every probe
        // within `cap` steps.
        for _ in 0..cap {
            let at = table + idx * self.slot;
            match read(at) {
                0 => return Ok((at, false)),
                c if c == ctrl && read(at + 8) == key => return Ok((at, true)),
                _ => idx = (idx + 1) & mask,
            }
        }
        Err("PMDK table: no empty slot".into())
    }

    /// Inserts or updates `key`; whether it was new.
    pub fn insert(&self, key: u64, value: &[u8]) -> Result<bool, String> {
        if value.len() != self.value_len {
            return Err(format!("a value of {} bytes", value.len()));
        }
        let h = self.header;
        self.pool.tx(|tx| {
            let len = tx.read_u64(h + LEN);
            let mut cap = tx.read_u64(h + CAP);
            let mut table = tx.read_u64(h + TABLE);
            let (at, found) = self.probe(|o| tx.read_u64(o), table, cap, key)?;
            if found {
                tx.add_range(at + 16, self.value_len)?;
                tx.write_bytes(at + 16, value);
                return Ok(false);
            }
            // PHashMap's rule: grow x2 when the insert would load the table past 7/8.
            let at = if len + 1 > cap / 8 * 7 {
                (table, cap) = self.grow(tx, table, cap)?;
                self.probe(|o| tx.read_u64(o), table, cap, key)?.0
            } else {
                at
            };
            tx.add_range(at, to_usize(self.slot)?)?;
            tx.add_range(h + LEN, 8)?;
            tx.write_u64(at, ctrl_of(key));
            tx.write_u64(at + 8, key);
            tx.write_bytes(at + 16, value);
            tx.write_u64(h + LEN, len + 1);
            Ok(true)
        })
    }

    /// Copies the table into one of twice the slots (in `tx`): the new table and
    /// capacity, the header switched to them.
    fn grow(&self, tx: &Tx<'_>, table: u64, cap: u64) -> Result<(u64, u64), String> {
        let new_cap = cap * 2;
        let new = tx.alloc(to_usize(new_cap * self.slot)?, true)?;
        let slot = to_usize(self.slot)?;
        for i in 0..cap {
            let from = table + i * self.slot;
            if tx.read_u64(from) == 0 {
                continue;
            }
            let key = tx.read_u64(from + 8);
            let (to, _) = self.probe(|o| tx.read_u64(o), new, new_cap, key)?;
            let bytes = tx.bytes(from, slot).to_vec();
            tx.write_bytes(to, &bytes);
        }
        tx.free(table)?;
        let h = self.header;
        tx.add_range(h + CAP, 16)?;
        tx.write_u64(h + CAP, new_cap);
        tx.write_u64(h + TABLE, new);
        Ok((new, new_cap))
    }

    /// The value of `key`, read outside any transaction (as `PHashMap::get`).
    pub fn get(&self, key: u64) -> Result<Option<&[u8]>, String> {
        let p = self.pool;
        let cap = p.read_u64(self.header + CAP);
        let table = p.read_u64(self.header + TABLE);
        let (at, found) = self.probe(|o| p.read_u64(o), table, cap, key)?;
        Ok(found.then(|| p.bytes(at + 16, self.value_len)))
    }

    /// The entry count.
    pub fn len(&self) -> u64 {
        self.pool.read_u64(self.header + LEN)
    }
}

fn to_usize(v: u64) -> Result<usize, String> {
    usize::try_from(v).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pmdk::Pmdk;

    /// Value `i`, 64 bytes.
    fn value(i: u64) -> [u8; 64] {
        let mut v = [0u8; 64];
        v[..8].copy_from_slice(&i.to_le_bytes());
        v[56..].copy_from_slice(&(!i).to_le_bytes());
        v
    }

    /// With libpmemobj installed: 600 inserts through four grows, every key found
    /// with its value, an update counted once, an absent key absent.
    #[test]
    fn the_pmdk_table_holds_what_was_inserted() {
        assert_eq!(slot_bytes(8), 24);
        assert_eq!(slot_bytes(64), 80);
        let Ok(lib) = Pmdk::load() else {
            eprintln!("libpmemobj absent: the PMDK table is not tested");
            return;
        };
        // On tmpfs where there is one: PMDK msyncs each commit of a pool it does
        // not take for PM, which costs milliseconds on a disk.
        let dir = match std::path::Path::new("/dev/shm") {
            shm if shm.is_dir() => tempfile::tempdir_in(shm),
            _ => tempfile::tempdir(),
        }
        .expect("temporary directory");
        let pool = PmdkPool::create(&lib, &dir.path().join("t.pool"), 64 << 20).expect("pool");
        let m = PmdkMap::create(&pool, 64, 64).expect("table");
        let mut s = 3u64;
        let ks: Vec<u64> = (0..600).map(|_| pmem_core::splitmix64(&mut s)).collect();
        for (i, k) in ks.iter().enumerate() {
            assert!(m.insert(*k, &value(i as u64)).expect("insert"));
        }
        assert!(!m.insert(ks[5], &value(99)).expect("update"));
        assert_eq!(m.len(), 600);
        for (i, k) in ks.iter().enumerate() {
            let want = value(if i == 5 { 99 } else { i as u64 });
            assert_eq!(m.get(*k).expect("get"), Some(&want[..]), "key {i}");
        }
        assert_eq!(m.get(12345).expect("get"), None);
        assert_eq!(pool.read_u64(pool.root() + CAP), 1024, "64 doubled 4 times");
    }
}
