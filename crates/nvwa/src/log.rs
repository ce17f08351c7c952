//! The allocation log on the media: a zeroed area of record words
//! ([`crate::record`]) that threads append to and that frees and reallocs rewrite
//! in place.
//!
//! * **Append.** A thread reserves consecutive words with one `fetch_add` on the
//!   DRAM tail (no lock), stores them word by word in address order, and flushes
//!   their lines; the caller's fence makes them durable (one fence per allocator
//!   operation, whatever it logged).
//! * **Rewrite.** An 8-byte store of a new word over a record (an exclude bit, a
//!   length, a cleared pending bit) and the flush of its line.
//! * **Scan** (recovery). Every word of the area in order: records and their
//!   positions. Zero words are skipped, not taken for the end: a thread that
//!   crashed between reserving words and storing them leaves a hole, and a later
//!   thread's records may follow it. The tail resumes after the last record.
//!
//! Only the owner of a position writes it: its appender, then whoever the DRAM
//! allocator's index makes responsible for its object.

use std::sync::atomic::{AtomicU64, Ordering};

use pmem_core::{PPtr, Pool, PoolError};

use crate::record::{Record, RecordError};

/// Errors of the log.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The area has no room for the words asked for: time to checkpoint.
    #[error("the allocation log is full ({capacity} words)")]
    Full {
        /// Words of the area.
        capacity: u64,
    },
    /// A word of the area is not a record.
    #[error("allocation log word {position}: {source}")]
    Corrupt {
        /// Its position.
        position: u64,
        /// What is wrong.
        source: RecordError,
    },
    /// The pool failed.
    #[error(transparent)]
    Pool(#[from] PoolError),
}

/// One log area: `capacity` words at pool offset `base`.
#[derive(Debug)]
pub struct AllocLog {
    base: u64,
    capacity: u64,
    tail: AtomicU64,
}

impl AllocLog {
    /// An empty log over the area (which must be zeroed).
    pub fn empty(base: u64, capacity: u64) -> AllocLog {
        AllocLog {
            base,
            capacity,
            tail: AtomicU64::new(0),
        }
    }

    /// Opens the area: every record with its position, in order; appends resume
    /// after the last one.
    pub fn scan(
        pool: &Pool,
        base: u64,
        capacity: u64,
    ) -> Result<(AllocLog, Vec<(u64, Record)>), LogError> {
        let bytes = pool.bytes(base, capacity * 8)?;
        let mut records = Vec::new();
        let mut tail = 0;
        for (position, chunk) in bytes.chunks_exact(8).enumerate() {
            let word = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
            let position = position as u64;
            match Record::decode(word) {
                Ok(None) => {}
                Ok(Some(r)) => {
                    records.push((position, r));
                    tail = position + 1;
                }
                Err(source) => return Err(LogError::Corrupt { position, source }),
            }
        }
        Ok((
            AllocLog {
                base,
                capacity,
                tail: AtomicU64::new(tail),
            },
            records,
        ))
    }

    /// Words of the area.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Words reserved so far (the next append's position).
    pub fn tail(&self) -> u64 {
        self.tail.load(Ordering::Relaxed)
    }

    /// The pool offset of the word at `position`.
    pub fn offset_of(&self, position: u64) -> u64 {
        self.base + position * 8
    }

    /// Appends `words` (records, none 0) at consecutive positions and flushes
    /// them; the caller fences. Returns the first position.
    #[track_caller]
    pub fn append(&self, pool: &Pool, words: &[u64]) -> Result<u64, LogError> {
        let n = words.len() as u64;
        let at = self.tail.fetch_add(n, Ordering::Relaxed);
        if at + n > self.capacity {
            // Leave the tail past the end: every later append fails alike until
            // a checkpoint makes a new log.
            return Err(LogError::Full {
                capacity: self.capacity,
            });
        }
        let offset = self.offset_of(at);
        // SAFETY: positions at..at + n were reserved by this thread's fetch_add and
        // are written by nobody else until it returns them; no reference to the
        // area is handed out.
        unsafe { pool.write_words_ordered_shared(offset, words)? };
        pool.flush(offset, n * 8)?;
        Ok(at)
    }

    /// Rewrites the record at `position` with `word` and flushes its line; the
    /// caller fences.
    #[track_caller]
    pub fn rewrite(&self, pool: &Pool, position: u64, word: u64) -> Result<(), LogError> {
        let offset = self.offset_of(position);
        // SAFETY: the caller owns this position (the object its record names); an
        // aligned 8-byte store is failure-atomic.
        unsafe { pool.write_bytes_shared(offset, &word.to_le_bytes())? };
        pool.flush(offset, 8)?;
        Ok(())
    }

    /// The word at `position` as the media holds it.
    pub fn word(&self, pool: &Pool, position: u64) -> Result<u64, LogError> {
        Ok(pool.read(PPtr::<u64>::from_offset(self.offset_of(position)))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::excluded;
    use pmem_core::PoolOptions;

    const BASE: u64 = 8192;

    fn obj(offset: u64) -> u64 {
        Record::Obj {
            offset,
            len: 64,
            exclude: false,
            pending: false,
        }
        .encode()
        .expect("record")
    }

    #[test]
    fn appends_rewrites_and_scans_with_holes() {
        let pool = Pool::anonymous(&PoolOptions::new("log", 64 * 1024)).expect("pool");
        let log = AllocLog::empty(BASE, 16);
        assert_eq!(log.append(&pool, &[obj(0)]).expect("append"), 0);
        assert_eq!(log.append(&pool, &[obj(64), obj(128)]).expect("append"), 1);
        // A hole: position 3 reserved and never written.
        log.tail.fetch_add(1, Ordering::Relaxed);
        assert_eq!(log.append(&pool, &[obj(192)]).expect("append"), 4);
        log.rewrite(&pool, 1, excluded(obj(64))).expect("rewrite");
        pool.drain().expect("fence");
        let (again, records) = AllocLog::scan(&pool, BASE, 16).expect("scan");
        let positions: Vec<u64> = records.iter().map(|(p, _)| *p).collect();
        assert_eq!(positions, vec![0, 1, 2, 4]);
        assert!(matches!(
            records[1].1,
            Record::Obj {
                offset: 64,
                exclude: true,
                ..
            }
        ));
        assert_eq!(again.tail(), 5);
        assert_eq!(again.word(&pool, 4).expect("word"), obj(192));
    }

    #[test]
    fn a_full_log_refuses_and_a_corrupt_word_is_named() {
        let mut pool = Pool::anonymous(&PoolOptions::new("log", 64 * 1024)).expect("pool");
        let log = AllocLog::empty(BASE, 2);
        log.append(&pool, &[obj(0), obj(16)]).expect("fits");
        assert!(matches!(
            log.append(&pool, &[obj(32)]),
            Err(LogError::Full { capacity: 2 })
        ));
        pool.write(PPtr::<u64>::from_offset(BASE + 8), &7)
            .expect("write");
        let Err(LogError::Corrupt { position, .. }) = AllocLog::scan(&pool, BASE, 2) else {
            panic!("a corrupt word must be refused");
        };
        assert_eq!(position, 1);
    }
}
