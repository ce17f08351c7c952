//! The checkpoint: the live records, written compactly into the other log area
//! (then zeros over whatever an earlier life of that area left), made durable,
//! and the one active word switched to it — a crash finds one whole log or the
//! other. It runs under every arena's lock, so no operation sees a log half
//! switched; a reclaiming checkpoint also gives the pages of empty runs back.

use pmem_core::{AllocError, PoolError};

use super::{lock, log_error, Nvwa, Ordering, Stop};
use crate::arena::Arena;
use crate::layout::active_value;
use crate::persist::{fence, flush, Site};
use crate::record::Record;
use crate::run::{Logged, RunKind};
use crate::sync::MutexGuard;

impl Nvwa {
    /// Writes the live records into the other log area and switches to it. Runs
    /// under every arena's lock (and so excludes every operation).
    pub fn checkpoint(&self) -> Result<(), AllocError> {
        self.checkpoint_with(false)
    }

    /// Checkpoints unless the log is already past generation `seen` (another
    /// thread checkpointed since); returns the records this call wrote, if it did.
    pub(super) fn checkpoint_unless_newer(
        &self,
        seen: u64,
        reclaim: bool,
    ) -> Result<Option<u64>, AllocError> {
        let _one = lock(&self.checkpointing);
        if self.generation.load(Ordering::Relaxed) != seen {
            return Ok(None);
        }
        self.checkpoint_locked(reclaim).map(Some)
    }

    pub(super) fn checkpoint_with(&self, reclaim: bool) -> Result<(), AllocError> {
        let _one = lock(&self.checkpointing);
        self.checkpoint_locked(reclaim).map(|_| ())
    }

    /// The checkpoint, under the `checkpointing` lock; returns the records it
    /// wrote.
    fn checkpoint_locked(&self, reclaim: bool) -> Result<u64, AllocError> {
        if self.pool.is_read_only() {
            return Err(PoolError::ReadOnly.into());
        }
        let mut guards: Vec<MutexGuard<'_, Arena>> = self.arenas.iter().map(|a| lock(a)).collect();
        let old = self.area.load(Ordering::Relaxed);
        let new = 1 - old;
        let (from, to) = (&self.logs[old], &self.logs[new]);
        // The live set, and where each record will go.
        let mut words: Vec<u64> = Vec::new();
        let mut moves: Vec<(usize, u32, Option<u32>, u64)> = Vec::new(); // (arena, run, slot or run record, new pos)
        for (ai, g) in guards.iter().enumerate() {
            for (id, run) in g.runs() {
                if let RunKind::Small(c) = run.kind {
                    if run.live == 0 && !run.any_held() {
                        continue;
                    }
                    moves.push((ai, id, None, words.len() as u64));
                    words.push(
                        Record::Run {
                            class: c.id(),
                            pages: run.pages,
                            first_page: run.first_page,
                        }
                        .encode()
                        .map_err(|e| AllocError::Corrupt {
                            reason: e.to_string(),
                        })?,
                    );
                }
                for (slot, _) in run.live_slots() {
                    moves.push((ai, id, Some(slot), words.len() as u64));
                    words.push(match self.obj_word(run, slot, false, false) {
                        Ok(w) => w,
                        Err(Stop::Err(e)) => return Err(e),
                        Err(_) => {
                            return Err(AllocError::Corrupt {
                                reason: "a live record cannot be encoded".into(),
                            })
                        }
                    });
                }
            }
        }
        let n = words.len() as u64;
        if n > to.capacity() {
            return Err(AllocError::OutOfSpace { requested: n * 8 });
        }
        // The new area: the records, then zeros over whatever an earlier life left.
        // SAFETY: the inactive area is written only here, under every arena's lock.
        unsafe { to.store(&self.pool, 0, &words) }.map_err(log_error)?;
        let dirty = self.dirty[new].load(Ordering::Relaxed).min(to.capacity());
        if dirty > n {
            let zeros = vec![0u64; (dirty - n).min(8192) as usize];
            let mut at = n;
            while at < dirty {
                let k = (dirty - at).min(zeros.len() as u64);
                // SAFETY: as above.
                unsafe { to.store(&self.pool, at, &zeros[..k as usize]) }.map_err(log_error)?;
                at += k;
            }
        }
        let span = dirty.max(n);
        flush(&self.pool, Site::CheckpointFlush, to.offset_of(0), span * 8)?;
        fence(&self.pool, Site::CheckpointFence)?;
        // The switch: one failure-atomic word.
        let generation = self.generation.load(Ordering::Relaxed) + 1;
        // SAFETY: the active word is written only here, under every arena's lock.
        unsafe {
            self.pool.write_bytes_shared(
                self.geo.active_word(),
                &active_value(generation, new).to_le_bytes(),
            )?
        };
        flush(&self.pool, Site::SwitchFlush, self.geo.active_word(), 8)?;
        fence(&self.pool, Site::SwitchFence)?;
        // DRAM follows.
        for g in guards.iter_mut() {
            g.reset_chunk();
            for id in g.run_ids() {
                if let Some(run) = g.run_mut(id) {
                    if matches!(run.kind, RunKind::Small(_)) {
                        run.logged = Logged::No;
                    }
                }
            }
        }
        for (ai, id, slot, pos) in moves {
            if let Some(run) = guards[ai].run_mut(id) {
                match slot {
                    None => run.logged = Logged::Durable(pos as u32),
                    Some(s) => run.move_record(s, pos as u32),
                }
            }
        }
        self.dirty[old].store(from.tail().min(from.capacity()), Ordering::Relaxed);
        self.dirty[new].store(n, Ordering::Relaxed);
        to.reset(n.div_ceil(8) * 8);
        self.area.store(new, Ordering::Relaxed);
        self.generation.store(generation, Ordering::Relaxed);
        self.checkpoints.fetch_add(1, Ordering::Relaxed);
        if reclaim {
            for g in guards.iter_mut() {
                for id in g.run_ids() {
                    let empty = g.run(id).is_some_and(|r| r.live == 0 && !r.any_held());
                    if empty {
                        self.drop_run(g, id);
                    }
                }
            }
            lock(&self.pages).release_buckets();
        }
        tracing::debug!(records = n, generation, reclaim, "nvwa checkpoint");
        Ok(n)
    }
}
