//! Fuzz bodies for the storage layer's on-media formats.
//!
//! [`list_open_patched`] (target `list_recover`) and [`list_open_resealed`]
//! (`list_recover_resealed`): an input picks one of two valid list-store images
//! made once per process ([`list_images`]: a store closed cleanly after puts,
//! large values, deletes, a truncation and a compaction; and the same store with
//! unsynced appends left in its pages) and overlays patches on it, each relative
//! to the start of a region (the pool header, the control block, each page). The
//! resealed variant then fixes the checksums a patch broke (pool header, geometry,
//! hard state, every page seal and `durable` word, every record's generation-seeded
//! checksum), so mutations reach the checks behind them. What it asserts:
//! * [`ListStore::inspect`] of a read-only pool never panics and never writes;
//! * [`ListStore::open`] returns a typed error or a store whose records all read
//!   back (every entry, every key's newest value through the index);
//! * a store that inspects cleanly opens, with the same last index and hard state,
//!   and after the open (which settles it) it still inspects cleanly;
//! * the large-value table decoder accepts only tables whose length matches their
//!   count, so it never allocates more than the input's length.
//!
//! The `wal_read` target's body lives in [`wal`]; the structure-aware
//! `list_ops` target (crash cuts through the simulator, feature `fuzzing`) in
//! `list_ops`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use pmem_core::pool::header::HEADER_LEN;
use pmem_core::{OpenOptions, Pool};
use zerocopy::{FromBytes, IntoBytes};

use crate::storage::list::large::decode_table;
use crate::storage::list::layout::{hard_check, ControlBlock, PageHeader, LAYOUT, PAGE_HEADER};
use crate::storage::list::{ListOptions, ListStore, ListSummary};
use crate::storage::record::{reseed, RecordHeader, HEADER_LEN as RECORD_HEADER};
use crate::storage::store::{HardState, Op, Store, StoreOptions};

#[cfg(feature = "fuzzing")]
pub mod list_ops;
pub mod wal;

/// Bytes of an image's pool.
const POOL_BYTES: u64 = 64 * 1024;
/// Bytes of a page (the smallest accepted: records cross pages, large values need
/// fragments).
const PAGE_BYTES: u32 = 256;
/// Most entries read back from an opened store.
const ENTRY_LIMIT: u64 = 4096;

/// The options the images are made and opened with.
pub fn list_options() -> ListOptions {
    ListOptions {
        store: StoreOptions {
            group: 4,
            sync_interval: None,
        },
        page_size: PAGE_BYTES,
        ..ListOptions::default()
    }
}

/// A valid store image and the offsets its patches are relative to.
#[derive(Debug)]
pub struct ListImage {
    /// What it is (for messages).
    pub name: &'static str,
    /// The pool file's bytes.
    pub bytes: Vec<u8>,
    /// Region starts: the pool header, the control block, then every page.
    pub regions: Vec<u64>,
    /// Offset of the control block.
    pub control: u64,
}

/// What a store holds, as the fuzz bodies compare it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListView {
    /// The last log index.
    pub last_index: u64,
    /// The Raft hard state.
    pub hard_state: HardState,
    /// Every key's newest value.
    pub values: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// What happened to one input.
#[derive(Debug)]
pub struct ListOutcome {
    /// [`ListStore::inspect`] of the image, opened read-only.
    pub inspect_before: Result<ListSummary, String>,
    /// [`ListStore::open`] of the image and what it read back.
    pub open: Result<ListView, String>,
    /// [`ListStore::inspect`] after a successful open.
    pub inspect_after: Option<Result<ListSummary, String>>,
}

/// The two base images, made on first use.
///
/// # Panics
/// If a store cannot be made (no temporary directory): no input can be run.
pub fn list_images() -> &'static [ListImage] {
    static IMAGES: OnceLock<Vec<ListImage>> = OnceLock::new();
    IMAGES.get_or_init(|| {
        vec![
            make_list_image("closed", false).expect("a closed list store"),
            make_list_image("unsynced-tail", true).expect("a list store with an unsynced tail"),
        ]
    })
}

/// The value of key `k` at step `n`, `len` bytes.
fn value(len: usize, k: u8, n: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ k ^ n)
        .collect()
}

