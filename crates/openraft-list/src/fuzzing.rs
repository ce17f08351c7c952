//! Support for fuzzing (hidden from the documentation; not a stable API).
//!
//! [`install_snapshot_bytes`] is the body of the `snapshot_chunks` cargo-fuzz
//! target: the input is read as a snapshot file as `install_snapshot` reads one (an
//! 8-byte magic, then frames of a little-endian `u32` length and a postcard body:
//! the position, chunks of records, an empty end frame), and what parses is
//! installed into a fresh raft-nvm list store. What it checks:
//! * the reader returns a typed error or the frames, never panics, and allocates
//!   nothing the input's length does not bound (the corpus test counts);
//! * an install returns a typed error or a store at the snapshot's index holding,
//!   for every key, the value of its newest record in the file.

use std::collections::BTreeMap;
use std::io::{Cursor, Read};
use std::path::Path;

use raft_nvm::store::{SnapshotItem, SnapshotMeta, Store};
use raft_nvm::{ListOptions, ListStore};

use crate::snapshot::{decode, read_frame, MAGIC};

/// Most records an install takes (beyond, the store would be full anyway).
const MAX_ITEMS: usize = 4096;

/// What happened to one input.
#[derive(Debug)]
pub struct Outcome {
    /// The snapshot's position and its records, or why the file was refused.
    pub parsed: Result<(SnapshotMeta, usize), String>,
    /// The install into a fresh store, if the file parsed: the keys it holds.
    pub installed: Option<Result<usize, String>>,
}

/// Reads `data` as a snapshot file: its position and its records in order.
pub fn read_snapshot(data: &[u8]) -> Result<(SnapshotMeta, Vec<SnapshotItem>), String> {
    let path = Path::new("<fuzz input>");
    let mut r = Cursor::new(data);
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic).map_err(|e| e.to_string())?;
    if &magic != MAGIC {
        return Err("not a snapshot file".into());
    }
    let head = read_frame(&mut r, path)
        .map_err(|e| e.to_string())?
        .ok_or("no position")?;
    let position: SnapshotMeta = decode(&head, path).map_err(|e| e.to_string())?;
    let mut items = Vec::new();
    while let Some(body) = read_frame(&mut r, path).map_err(|e| e.to_string())? {
        let chunk: Vec<SnapshotItem> = decode(&body, path).map_err(|e| e.to_string())?;
        for item in &chunk {
            position.check_item(item).map_err(|e| e.to_string())?;
        }
        items.extend(chunk);
        if items.len() > MAX_ITEMS {
            return Err("more records than a fuzz install takes".into());
        }
    }
    Ok((position, items))
}

/// The `snapshot_chunks` target: [`read_snapshot`], then an install.
///
/// # Panics
/// If an install succeeds but the store does not hold the snapshot, or if the code
/// under test panics.
pub fn install_snapshot_bytes(data: &[u8]) -> Outcome {
    let parsed = read_snapshot(data);
    let installed = parsed
        .as_ref()
        .ok()
        .map(|(meta, items)| install(*meta, items));
    Outcome {
        parsed: parsed.map(|(meta, items)| (meta, items.len())),
        installed,
    }
}

/// Installs `items` at `meta` into a fresh store and compares what it holds.
fn install(meta: SnapshotMeta, items: &[SnapshotItem]) -> Result<usize, String> {
    let dir = std::env::temp_dir().join(format!(
        "pmkit-fuzz-snapshot-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let result = install_at(&dir, meta, items);
    let _ = std::fs::remove_file(&dir);
    result
}

static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn install_at(path: &Path, meta: SnapshotMeta, items: &[SnapshotItem]) -> Result<usize, String> {
    let opts = ListOptions {
        mode: pmem_core::ModeRequest::Volatile,
        ..ListOptions::default()
    };
    let store = ListStore::create(path, 1 << 20, &opts).map_err(|e| e.to_string())?;
    store
        .install_snapshot(meta, &mut items.iter().cloned())
        .map_err(|e| e.to_string())?;
    // Each key's newest record (the later one of two at the same index).
    let mut want: BTreeMap<&[u8], (u64, &[u8])> = BTreeMap::new();
    for item in items {
        let newer = want
            .get(&item.key[..])
            .is_none_or(|&(at, _)| item.index >= at);
        if newer {
            want.insert(&item.key, (item.index, &item.value));
        }
    }
    assert_eq!(store.last_index(), meta.index, "installed at another index");
    for (key, (_, value)) in &want {
        let got = store.get(key, u64::MAX).map_err(|e| e.to_string())?;
        assert_eq!(
            got.as_deref(),
            Some(*value),
            "key {key:?} after the install"
        );
    }
    Ok(want.len())
}
