//! Two small persistent structures written for the simulator's own tests, whose
//! every flush and fence is necessary: a linked list with a crash-safe append and an
//! undo log. Each flush and fence is a numbered *site*; a mutant skips one site.
//!
//! Layout (offsets in the pool; the heap starts at 4096):
//!
//! | what | where |
//! | --- | --- |
//! | list head | 4096 (own line) |
//! | list count | 4160 (own line) |
//! | list node `i` | 8192 + 64·i: value, next |
//! | undo-log count | 4096 (own line) |
//! | undo-log entries | 4160: (index, old value) pairs, one line |
//! | undo-logged data | 8192: [`DATA_WORDS`] words over two lines |

use crate::{PPtr, Pool, PoolError};

/// Pool size of both structures.
pub const POOL_SIZE: u64 = 64 * 1024;
const HEAD: u64 = 4096;
const COUNT: u64 = 4160;
const NODES: u64 = 8192;
const LOG_COUNT: u64 = 4096;
const LOG_ENTRIES: u64 = 4160;
const DATA: u64 = 8192;
/// Words of undo-logged data (two cache lines).
pub const DATA_WORDS: u64 = 16;
/// Maximum updates per undo-log transaction (the entries fit one line).
pub const MAX_TX_UPDATES: usize = 4;

/// A site that a mutant may skip: the flush or fence numbered `n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mutant(pub Option<usize>);

impl Mutant {
    /// The unmutated code.
    pub const NONE: Mutant = Mutant(None);

    #[track_caller]
    fn flush(self, site: usize, pool: &Pool, off: u64, len: u64) -> Result<(), PoolError> {
        if self.0 == Some(site) {
            return Ok(());
        }
        pool.flush(off, len)
    }

    #[track_caller]
    fn fence(self, site: usize, pool: &Pool) -> Result<(), PoolError> {
        if self.0 == Some(site) {
            return Ok(());
        }
        pool.drain()
    }
}

fn read(pool: &Pool, off: u64) -> Result<u64, PoolError> {
    pool.read(PPtr::<u64>::from_offset(off))
}

#[track_caller]
fn write(pool: &mut Pool, off: u64, v: u64) -> Result<(), PoolError> {
    pool.write(PPtr::<u64>::from_offset(off), &v)
}

/// Flush and fence sites of [`list_append`].
pub const LIST_SITES: &[&str] = &[
    "list: flush node",
    "list: fence after node",
    "list: flush head",
    "list: fence after head",
    "list: flush count",
    "list: fence after count",
];

/// Appends `value` (non-zero) at the front of the list: write and persist a node,
/// then publish it as the head, then bump the count.
pub fn list_append(pool: &mut Pool, value: u64, m: Mutant) -> Result<(), PoolError> {
    let count = read(pool, COUNT)?;
    let head = read(pool, HEAD)?;
    let node = NODES + 64 * count;
    write(pool, node, value)?;
    write(pool, node + 8, head)?;
    m.flush(0, pool, node, 16)?;
    m.fence(1, pool)?;
    write(pool, HEAD, node)?;
    m.flush(2, pool, HEAD, 8)?;
    m.fence(3, pool)?;
    write(pool, COUNT, count + 1)?;
    m.flush(4, pool, COUNT, 8)?;
    m.fence(5, pool)
}

/// Recovery of the list: its values from the head. A crash between publishing the
/// head and bumping the count leaves the count one short; recovery repairs that
/// (and persists the repair). Any other mismatch is corruption: the next append
/// would reuse a live node's slot.
pub fn list_recover(pool: &mut Pool) -> Result<Vec<u64>, String> {
    let err = |e: PoolError| e.to_string();
    let count = read(pool, COUNT).map_err(err)?;
    let mut values = Vec::new();
    let mut p = read(pool, HEAD).map_err(err)?;
    while p != 0 {
        if values.len() > 1024 {
            return Err("list has a cycle".into());
        }
        values.push(read(pool, p).map_err(err)?);
        p = read(pool, p + 8).map_err(err)?;
    }
    let len = values.len() as u64;
    if count + 1 == len {
        write(pool, COUNT, len).map_err(err)?;
        pool.persist(COUNT, 8).map_err(err)?;
    } else if count != len {
        return Err(format!("count {count} but {len} nodes: {values:?}"));
    }
    values.reverse();
    Ok(values)
}

