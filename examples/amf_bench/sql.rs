//! An SQLite-like in-memory table workload (the AMF paper's §5/§6.4 SQLite
//! benchmark: a database purely in memory under random insert, update, select and
//! delete transactions, ~17 M inserts and 3 M each of the others).
//!
//! The table is `rows(id INTEGER PRIMARY KEY, name TEXT UNIQUE, balance INTEGER,
//! payload BLOB)`: a `BTreeMap<u64, Row>` (the primary key's B-tree) and a
//! `HashMap<String, u64>` secondary index name → id (holding its own copy of the
//! name, as an index does). Names are 20–60 bytes, payloads 200–1000 bytes.
//!
//! A run has two timed phases:
//! 1. **preload**: inserts until the approximate live bytes reach
//!    `footprint_bytes` minus what the mix is expected to add, so that the peak
//!    (at the end of the mix) is about `footprint_bytes`; no preload when the mix
//!    alone adds more (then the peak exceeds the footprint, and says so);
//! 2. **mix**: `ops` transactions drawn at random in the paper's ratio
//!    17 : 3 : 3 : 3 of insert : update : select : delete, on uniformly random
//!    live rows. An update renames the row and replaces its balance and payload
//!    (new allocations of new sizes; the index entry moves); a select looks the
//!    row up *by name* through the index and reads it; a delete removes the row
//!    and its index entry. A non-insert on an empty table becomes an insert.
//!
//! Every row's fields are a function of `(seed, id, version)`. A compact shadow —
//! per id ever inserted one version (`0`: deleted) and its place in a vector of
//! live ids — lets every select verify the whole row it reads, and after the
//! timed phases every row (and its index entry) is verified (not timed).
//! `peak_live_bytes` is approximate: field bytes plus fixed per-row overheads of
//! the tree, the index and the shadow. All memory comes from the global
//! allocator.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crate::verify::{check_stream, content_seed, fill_stream, mix64, SplitMix64, VerifyError};

/// Shortest and longest name, bytes.
const NAME_MIN: usize = 20;
/// See [`NAME_MIN`].
const NAME_MAX: usize = 60;
/// Shortest and longest payload, bytes.
const PAYLOAD_MIN: usize = 200;
/// See [`PAYLOAD_MIN`].
const PAYLOAD_MAX: usize = 1000;
/// The paper's transaction mix: insert, update, select, delete (sums to 26).
pub const MIX: [u64; 4] = [17, 3, 3, 3];

/// Fixed bytes per live row besides its name (counted twice: row and index) and
/// payload: the tree's entry (key and row) twice over, as ascending inserts leave
/// B-tree leaves about half full; a 16-byte malloc header for each of the three
/// heap blocks (both names, payload); the index slot (and its control byte) over
/// an average load of 3/4; the shadow and the live-id entry. Against the maximum
/// resident set of a 512 MiB run it is within a few per cent.
const ROW_OVERHEAD: u64 = (2 * (std::mem::size_of::<u64>() + std::mem::size_of::<Row>())
    + 3 * 16
    + (std::mem::size_of::<(String, u64)>() + 1) * 4 / 3
    + std::mem::size_of::<Shadow>()
    + std::mem::size_of::<u64>()) as u64;
/// The expected bytes of a row, for the preload's target.
const ROW_EST: u64 =
    ROW_OVERHEAD + (NAME_MIN + NAME_MAX) as u64 + ((PAYLOAD_MIN + PAYLOAD_MAX) / 2) as u64;

/// One run of the workload.
#[derive(Clone, Copy, Debug)]
pub struct SqlConfig {
    /// Approximate live bytes at the peak (end of the run).
    pub footprint_bytes: u64,
    /// Transactions of the mix phase (after the preload).
    pub ops: u64,
    /// Seed of the transaction choice and of the row contents.
    pub seed: u64,
}

