//! The `wal_read` target: the WAL baseline's file reading
//! ([`crate::wal::WalStore::open`]) on a damaged copy of a valid store directory.
//!
//! An input picks one of two base directories made once per process
//! ([`wal_bases`]: one stopped cleanly, whose `synced` file vouches for the whole
//! log; one with a snapshot and a new log generation, stopped without it), cuts its
//! log at an input-chosen length (a torn tail) and overlays patches on its files.
//! What it asserts:
//! * the open returns a typed error or a store, never panics;
//! * a store it returns holds a prefix of the base's log: every entry it has is
//!   the base's entry of that index, and its hard state is the base's;
//! * nothing acknowledged is lost: when only the log was damaged, every entry whose
//!   record lies wholly before the first damaged byte is there; and when the damage
//!   lies below a clean stop's synced end the store is refused, not cut.

use std::path::Path;
use std::sync::OnceLock;

use crate::storage::record::{decode, encoded_len};
use crate::storage::store::{HardState, LogEntry, Op, Store, StoreOptions};
use crate::storage::wal::{WalOptions, WalStore};

use super::TempFile;

/// The files of a store directory a patch can land in, in the order a patch's
/// file byte selects them.
const FILES: [&str; 3] = ["snapshot", "synced", "hardstate"];
/// Header bytes of every WAL file.
const FILE_HEADER: usize = 16;

/// A valid store directory, as bytes.
#[derive(Debug)]
pub struct WalBase {
    /// What it is (for messages).
    pub name: &'static str,
    /// The current log's file name and bytes.
    pub log: (String, Vec<u8>),
    /// The other files (snapshot, synced end, hard state) that exist.
    pub others: Vec<(&'static str, Vec<u8>)>,
    /// Each log record's end offset and the entry index it carries.
    pub record_ends: Vec<(usize, u64)>,
    /// Every entry the store holds, by index.
    pub entries: Vec<LogEntry>,
    /// The hard state.
    pub hard_state: HardState,
    /// Whether a clean stop vouches for the whole log.
    pub clean: bool,
}

/// What happened to one input.
#[derive(Debug)]
pub struct WalOutcome {
    /// The open: the last index and the entries read back, or the error.
    pub open: Result<(u64, usize), String>,
    /// The first damaged byte of the log (its length if only the tail was cut).
    pub first_damage: Option<usize>,
}

fn options() -> WalOptions {
    WalOptions {
        store: StoreOptions {
            group: 4,
            sync_interval: None,
        },
        snapshot_every: 0,
    }
}

/// The two base directories, made on first use.
///
/// # Panics
/// If a store cannot be made (no temporary directory).
pub fn wal_bases() -> &'static [WalBase] {
    static BASES: OnceLock<Vec<WalBase>> = OnceLock::new();
    BASES.get_or_init(|| {
        vec![
            make_base("clean-stop", false).expect("a cleanly stopped WAL store"),
            make_base("after-snapshot", true).expect("a WAL store after a snapshot"),
        ]
    })
}

fn make_base(name: &'static str, snapshot: bool) -> crate::Result<WalBase> {
    let dir = TempDir::new().ok_or_else(|| crate::StoreError::Invalid("temp dir".into()))?;
    let store = WalStore::open(&dir.0, &options())?;
    store.set_hard_state(HardState {
        term: 2,
        vote: Some(3),
    })?;
    let put = |k: u8, len: usize| -> crate::Result<()> {
        let i = store.last_index() + 1;
        let v: Vec<u8> = (0..len).map(|b| (b as u8) ^ k).collect();
        store.append(
            i,
            2,
            Op::Put {
                key: &[b'k', k],
                value: &v,
            },
        )
    };
    for (k, len) in [(0, 10), (1, 200), (2, 33), (0, 7), (3, 90)] {
        put(k, len)?;
    }
    store.append(store.last_index() + 1, 2, Op::Delete { key: b"k1" })?;
    store.sync()?;
    if snapshot {
        store.set_applied(store.durable_index());
        store.compact()?;
    }
    for (k, len) in [(4, 64), (2, 5), (5, 120)] {
        put(k, len)?;
    }
    if snapshot {
        store.sync()?;
    } else {
        store.sync_clean()?;
    }
    let entries = (0..=store.last_index())
        .filter_map(|i| store.entry(i).ok().flatten())
        .collect();
    let hard_state = store.hard_state();
    drop(store);
    let mut log = None;
    let mut others = Vec::new();
    for entry in std::fs::read_dir(&dir.0)? {
        let path = entry?.path();
        let file = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if file.starts_with("wal-") {
            log = Some((file.to_owned(), std::fs::read(&path)?));
        } else if let Some(&known) = FILES.iter().find(|f| **f == file) {
            others.push((known, std::fs::read(&path)?));
        }
    }
    let log = log.ok_or_else(|| crate::StoreError::Invalid("no log file".into()))?;
    let record_ends = record_ends(&log.1);
    Ok(WalBase {
        name,
        log,
        others,
        record_ends,
        entries,
        hard_state,
        clean: !snapshot,
    })
}

