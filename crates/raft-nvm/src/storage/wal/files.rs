//! The WAL engine's files: a log file per generation (`wal-<gen>.log`), the latest
//! snapshot (`snapshot`) and the hard state (`hardstate`).
//!
//! Every file starts with an 8-byte magic and an 8-byte generation, followed by
//! records in [`crate::storage::record`]'s format. A log is read up to its first torn or
//! corrupt record (the classic WAL rule: what follows was never acknowledged) —
//! but only past its *synced end*: a clean stop records, in the file `synced`, the
//! generation and length of the log it made durable (written after the log's
//! `fdatasync`, so it never claims more than is durable, and the log only grows
//! within a generation, so it stays true until the next snapshot). Up to that
//! length a record that fails its checksum, or a log shorter than it, is damage to
//! acknowledged entries, and the store is refused rather than cut. The snapshot,
//! the hard state and the synced end are replaced atomically: write a temporary
//! file, fsync it, rename it over the old one, fsync the directory.
//!
//! The hard state (`RAFTHRD2`) carries a crc32c of its word; the first format
//! (`RAFTHRD1`, no checksum) is still read, and replaced at the next update.
//! Every file is checked to be a regular file before it is opened.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::storage::error::{Result, StoreError};
use zerocopy::FromBytes;

use crate::storage::record::{decode, encoded_len, Record, RecordHeader, HEADER_LEN};

/// Magic of log files.
pub const WAL_MAGIC: &[u8; 8] = b"RAFTWAL1";
/// Magic of snapshot files.
pub const SNAP_MAGIC: &[u8; 8] = b"RAFTSNP1";
/// Magic of the first hard-state format (no checksum): read, never written.
pub const HARD_MAGIC_V1: &[u8; 8] = b"RAFTHRD1";
/// Magic of the hard-state file: the word, then its crc32c.
pub const HARD_MAGIC: &[u8; 8] = b"RAFTHRD2";
/// Magic of the synced-end file.
pub const END_MAGIC: &[u8; 8] = b"RAFTEND1";
/// Bytes before the first record.
pub const FILE_HEADER: usize = 16;

/// The log file of generation `gen`.
pub fn wal_path(dir: &Path, gen: u64) -> PathBuf {
    dir.join(format!("wal-{gen}.log"))
}

/// The snapshot file.
pub fn snapshot_path(dir: &Path) -> PathBuf {
    dir.join("snapshot")
}

/// The hard-state file.
pub fn hard_path(dir: &Path) -> PathBuf {
    dir.join("hardstate")
}

/// The synced-end file (see the module docs).
pub fn end_path(dir: &Path) -> PathBuf {
    dir.join("synced")
}

/// The hard-state file's bytes for the packed word `word`.
pub fn hard_bytes(word: u64) -> Vec<u8> {
    let mut out = header(HARD_MAGIC, word).to_vec();
    out.extend_from_slice(&u64::from(crc32c::crc32c(&out)).to_le_bytes());
    out
}

/// The packed hard-state word in `dir`, if there is a hard-state file: checked
/// against its checksum (format 2) or taken as it is (format 1).
pub fn read_hard(dir: &Path) -> Result<Option<u64>> {
    let path = hard_path(dir);
    let Some(bytes) = read_bytes(&path)? else {
        return Ok(None);
    };
    let word = |b: &[u8]| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[8..16]);
        u64::from_le_bytes(w)
    };
    match bytes.get(..8) {
        Some(m) if m == HARD_MAGIC && bytes.len() == 24 => {
            let mut crc = [0u8; 8];
            crc.copy_from_slice(&bytes[16..24]);
            if u64::from_le_bytes(crc) != u64::from(crc32c::crc32c(&bytes[..16])) {
                return Err(StoreError::Corrupt(format!(
                    "{} offset 16: the hard state fails its checksum",
                    path.display()
                )));
            }
            Ok(Some(word(&bytes)))
        }
        Some(m) if m == HARD_MAGIC_V1 && bytes.len() == FILE_HEADER => {
            tracing::info!(path = %path.display(), "a hard state without checksum (format 1): it gets one at its next update");
            Ok(Some(word(&bytes)))
        }
        _ => Err(StoreError::Corrupt(format!(
            "{}: not a hard-state file ({} bytes)",
            path.display(),
            bytes.len()
        ))),
    }
}