/// What a run did and how fast.
#[derive(Clone, Copy, Debug)]
pub struct SqlResult {
    /// Transactions timed: the preload's inserts plus the mix's.
    pub ops: u64,
    /// Inserts of the preload phase.
    pub preload_rows: u64,
    /// Transactions of the mix by kind: insert, update, select, delete.
    pub mix_counts: [u64; 4],
    /// Time of the preload and mix phases.
    pub elapsed: Duration,
    /// `ops / elapsed`.
    pub ops_per_sec: f64,
    /// Rows verified whole: every select and the final pass.
    pub rows_verified: u64,
    /// Live rows at the end.
    pub live_rows: u64,
    /// Approximate live bytes at the peak (see the module doc).
    pub peak_live_bytes: u64,
}

/// A row of the table.
#[derive(Debug)]
struct Row {
    /// The primary key (also the tree's key).
    id: u64,
    /// Unique, 20–60 bytes: `u<id>-` and letters.
    name: String,
    /// A balance.
    balance: i64,
    /// 200–1000 bytes.
    payload: Vec<u8>,
}

/// The shadow of one id.
#[derive(Clone, Copy, Debug)]
struct Shadow {
    /// The row's version; `0` when deleted.
    version: u32,
    /// Its index in the vector of live ids (meaningless when deleted).
    pos: u32,
}

/// The fields of `(seed, id, version)`, derived from one content seed.
struct Fields {
    /// Name length.
    name_len: usize,
    /// Seed of the name's letters.
    name_seed: u64,
    /// The balance.
    balance: i64,
    /// Payload length.
    payload_len: usize,
    /// Seed of the payload's bytes.
    payload_seed: u64,
}

impl Fields {
    /// The fields of `(seed, id, version)`.
    fn of(seed: u64, id: u64, version: u32) -> Fields {
        let c = content_seed(seed, id, version);
        let h1 = mix64(c ^ 1);
        let h2 = mix64(c ^ 2);
        Fields {
            name_len: NAME_MIN + (h1 % (NAME_MAX - NAME_MIN + 1) as u64) as usize,
            name_seed: mix64(c ^ 3),
            balance: (h1 >> 16) as i64 % 1_000_000_000 - 500_000_000,
            payload_len: PAYLOAD_MIN + (h2 % (PAYLOAD_MAX - PAYLOAD_MIN + 1) as u64) as usize,
            payload_seed: mix64(c ^ 4),
        }
    }

    /// The name: `u<id>-` then lowercase letters up to the length (longer than
    /// 60 bytes only for ids above 10^57, never reached).
    fn name(&self, id: u64) -> String {
        let mut s = String::with_capacity(self.name_len.max(24));
        s.push('u');
        push_decimal(&mut s, id);
        s.push('-');
        let mut g = SplitMix64::new(self.name_seed);
        while s.len() < self.name_len {
            s.push(char::from(b'a' + g.below(26) as u8));
        }
        s
    }

    /// The payload.
    fn payload(&self) -> Vec<u8> {
        let mut p = vec![0u8; self.payload_len];
        fill_stream(&mut p, self.payload_seed);
        p
    }
}

/// Appends `n` in decimal without a temporary allocation.
fn push_decimal(s: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[i..] {
        s.push(char::from(d));
    }
}

/// Verifies `row` whole against `(seed, id, version)`.
fn check_row(seed: u64, id: u64, version: u32, row: &Row) -> Result<(), VerifyError> {
    let f = Fields::of(seed, id, version);
    let bad = |field| VerifyError::Row { id, version, field };
    if row.id != id {
        return Err(bad("id"));
    }
    if row.name != f.name(id) {
        return Err(bad("name"));
    }
    if row.balance != f.balance {
        return Err(bad("balance"));
    }
    if row.payload.len() != f.payload_len || check_stream(&row.payload, f.payload_seed).is_some() {
        return Err(bad("payload"));
    }
    Ok(())
}

/// Approximate live bytes of `row`.
fn row_bytes(row: &Row) -> u64 {
    ROW_OVERHEAD + 2 * row.name.capacity() as u64 + row.payload.capacity() as u64
}