fn make_list_image(
    name: &'static str,
    unsynced: bool,
) -> Result<ListImage, Box<dyn std::error::Error>> {
    let file = TempFile::with_contents(&[]).ok_or("temporary file")?;
    std::fs::remove_file(&file.path)?;
    let opts = list_options();
    let store = ListStore::create(&file.path, POOL_BYTES, &opts)?;
    store.set_hard_state(HardState {
        term: 3,
        vote: Some(1),
    })?;
    let put = |store: &ListStore, k: u8, len: usize| -> crate::Result<()> {
        let index = store.last_index() + 1;
        let key = [b'k', k];
        let value = value(len, k, index as u8);
        store.append(
            index,
            3,
            Op::Put {
                key: &key,
                value: &value,
            },
        )
    };
    for (k, len) in [(0, 10), (1, 120), (2, 600), (3, 40), (0, 30), (4, 1500)] {
        put(&store, k, len)?;
    }
    store.append(7, 3, Op::Delete { key: b"k1" })?;
    store.append(8, 3, Op::Noop)?;
    store.truncate_after(7, 3)?;
    store.sync()?;
    store.set_applied(store.durable_index());
    store.compact()?;
    for (k, len) in [(5, 70), (2, 90), (6, 300)] {
        put(&store, k, len)?;
    }
    store.sync()?;
    if unsynced {
        for (k, len) in [(7, 50), (0, 700), (3, 20)] {
            put(&store, k, len)?;
        }
    }
    let bytes = store.pool().bytes(0, store.pool().len())?.to_vec();
    let control = store.pool().root::<ControlBlock>()?.offset();
    if unsynced {
        drop(store);
    } else {
        store.close()?;
    }
    let cb = ControlBlock::read_from_prefix(&bytes[control as usize..])
        .map_err(|_| "control block")?
        .0;
    let mut regions = vec![0, control];
    regions.extend((0..cb.page_count.min(254)).map(|p| cb.pages_off + p * u64::from(cb.page_size)));
    // A closed store's file, as `close` left it (the same bytes as the mapping).
    let bytes = if unsynced {
        bytes
    } else {
        std::fs::read(&file.path)?
    };
    Ok(ListImage {
        name,
        bytes,
        regions,
        control,
    })
}

/// Applies the patches of `data` to a copy of the image it selects: byte 0 picks
/// the image; then each patch is a region byte, a little-endian `u16` offset in it,
/// a length byte (1 to 16 bytes) and the bytes. A patch past the end is cut.
pub fn list_patched(data: &[u8]) -> (&'static ListImage, Vec<u8>) {
    let images = list_images();
    let image = &images[usize::from(data.first().copied().unwrap_or(0)) % images.len()];
    let bytes = apply_patches(&image.bytes, &image.regions, data.get(1..).unwrap_or(&[]));
    (image, bytes)
}

/// `base` with the patches of `data` (see [`list_patched`]) at `regions`.
pub(crate) fn apply_patches(base: &[u8], regions: &[u64], mut data: &[u8]) -> Vec<u8> {
    let mut bytes = base.to_vec();
    while let [region, lo, hi, len, tail @ ..] = data {
        let start = regions[usize::from(*region) % regions.len()];
        let at = start + u64::from(u16::from_le_bytes([*lo, *hi]));
        let len = (usize::from(*len) % 16 + 1).min(tail.len());
        let (patch, next) = tail.split_at(len);
        if let Ok(at) = usize::try_from(at) {
            if at < bytes.len() {
                let end = (at + patch.len()).min(bytes.len());
                bytes[at..end].copy_from_slice(&patch[..end - at]);
            }
        }
        data = next;
    }
    bytes
}

/// The `list_recover` target.
pub fn list_open_patched(data: &[u8]) -> ListOutcome {
    check_table_decoder(data);
    let (_, bytes) = list_patched(data);
    list_open_image(&bytes)
}

/// The `list_recover_resealed` target: as [`list_open_patched`], checksums fixed.
pub fn list_open_resealed(data: &[u8]) -> ListOutcome {
    let (image, mut bytes) = list_patched(data);
    list_reseal(image, &mut bytes);
    list_open_image(&bytes)
}

/// `decode_table` of `data`: a table it accepts has exactly the length its count
/// says, so the offsets it returns never take more than the input's bytes.
pub fn check_table_decoder(data: &[u8]) {
    if let Ok((_, offsets)) = decode_table(data) {
        assert_eq!(
            16 + 8 * offsets.len(),
            data.len(),
            "a table of another length"
        );
        assert!(
            offsets.capacity() * 8 <= data.len(),
            "an allocation past the input"
        );
    }
}

/// Recomputes the checksums a patch may have broken (see [`list_open_resealed`]):
/// the control block's geometry and hard state, every page's seal and `durable`
/// word, every record in a page (seeded with the page's generation), then the
/// pool header.
pub fn list_reseal(image: &ListImage, bytes: &mut [u8]) {
    let at = image.control as usize;
    if let Some(cb_bytes) = bytes.get_mut(at..at + std::mem::size_of::<ControlBlock>()) {
        if let Ok(mut cb) = ControlBlock::read_from_bytes(cb_bytes) {
            cb.geometry_crc = cb.compute_geometry_crc();
            if cb.hard_check != 0 {
                cb.hard_check = hard_check(cb.hard_state, cb.hard_check >> 32);
            }
            cb_bytes.copy_from_slice(cb.as_bytes());
        }
    }
    for &page in &image.regions[2..] {
        let Some(p) = usize::try_from(page)
            .ok()
            .and_then(|p| bytes.get_mut(p..p + PAGE_BYTES as usize))
        else {
            continue;
        };
        reseal_page(p);
    }
    if bytes.len() >= HEADER_LEN {
        let c = crc32c::crc32c(&bytes[..HEADER_LEN - 4]);
        bytes[HEADER_LEN - 4..HEADER_LEN].copy_from_slice(&c.to_le_bytes());
    }
}