/// Flush and fence sites of [`undo_tx`].
pub const UNDO_SITES: &[&str] = &[
    "undo: flush log entries",
    "undo: fence after entries",
    "undo: flush log count",
    "undo: fence after log count",
    "undo: flush data",
    "undo: fence after data",
    "undo: flush log clear",
    "undo: fence after log clear",
];

/// Applies `updates` (data index, new value) atomically with an undo log.
pub fn undo_tx(pool: &mut Pool, updates: &[(u64, u64)], m: Mutant) -> Result<(), PoolError> {
    let updates = &updates[..updates.len().min(MAX_TX_UPDATES)];
    for (k, &(i, _)) in updates.iter().enumerate() {
        let old = read(pool, DATA + 8 * (i % DATA_WORDS))?;
        write(pool, LOG_ENTRIES + 16 * k as u64, i % DATA_WORDS)?;
        write(pool, LOG_ENTRIES + 16 * k as u64 + 8, old)?;
    }
    m.flush(0, pool, LOG_ENTRIES, 64)?;
    m.fence(1, pool)?;
    write(pool, LOG_COUNT, updates.len() as u64)?;
    m.flush(2, pool, LOG_COUNT, 8)?;
    m.fence(3, pool)?;
    for &(i, v) in updates {
        write(pool, DATA + 8 * (i % DATA_WORDS), v)?;
    }
    m.flush(4, pool, DATA, 8 * DATA_WORDS)?;
    m.fence(5, pool)?;
    write(pool, LOG_COUNT, 0)?;
    m.flush(6, pool, LOG_COUNT, 8)?;
    m.fence(7, pool)
}

/// Recovery of the undo log: roll back an interrupted transaction, then return the
/// data words.
pub fn undo_recover(pool: &mut Pool) -> Result<Vec<u64>, String> {
    let err = |e: PoolError| e.to_string();
    let n = read(pool, LOG_COUNT).map_err(err)?;
    if n as usize > MAX_TX_UPDATES {
        return Err(format!("log count {n} is impossible"));
    }
    if n > 0 {
        for k in (0..n).rev() {
            let i = read(pool, LOG_ENTRIES + 16 * k).map_err(err)?;
            let old = read(pool, LOG_ENTRIES + 16 * k + 8).map_err(err)?;
            if i >= DATA_WORDS {
                return Err(format!("log entry names word {i}"));
            }
            write(pool, DATA + 8 * i, old).map_err(err)?;
        }
        pool.persist(DATA, 8 * DATA_WORDS).map_err(err)?;
        write(pool, LOG_COUNT, 0).map_err(err)?;
        pool.persist(LOG_COUNT, 8).map_err(err)?;
    }
    (0..DATA_WORDS)
        .map(|i| read(pool, DATA + 8 * i).map_err(err))
        .collect()
}

/// The data words before any transaction: non-zero, so a log entry that never
/// reached media (zeros) cannot pass for a correct one.
pub fn undo_initial(i: u64) -> u64 {
    100 + i
}

/// Writes and persists the initial data (the test's setup).
pub fn undo_setup(pool: &mut Pool) -> Result<(), PoolError> {
    for i in 0..DATA_WORDS {
        write(pool, DATA + 8 * i, undo_initial(i))?;
    }
    pool.persist(DATA, 8 * DATA_WORDS)
}

/// The data after applying `txs` in order to the initial data (the model).
pub fn undo_model(txs: &[Vec<(u64, u64)>]) -> Vec<u64> {
    let mut data: Vec<u64> = (0..DATA_WORDS).map(undo_initial).collect();
    for tx in txs {
        for &(i, v) in tx.iter().take(MAX_TX_UPDATES) {
            data[(i % DATA_WORDS) as usize] = v;
        }
    }
    data
}