/// The table, its index and the shadow.
struct Table {
    /// Seed of the contents.
    seed: u64,
    /// The primary key's B-tree.
    rows: BTreeMap<u64, Row>,
    /// name → id.
    by_name: HashMap<String, u64>,
    /// Per id ever inserted.
    shadow: Vec<Shadow>,
    /// Live ids, for a uniform choice.
    live: Vec<u64>,
    /// Approximate live bytes.
    bytes: u64,
    /// Their maximum.
    peak: u64,
    /// Rows verified whole.
    verified: u64,
}

impl Table {
    /// An empty table.
    fn new(seed: u64) -> Table {
        Table {
            seed,
            rows: BTreeMap::new(),
            by_name: HashMap::new(),
            shadow: Vec::new(),
            live: Vec::new(),
            bytes: 0,
            peak: 0,
            verified: 0,
        }
    }

    /// Adds `add` to the live bytes, then takes `sub` away, and keeps the peak.
    fn account(&mut self, add: u64, sub: u64) {
        self.bytes = (self.bytes + add).saturating_sub(sub);
        self.peak = self.peak.max(self.bytes);
    }

    /// INSERT a new row (the next id, version 1).
    fn insert(&mut self) -> Result<(), VerifyError> {
        let id = self.shadow.len() as u64;
        let f = Fields::of(self.seed, id, 1);
        let row = Row {
            id,
            name: f.name(id),
            balance: f.balance,
            payload: f.payload(),
        };
        let add = row_bytes(&row);
        if let Some(prev) = self.by_name.insert(row.name.clone(), id) {
            return Err(VerifyError::Index {
                id,
                found: Some(prev),
            });
        }
        if self.rows.insert(id, row).is_some() {
            return Err(VerifyError::Count {
                what: "sql rows with a new id",
                expected: 0,
                found: 1,
            });
        }
        self.shadow.push(Shadow {
            version: 1,
            pos: self.live.len() as u32,
        });
        self.live.push(id);
        self.account(add, 0);
        Ok(())
    }

    /// A uniformly random live id and its version (`None` when empty).
    fn pick(&self, rng: &mut SplitMix64) -> Option<(u64, u32)> {
        let i = rng.below(self.live.len() as u64) as usize;
        let id = *self.live.get(i)?;
        let version = self.shadow.get(id as usize)?.version;
        Some((id, version))
    }

    /// The mutable shadow of a live `id`.
    fn shadow_mut(&mut self, id: u64) -> Result<&mut Shadow, VerifyError> {
        self.shadow
            .get_mut(id as usize)
            .ok_or(VerifyError::Missing {
                what: "sql shadow",
                key: id,
            })
    }

    /// UPDATE the row `id`: a new name, balance and payload (version + 1).
    fn update(&mut self, id: u64, version: u32) -> Result<(), VerifyError> {
        let seed = self.seed;
        let next = version.checked_add(1).unwrap_or(1);
        let f = Fields::of(seed, id, next);
        let row = self.rows.get_mut(&id).ok_or(VerifyError::Missing {
            what: "sql row",
            key: id,
        })?;
        let old = row_bytes(row);
        let new_name = f.name(id);
        let found = self.by_name.remove(&row.name);
        if found != Some(id) {
            return Err(VerifyError::Index { id, found });
        }
        // The new fields are allocated before the old ones are freed.
        let old_name = std::mem::replace(&mut row.name, new_name);
        let old_payload = std::mem::replace(&mut row.payload, f.payload());
        row.balance = f.balance;
        let new = row_bytes(row);
        let key = row.name.clone();
        self.account(new, 0);
        drop(old_name);
        drop(old_payload);
        self.account(0, old);
        if let Some(prev) = self.by_name.insert(key, id) {
            return Err(VerifyError::Index {
                id,
                found: Some(prev),
            });
        }
        self.shadow_mut(id)?.version = next;
        Ok(())
    }

    /// SELECT * WHERE name = the name of `(id, version)`: through the index, then
    /// the row, verified whole.
    fn select(&mut self, id: u64, version: u32) -> Result<(), VerifyError> {
        let name = Fields::of(self.seed, id, version).name(id);
        let found = self.by_name.get(&name).copied();
        if found != Some(id) {
            return Err(VerifyError::Index { id, found });
        }
        let row = self.rows.get(&id).ok_or(VerifyError::Missing {
            what: "sql row",
            key: id,
        })?;
        check_row(self.seed, id, version, row)?;
        self.verified += 1;
        Ok(())
    }