/// The synced-end file's bytes: log generation `gen` is durable up to `len` bytes.
pub fn end_bytes(gen: u64, len: u64) -> Vec<u8> {
    let mut out = header(END_MAGIC, gen).to_vec();
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&u64::from(crc32c::crc32c(&out)).to_le_bytes());
    out
}

/// The synced end recorded in `dir`, `(generation, length)`, if any.
pub fn read_end(dir: &Path) -> Result<Option<(u64, u64)>> {
    let path = end_path(dir);
    let Some(bytes) = read_bytes(&path)? else {
        return Ok(None);
    };
    let field = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(w)
    };
    if bytes.len() != 32
        || &bytes[..8] != END_MAGIC
        || field(24) != u64::from(crc32c::crc32c(&bytes[..24]))
    {
        return Err(StoreError::Corrupt(format!(
            "{}: not a synced-end file, or damaged",
            path.display()
        )));
    }
    Ok(Some((field(8), field(16))))
}

/// A whole file's bytes, if it exists; anything but a regular file is refused
/// before it is opened.
fn read_bytes(path: &Path) -> Result<Option<Vec<u8>>> {
    if !crate::storage::ondisk::regular_file(path)? {
        return Ok(None);
    }
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

/// A file's header bytes.
pub fn header(magic: &[u8; 8], gen: u64) -> [u8; FILE_HEADER] {
    let mut h = [0u8; FILE_HEADER];
    h[..8].copy_from_slice(magic);
    h[8..].copy_from_slice(&gen.to_le_bytes());
    h
}

/// Reads a whole file and checks its header; returns its generation and contents.
pub fn read_file(path: &Path, magic: &[u8; 8]) -> Result<Option<(u64, Vec<u8>)>> {
    let Some(bytes) = read_bytes(path)? else {
        return Ok(None);
    };
    if bytes.len() < FILE_HEADER || &bytes[..8] != magic {
        return Err(StoreError::Corrupt(format!(
            "{}: not a {} file",
            path.display(),
            String::from_utf8_lossy(magic)
        )));
    }
    let mut gen = [0u8; 8];
    gen.copy_from_slice(&bytes[8..16]);
    Ok(Some((u64::from_le_bytes(gen), bytes)))
}

/// Calls `f` on each record of `bytes` after the header. A record that does not
/// decode is reported, unless `torn_ok` and it is a torn *tail*: it starts at or
/// past `synced` (the synced end, 0 if none is known: see the module docs) and
/// nothing after it decodes as a record (at any 8-byte boundary, records being
/// padded to 8). A log shorter than `synced` is reported too. A bad
/// record followed by a good one is corruption in the middle of the log, whose
/// followers may be acknowledged entries: an error, never a silent cut. Returns the
/// length of the valid part, whole records *with their padding*: a crash can tear a
/// write inside the last record's zero padding (the checksum covers the body only,
/// so the record is valid), and the file must then be padded out to that length
/// before anything is appended, or the next record would start off the 8-byte grid
/// the reader steps on, and everything after it would read as a torn tail.
pub fn for_each_record(
    path: &Path,
    bytes: &[u8],
    torn_ok: bool,
    synced: u64,
    mut f: impl FnMut(&Record<'_>) -> Result<()>,
) -> Result<usize> {
    if (bytes.len() as u64) < synced {
        return Err(StoreError::Corrupt(format!(
            "{}: {} bytes long, shorter than the {synced} bytes a sync made durable: the log was truncated, and acknowledged entries are gone",
            path.display(),
            bytes.len()
        )));
    }
    let mut at = FILE_HEADER;
    while at < bytes.len() {
        let here = at;
        match decode(&bytes[at..], &|| {
            format!("{} offset {here}", path.display())
        }) {
            Ok((rec, _)) => {
                f(&rec)?;
                at += encoded_len(rec.key.len(), rec.value.len());
            }
            Err(e) if torn_ok && (at as u64) < synced => {
                return Err(StoreError::Corrupt(format!(
                    "{}: the record at offset {at} is damaged, below the {synced} bytes a sync made durable: not a torn tail, refusing to drop acknowledged entries ({e})",
                    path.display()
                )));
            }
            Err(e) if torn_ok => {
                if let Some(next) = next_record(bytes, at) {
                    return Err(StoreError::Corrupt(format!(
                        "{}: the record at offset {at} is corrupt but a valid record follows at offset {next}: not a torn tail, refusing to drop what follows ({e})",
                        path.display()
                    )));
                }
                tracing::info!(path = %path.display(), offset = at, "log ends in a torn record; ignoring the rest");
                return Ok(at);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(at)
}

/// The offset of the first record that decodes after the bad one at `bad`, if any.
/// If the bad record's header claims a length that fits in the file, the search
/// starts after those bytes (a value holding record bytes is not taken for a
/// record); otherwise (a torn tail, or a corrupt length field) it starts at the
/// next 8-byte boundary, so a corrupt length cannot hide the records after it.
fn next_record(bytes: &[u8], bad: usize) -> Option<usize> {
    let claimed = RecordHeader::read_from_prefix(&bytes[bad..])
        .ok()
        .map(|(h, _)| HEADER_LEN + usize::from(h.key_len) + h.value_len as usize);
    let from = match claimed {
        Some(len) if bad + len <= bytes.len() => bad + len.div_ceil(8) * 8,
        _ => bad + 8,
    };
    let quiet = || String::new();
    (from..bytes.len())
        .step_by(8)
        .find(|&at| decode(&bytes[at..], &quiet).is_ok())
}

/// Replaces `path` atomically with `contents`.
pub fn replace_atomically(dir: &Path, path: &Path, contents: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    // Whatever a crash (or anyone) left there goes first, so the temporary file is
    // a new regular file: opening a FIFO left in its place would block.
    match fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    {
        let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(contents)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    sync_dir(dir)
}

/// fsyncs a directory so a rename or a new file in it is durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hard_states_of_both_formats_are_read_and_damage_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = hard_path(dir.path());
        assert_eq!(read_hard(dir.path()).expect("none"), None);
        // The first format, without checksum, as stores before it hold.
        fs::write(&path, header(HARD_MAGIC_V1, 0x3_0002)).expect("write");
        assert_eq!(read_hard(dir.path()).expect("v1"), Some(0x3_0002));
        // The current one.
        replace_atomically(dir.path(), &path, &hard_bytes(0x7_0001)).expect("replace");
        assert_eq!(read_hard(dir.path()).expect("v2"), Some(0x7_0001));
        let good = fs::read(&path).expect("read");
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x10;
            fs::write(&path, &bad).expect("write");
            assert!(
                matches!(read_hard(dir.path()), Err(StoreError::Corrupt(_))),
                "a flipped bit at byte {at} passed"
            );
        }
        fs::write(&path, &good[..20]).expect("write");
        assert!(matches!(read_hard(dir.path()), Err(StoreError::Corrupt(_))));
    }

    #[test]
    fn a_fifo_left_as_the_temporary_file_does_not_block_a_replacement() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = hard_path(dir.path());
        let status = std::process::Command::new("mkfifo")
            .arg(path.with_extension("tmp"))
            .status()
            .expect("mkfifo runs");
        assert!(status.success());
        replace_atomically(dir.path(), &path, &hard_bytes(1 << 16)).expect("replace");
        assert_eq!(read_hard(dir.path()).expect("read"), Some(1 << 16));
    }

    #[test]
    fn the_synced_end_round_trips_and_damage_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(read_end(dir.path()).expect("none"), None);
        let path = end_path(dir.path());
        replace_atomically(dir.path(), &path, &end_bytes(3, 4096)).expect("replace");
        assert_eq!(read_end(dir.path()).expect("read"), Some((3, 4096)));
        let mut bad = fs::read(&path).expect("read");
        bad[17] ^= 1;
        fs::write(&path, &bad).expect("write");
        assert!(matches!(read_end(dir.path()), Err(StoreError::Corrupt(_))));
    }
}