/// Each record's end offset and index, in the log's bytes.
fn record_ends(log: &[u8]) -> Vec<(usize, u64)> {
    let mut out = Vec::new();
    let mut at = FILE_HEADER;
    while let Some(rest) = log.get(at..).filter(|r| !r.is_empty()) {
        let Ok((rec, _)) = decode(rest, &String::new) else {
            break;
        };
        at += encoded_len(rec.key.len(), rec.value.len());
        out.push((at, rec.index));
    }
    out
}

/// The `wal_read` target. Byte 0 picks the base; bytes 1 and 2 (little-endian)
/// cut that many bytes off the log's end (modulo its length past the header);
/// then each patch is a file byte (0: the log, 1: the snapshot, 2: the synced end,
/// 3: the hard state), a little-endian
/// `u16` offset, a length byte (1 to 16 bytes) and the bytes.
pub fn wal_read(data: &[u8]) -> WalOutcome {
    let bases = wal_bases();
    let base = &bases[usize::from(data.first().copied().unwrap_or(0)) % bases.len()];
    let cut = data
        .get(1..3)
        .map_or(0, |c| usize::from(u16::from_le_bytes([c[0], c[1]])));
    let mut log = base.log.1.clone();
    log.truncate(log.len() - cut % (log.len() - FILE_HEADER + 1));
    let mut others: Vec<(&str, Vec<u8>)> = base.others.clone();
    let mut only_log = true;
    let mut rest = data.get(3..).unwrap_or(&[]);
    while let [file, lo, hi, len, tail @ ..] = rest {
        let at = usize::from(u16::from_le_bytes([*lo, *hi]));
        let len = (usize::from(*len) % 16 + 1).min(tail.len());
        let (patch, next) = tail.split_at(len);
        let target = match usize::from(*file) % (FILES.len() + 1) {
            0 => Some(&mut log),
            f => {
                only_log = false;
                others
                    .iter_mut()
                    .find(|(n, _)| *n == FILES[f - 1])
                    .map(|(_, b)| b)
            }
        };
        if let Some(bytes) = target.filter(|b| at < b.len()) {
            let end = (at + patch.len()).min(bytes.len());
            bytes[at..end].copy_from_slice(&patch[..end - at]);
        }
        rest = next;
    }
    let first_damage = base
        .log
        .1
        .iter()
        .zip(&log)
        .position(|(a, b)| a != b)
        .or((log.len() < base.log.1.len()).then_some(log.len()));
    let Some(dir) = TempDir::new() else {
        return WalOutcome {
            open: Err("skipped: no temporary directory".into()),
            first_damage,
        };
    };
    let written = std::fs::write(dir.0.join(&base.log.0), &log).and_then(|()| {
        others
            .iter()
            .try_for_each(|(n, b)| std::fs::write(dir.0.join(n), b))
    });
    if written.is_err() {
        return WalOutcome {
            open: Err("skipped: cannot write the files".into()),
            first_damage,
        };
    }
    let open = open_and_check(&dir.0, base);
    if only_log {
        check_acknowledged(base, first_damage, &open);
    }
    WalOutcome { open, first_damage }
}

/// Opens the directory and checks that what it holds is a prefix of `base`.
fn open_and_check(dir: &Path, base: &WalBase) -> Result<(u64, usize), String> {
    let store = WalStore::open(dir, &options()).map_err(|e| e.to_string())?;
    let last = store.last_index();
    let mut read = 0;
    for want in &base.entries {
        if want.index > last {
            break;
        }
        let got = store.entry(want.index).map_err(|e| e.to_string())?;
        if let Some(got) = got {
            assert_eq!(&got, want, "entry {} differs from the base's", want.index);
            read += 1;
        }
    }
    assert!(
        base.entries.last().is_none_or(|e| last <= e.index),
        "recovered past the base's log: {last}"
    );
    assert_eq!(
        store.hard_state(),
        base.hard_state,
        "the hard state changed"
    );
    Ok((last, read))
}

/// Nothing acknowledged before the first damaged byte of the log is lost.
fn check_acknowledged(
    base: &WalBase,
    first_damage: Option<usize>,
    open: &Result<(u64, usize), String>,
) {
    let Some(damage) = first_damage else {
        assert!(
            open.is_ok(),
            "{}: the undamaged base refused: {open:?}",
            base.name
        );
        return;
    };
    let intact = base
        .record_ends
        .iter()
        .take_while(|(end, _)| *end <= damage)
        .last()
        .map(|&(_, index)| index);
    // A clean stop vouches for every record: damage must be refused, or be
    // harmless (a record's zero padding, which its checksum does not cover).
    let vouched = if base.clean {
        base.record_ends.last().map(|&(_, index)| index)
    } else {
        intact
    };
    if let Ok((last, _)) = open {
        assert!(
            vouched.is_none_or(|i| *last >= i),
            "{}: damage at {damage} lost entries up to {vouched:?} (recovered {last})",
            base.name
        );
    }
}

/// A temporary directory, removed on drop.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> Option<TempDir> {
        let file = TempFile::with_contents(&[])?;
        let path = file.path.clone();
        drop(file);
        std::fs::create_dir(&path).ok()?;
        Some(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