    /// DELETE the row `id` and its index entry.
    fn delete(&mut self, id: u64) -> Result<(), VerifyError> {
        let row = self.rows.remove(&id).ok_or(VerifyError::Missing {
            what: "sql row",
            key: id,
        })?;
        let found = self.by_name.remove(&row.name);
        if found != Some(id) {
            return Err(VerifyError::Index { id, found });
        }
        let sub = row_bytes(&row);
        drop(row);
        let sh = self.shadow_mut(id)?;
        let pos = sh.pos as usize;
        sh.version = 0;
        if pos >= self.live.len() {
            return Err(VerifyError::Missing {
                what: "sql live id",
                key: id,
            });
        }
        self.live.swap_remove(pos);
        if let Some(&moved) = self.live.get(pos) {
            self.shadow_mut(moved)?.pos = pos as u32;
        }
        self.account(0, sub);
        Ok(())
    }

    /// Verifies every row and index entry against the shadow.
    fn verify_all(&mut self) -> Result<(), VerifyError> {
        let live = self.live.len() as u64;
        for (what, found) in [
            ("sql rows", self.rows.len() as u64),
            ("sql index", self.by_name.len() as u64),
        ] {
            if found != live {
                return Err(VerifyError::Count {
                    what,
                    expected: live,
                    found,
                });
            }
        }
        for (&id, row) in &self.rows {
            let version = self.shadow.get(id as usize).map_or(0, |s| s.version);
            if version == 0 {
                return Err(VerifyError::Count {
                    what: "sql rows deleted in the shadow",
                    expected: 0,
                    found: 1,
                });
            }
            check_row(self.seed, id, version, row)?;
            let found = self.by_name.get(&row.name).copied();
            if found != Some(id) {
                return Err(VerifyError::Index { id, found });
            }
            self.verified += 1;
        }
        Ok(())
    }
}

/// Runs the workload of `cfg` and verifies it.
///
/// # Errors
///
/// [`VerifyError`] when a row, an index entry or a count differs from the
/// shadow: the heap under test corrupted or lost memory.
pub fn run_sql(cfg: &SqlConfig) -> Result<SqlResult, VerifyError> {
    let total: u64 = MIX.iter().sum();
    let growth_rows = cfg.ops.saturating_mul(MIX[0] - MIX[3]) / total;
    let target = cfg
        .footprint_bytes
        .saturating_sub(growth_rows.saturating_mul(ROW_EST));
    let mut t = Table::new(cfg.seed);
    let mut rng = SplitMix64::new(cfg.seed ^ 0x7371_6c5f_6d69_7821);
    let mut counts = [0u64; 4];
    let start = Instant::now();

    let mut preload = 0u64;
    while t.bytes < target {
        t.insert()?;
        preload += 1;
    }

    for _ in 0..cfg.ops {
        let r = rng.below(total);
        let kind = if r < MIX[0] {
            0
        } else if r < MIX[0] + MIX[1] {
            1
        } else if r < MIX[0] + MIX[1] + MIX[2] {
            2
        } else {
            3
        };
        let picked = if kind == 0 { None } else { t.pick(&mut rng) };
        match (kind, picked) {
            (1, Some((id, v))) => t.update(id, v)?,
            (2, Some((id, v))) => t.select(id, v)?,
            (3, Some((id, _))) => t.delete(id)?,
            _ => {
                t.insert()?;
                counts[0] += 1;
                continue;
            }
        }
        counts[kind] += 1;
    }
    let elapsed = start.elapsed();

    t.verify_all()?;
    let ops = preload + cfg.ops;
    let secs = elapsed.as_secs_f64();
    Ok(SqlResult {
        ops,
        preload_rows: preload,
        mix_counts: counts,
        elapsed,
        ops_per_sec: if secs > 0.0 { ops as f64 / secs } else { 0.0 },
        rows_verified: t.verified,
        live_rows: t.live.len() as u64,
        peak_live_bytes: t.peak,
    })
}
