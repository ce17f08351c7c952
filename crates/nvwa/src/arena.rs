//! An arena: the DRAM allocator state one group of threads works in under its own
//! lock (jemalloc's arenas, which are its per-thread caches here): its runs, a bin
//! per small class with the runs that have a free slot, and the chunk of log
//! positions its records go to.
//!
//! A thread allocates from its own arena, so two threads never share a lock on
//! the fast path. A free goes to the arena that owns the object's run (found
//! through the heap's page table), under that arena's lock: remote frees are
//! rare, short, and keep every run's state in one place.

use pmem_core::Pool;

use crate::classes::SIZES;
use crate::log::{AllocLog, LogError};
use crate::run::{Run, RunKind};

/// Log positions an arena reserves at a time (8 whole lines).
pub const CHUNK: u64 = 64;
const LINE_WORDS: u64 = 8;

/// One arena.
#[derive(Debug)]
pub struct Arena {
    /// Its index among the heap's arenas.
    pub index: usize,
    runs: Vec<Option<Run>>,
    vacant: Vec<u32>,
    /// Per small class: runs with a free slot (the last is used first).
    bins: Vec<Vec<u32>>,
    /// Next log position of the chunk, and its end.
    next: u64,
    end: u64,
}

impl Arena {
    /// An empty arena.
    pub fn new(index: usize) -> Arena {
        Arena {
            index,
            runs: Vec::new(),
            vacant: Vec::new(),
            bins: vec![Vec::new(); SIZES.len()],
            next: 0,
            end: 0,
        }
    }

    /// Adds a run; returns its id.
    pub fn insert(&mut self, run: Run) -> u32 {
        let id = match self.vacant.pop() {
            Some(id) => {
                self.runs[id as usize] = Some(run);
                id
            }
            None => {
                self.runs.push(Some(run));
                (self.runs.len() - 1) as u32
            }
        };
        self.rebin(id);
        id
    }

    /// Removes a run.
    pub fn remove(&mut self, id: u32) -> Option<Run> {
        let run = self.runs.get_mut(id as usize)?.take()?;
        if let RunKind::Small(c) = run.kind {
            if run.in_bin {
                self.bins[usize::from(c.0)].retain(|&r| r != id);
            }
        }
        self.vacant.push(id);
        Some(run)
    }

    /// The run `id`.
    pub fn run(&self, id: u32) -> Option<&Run> {
        self.runs.get(id as usize)?.as_ref()
    }

    /// The run `id`, mutable.
    pub fn run_mut(&mut self, id: u32) -> Option<&mut Run> {
        self.runs.get_mut(id as usize)?.as_mut()
    }

    /// Every run with its id.
    pub fn runs(&self) -> impl Iterator<Item = (u32, &Run)> {
        self.runs
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().map(|r| (i as u32, r)))
    }

    /// Ids of every run.
    pub fn run_ids(&self) -> Vec<u32> {
        self.runs().map(|(id, _)| id).collect()
    }

    /// A run of class `class` with a free slot, if the arena has one.
    pub fn run_with_room(&mut self, class: usize) -> Option<u32> {
        while let Some(&id) = self.bins[class].last() {
            if self.runs[id as usize].as_ref().is_some_and(Run::has_room) {
                return Some(id);
            }
            self.bins[class].pop();
            if let Some(r) = self.runs[id as usize].as_mut() {
                r.in_bin = false;
            }
        }
        None
    }

    /// Puts a small run back on its bin if it has room again.
    pub fn rebin(&mut self, id: u32) {
        let Some(run) = self.runs.get_mut(id as usize).and_then(Option::as_mut) else {
            return;
        };
        if let RunKind::Small(c) = run.kind {
            if !run.in_bin && run.has_room() {
                run.in_bin = true;
                self.bins[usize::from(c.0)].push(id);
            }
        }
    }

    /// Forgets the arena's chunk (a checkpoint made a new log).
    pub fn reset_chunk(&mut self) {
        self.next = 0;
        self.end = 0;
    }

    /// Stores `words` (at most a line's worth) at the next positions of the arena's
    /// chunk, never across a line, so the group costs one flush; reserves a new
    /// chunk from `log` when this one is used up. Not flushed: the caller flushes
    /// and fences. Returns the first position.
    pub fn append(&mut self, pool: &Pool, log: &AllocLog, words: &[u64]) -> Result<u64, LogError> {
        let n = words.len() as u64;
        debug_assert!(n > 0 && n <= LINE_WORDS);
        let left_in_line = LINE_WORDS - self.next % LINE_WORDS;
        if n > left_in_line {
            self.next += left_in_line;
        }
        if self.next + n > self.end {
            // A whole chunk, or the last line when the log is nearly full.
            let (at, got) = match log.reserve(CHUNK) {
                Ok(at) => (at, CHUNK),
                Err(_) => (log.reserve(LINE_WORDS)?, LINE_WORDS),
            };
            self.next = at;
            self.end = at + got;
        }
        let at = self.next;
        // SAFETY: positions at..at + n lie in this arena's chunk (reserved from the
        // log by it alone) and are written only under its lock, which `&mut self`
        // stands for.
        unsafe { log.store(pool, at, words)? };
        self.next += n;
        Ok(at)
    }
}