/// Reseals one page: its seal (if it has a successor), its `durable` word (if
/// set), and each record from the header on while the record's lengths fit.
fn reseal_page(page: &mut [u8]) {
    let hlen = PAGE_HEADER as usize;
    let Ok(mut h) = PageHeader::read_from_bytes(&page[..hlen]) else {
        return;
    };
    if h.next != 0 {
        let sealed = PageHeader::sealed(h.gen, h.used, h.next - 1, h.next_gen);
        h.seal_crc = sealed.seal_crc;
    }
    if h.durable != 0 {
        h.durable = PageHeader::durable_word(h.gen, h.durable as u32);
    }
    page[..hlen].copy_from_slice(h.as_bytes());
    let mut off = hlen;
    while let Some(rest) = page.get_mut(off..) {
        let Ok((r, _)) = RecordHeader::read_from_prefix(rest) else {
            break;
        };
        let body = RECORD_HEADER + usize::from(r.key_len) + r.value_len as usize;
        if r.kind == 0 || body > rest.len() || reseed(rest, h.gen).is_err() {
            break;
        }
        off += (body + 7) & !7;
    }
}

/// Writes `bytes` to a temporary file; inspects it read-only (which must not
/// change a byte), opens it as a store and reads everything back, closes it and
/// inspects it again.
///
/// # Panics
/// On a broken promise (see the module documentation) or a panic of the code
/// under test. An input is skipped if the temporary file cannot be written.
pub fn list_open_image(bytes: &[u8]) -> ListOutcome {
    let Some(file) = TempFile::with_contents(bytes) else {
        return ListOutcome {
            inspect_before: Err("skipped: cannot write the temporary file".into()),
            open: Err("skipped".into()),
            inspect_after: None,
        };
    };
    let inspect_before = list_inspect_read_only(&file.path, bytes);
    let open = list_open_and_read(&file.path);
    let inspect_after = open.is_ok().then(|| {
        let now = std::fs::read(&file.path).unwrap_or_default();
        list_inspect_read_only(&file.path, &now)
    });
    if let Ok(before) = &inspect_before {
        let view = open
            .as_ref()
            .unwrap_or_else(|e| panic!("inspected clean ({before:?}) but the open failed: {e}"));
        assert_eq!(
            (view.last_index, view.hard_state),
            (before.last_index, before.hard_state),
            "the open recovered another log than the inspection"
        );
    }
    if let Ok(view) = &open {
        let after = inspect_after
            .as_ref()
            .and_then(|a| a.as_ref().ok())
            .unwrap_or_else(|| panic!("opened, closed, then refused: {inspect_after:?}"));
        assert_eq!(
            (after.last_index, after.hard_state),
            (view.last_index, view.hard_state),
            "the closed store holds another log than the open one"
        );
    }
    ListOutcome {
        inspect_before,
        open,
        inspect_after,
    }
}

/// [`ListStore::inspect`] of the file at `path` opened read-only; asserts that the
/// file still holds `bytes` afterwards.
fn list_inspect_read_only(path: &Path, bytes: &[u8]) -> Result<ListSummary, String> {
    let result = Pool::open_with(path, &OpenOptions::new().layout(LAYOUT).read_only(true))
        .map_err(|e| e.to_string())
        .and_then(|pool| ListStore::inspect(pool).map_err(|e| e.to_string()));
    if let Ok(after) = std::fs::read(path) {
        assert!(
            after == bytes,
            "a read-only inspection changed the file ({} bytes before, {} after)",
            bytes.len(),
            after.len()
        );
    }
    result
}

/// Opens the store, reads every entry and every key's value back (through the
/// index and by key), and closes it.
fn list_open_and_read(path: &Path) -> Result<ListView, String> {
    let e = |e: crate::StoreError| e.to_string();
    let store = ListStore::open(path, &list_options()).map_err(e)?;
    let last_index = store.last_index();
    for i in last_index.saturating_sub(ENTRY_LIMIT)..=last_index {
        std::hint::black_box(store.entry(i).map_err(e)?);
    }
    let values: BTreeMap<Vec<u8>, Vec<u8>> = store.dump(u64::MAX).map_err(e)?.into_iter().collect();
    for (k, v) in &values {
        let got = store.get(k, u64::MAX).map_err(e)?;
        assert_eq!(
            got.as_ref(),
            Some(v),
            "the index and the dump disagree on {k:?}"
        );
    }
    let view = ListView {
        last_index,
        hard_state: store.hard_state(),
        values,
    };
    store.close().map_err(e)?;
    Ok(view)
}

/// A uniquely named file in the temporary directory, removed on drop.
pub(crate) struct TempFile {
    /// Where it is.
    pub(crate) path: PathBuf,
}

impl TempFile {
    /// Creates the file (never reusing an existing one) and writes `data` to it.
    pub(crate) fn with_contents(data: &[u8]) -> Option<TempFile> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir();
        for _ in 0..16 {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(format!("pmkit-fuzz-raft-{}-{n}", std::process::id()));
            let mut f = match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(_) => return None,
            };
            let file = TempFile { path };
            return f.write_all(data).ok().map(|()| file);
        }
        None
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
