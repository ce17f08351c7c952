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
    /// A position past the area.
    #[error("allocation log position {position} is past its {capacity} words")]
    OutOfRange {
        /// The position.
        position: u64,
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

    /// Reserves `n` consecutive positions and returns the first. The allocator's
    /// arenas reserve chunks of whole lines and fill them under their own lock, so
    /// two threads never write the same line.
    pub fn reserve(&self, n: u64) -> Result<u64, LogError> {
        let capacity = self.capacity;
        self.tail
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                (t + n <= capacity).then_some(t + n)
            })
            .map_err(|_| LogError::Full { capacity })
    }

    /// Stores `words` (records, none 0) at `at..` in order, without a flush (the
    /// caller flushes [`AllocLog::offset_of`]`(at)` for `8 × words` bytes).
    ///
    /// # Safety
    /// The positions are the caller's (reserved by it, or owned through the
    /// object their records name) and nobody else writes them meanwhile.
    #[track_caller]
    pub unsafe fn store(&self, pool: &Pool, at: u64, words: &[u64]) -> Result<(), LogError> {
        let n = words.len() as u64;
        if at + n > self.capacity {
            return Err(LogError::OutOfRange {
                position: at + n - 1,
                capacity: self.capacity,
            });
        }
        // SAFETY: the caller owns positions at..at + n (this function's contract);
        // no reference to the area is handed out.
        unsafe { pool.write_words_ordered_shared(self.offset_of(at), words)? };
        Ok(())
    }

    /// Appends `words` (records, none 0) at consecutive positions and flushes
    /// them; the caller fences. Returns the first position.
    #[track_caller]
    pub fn append(&self, pool: &Pool, words: &[u64]) -> Result<u64, LogError> {
        let at = self.reserve(words.len() as u64)?;
        // SAFETY: positions at.. were reserved by this call's fetch_add and are
        // written by nobody else.
        unsafe { self.store(pool, at, words)? };
        pool.flush(self.offset_of(at), words.len() as u64 * 8)?;
        Ok(at)
    }

    /// Sets the next reservation's position (after a checkpoint wrote `tail`
    /// words into this area).
    pub fn reset(&self, tail: u64) {
        self.tail.store(tail, Ordering::Relaxed);
    }

    /// Stores `word` over the record at `position`, without a flush.
    ///
    /// # Safety
    /// The caller owns this position (the object its record names, under the
    /// lock of the arena that owns it); nobody else writes it meanwhile.
    #[track_caller]
    pub unsafe fn put(&self, pool: &Pool, position: u64, word: u64) -> Result<(), LogError> {
        if position >= self.capacity {
            return Err(LogError::OutOfRange {
                position,
                capacity: self.capacity,
            });
        }
        // SAFETY: the caller owns this position (the contract); an aligned 8-byte
        // store is failure-atomic.
        unsafe { pool.write_bytes_shared(self.offset_of(position), &word.to_le_bytes())? };
        Ok(())
    }

    /// Rewrites the record at `position` with `word` and flushes its line; the
    /// caller fences.
    ///
    /// # Safety
    /// As [`AllocLog::put`].
    #[track_caller]
    pub unsafe fn rewrite(&self, pool: &Pool, position: u64, word: u64) -> Result<(), LogError> {
        // SAFETY: the caller's contract is put's.
        unsafe { self.put(pool, position, word)? };
        pool.flush(self.offset_of(position), 8)?;
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
        // SAFETY: the test's own log, one thread.
        unsafe { log.rewrite(&pool, 1, excluded(obj(64))) }.expect("rewrite");
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
