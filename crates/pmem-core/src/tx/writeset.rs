//! The DRAM write set of a redo or lazy transaction: the new bytes it staged, by
//! pool offset, disjoint and merged, read back through the transaction.
//!
//! Entries are kept sorted in a vector and their bytes in one arena, both reused
//! from transaction to transaction (they live in the lane's scratch buffers), so a
//! small transaction stages its writes without allocating.

use super::Hint;

/// One staged range: `len` bytes at pool offset `start`, found at `at` in the arena.
#[derive(Clone, Copy, Debug)]
struct Entry {
    start: u64,
    at: usize,
    len: usize,
    hint: Hint,
}

impl Entry {
    fn end(&self) -> u64 {
        self.start + self.len as u64
    }
}

/// Staged writes, disjoint and sorted by offset.
#[derive(Debug, Default)]
pub(crate) struct WriteSet {
    entries: Vec<Entry>,
    arena: Vec<u8>,
    /// Scratch for merging.
    merged: Vec<u8>,
}

impl WriteSet {
    pub fn clear(&mut self) {
        self.entries.clear();
        self.arena.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Stages `bytes` at `offset`. Entries it overlaps or touches merge with it
    /// into one; `fill` provides the bytes of any gap (none can occur, since merged
    /// entries overlap or touch, but it keeps the merge total). A merged entry is an
    /// object record unless all its parts asked for words.
    pub fn stage(&mut self, offset: u64, bytes: &[u8], hint: Hint) {
        let end = offset + bytes.len() as u64;
        // The entries that overlap or touch [offset, end).
        let first = self.entries.partition_point(|e| e.end() < offset);
        let last = self.entries.partition_point(|e| e.start <= end);
        if first == last {
            // Nothing to merge: the common case.
            let at = self.arena.len();
            self.arena.extend_from_slice(bytes);
            self.entries.insert(
                first,
                Entry {
                    start: offset,
                    at,
                    len: bytes.len(),
                    hint,
                },
            );
            return;
        }
        let start = offset.min(self.entries[first].start);
        let stop = end.max(self.entries[last - 1].end());
        let mut merged = std::mem::take(&mut self.merged);
        merged.clear();
        merged.resize((stop - start) as usize, 0);
        let mut hint = hint;
        for e in &self.entries[first..last] {
            let to = (e.start - start) as usize;
            merged[to..to + e.len].copy_from_slice(&self.arena[e.at..e.at + e.len]);
            if e.hint == Hint::Object {
                hint = Hint::Object;
            }
        }
        let to = (offset - start) as usize;
        merged[to..to + bytes.len()].copy_from_slice(bytes);
        let at = self.arena.len();
        self.arena.extend_from_slice(&merged);
        self.entries.drain(first + 1..last);
        self.entries[first] = Entry {
            start,
            at,
            len: merged.len(),
            hint,
        };
        self.merged = merged;
    }

    /// Copies the staged bytes that fall in `[offset, offset + out.len())` over
    /// `out`.
    pub fn overlay(&self, offset: u64, out: &mut [u8]) {
        let end = offset + out.len() as u64;
        let first = self.entries.partition_point(|e| e.end() <= offset);
        for e in self.entries[first..].iter().take_while(|e| e.start < end) {
            let (lo, hi) = (e.start.max(offset), e.end().min(end));
            let src = e.at + (lo - e.start) as usize;
            out[(lo - offset) as usize..(hi - offset) as usize]
                .copy_from_slice(&self.arena[src..src + (hi - lo) as usize]);
        }
    }

    /// The staged ranges in offset order: (offset, bytes, hint).
    pub fn iter(&self) -> impl Iterator<Item = (u64, &[u8], Hint)> + '_ {
        self.entries
            .iter()
            .map(|e| (e.start, &self.arena[e.at..e.at + e.len], e.hint))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn staged(w: &WriteSet) -> Vec<(u64, Vec<u8>, Hint)> {
        w.iter().map(|(o, b, h)| (o, b.to_vec(), h)).collect()
    }

    #[test]
    fn disjoint_writes_stay_apart_and_sorted() {
        let mut w = WriteSet::default();
        w.stage(100, &[1, 2], Hint::Word);
        w.stage(10, &[3], Hint::Object);
        assert_eq!(
            staged(&w),
            vec![(10, vec![3], Hint::Object), (100, vec![1, 2], Hint::Word)]
        );
    }

    #[test]
    fn overlapping_and_touching_writes_merge_last_write_wins() {
        let mut w = WriteSet::default();
        w.stage(10, &[1, 1, 1, 1], Hint::Word);
        w.stage(20, &[2, 2], Hint::Word);
        w.stage(14, &[3; 6], Hint::Word); // touches the first, touches the second
        assert_eq!(
            staged(&w),
            vec![(
                10,
                [1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 2, 2].to_vec(),
                Hint::Word
            )]
        );
        w.stage(12, &[9], Hint::Object);
        let s = staged(&w);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].1[2], 9);
        assert_eq!(s[0].2, Hint::Object);
    }

    #[test]
    fn overlay_reads_back_only_the_staged_bytes() {
        let mut w = WriteSet::default();
        w.stage(8, &[5, 6], Hint::Object);
        w.stage(20, &[7], Hint::Object);
        let mut out = [0u8; 16];
        w.overlay(6, &mut out);
        assert_eq!(&out[..5], &[0, 0, 5, 6, 0]);
        assert_eq!(out[14], 7);
        w.clear();
        assert!(w.is_empty());
    }
}
