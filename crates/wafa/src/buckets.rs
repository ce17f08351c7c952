//! 64 buckets of divided pages, indexed by the size of a page's current maximum
//! free segment, as intrusive doubly linked lists over page numbers: O(1) removal
//! and append to the tail, no allocation after construction. Each bucket also keeps
//! the sum of its pages' free units, so reform's test `TF_k.avg > k` costs O(1) per
//! bucket rather than a walk over its pages.

const NONE: u32 = u32::MAX;
/// Number of buckets (segment sizes 0..=63).
pub const BUCKETS: usize = 64;

/// The bucket lists.
#[derive(Debug)]
pub struct Buckets {
    head: [u32; BUCKETS],
    tail: [u32; BUCKETS],
    len: [u32; BUCKETS],
    /// Bit `k` set iff bucket `k` is non-empty: best fit is one bit scan.
    nonempty: u64,
    next: Vec<u32>,
    prev: Vec<u32>,
    /// Bucket of each page, or `u8::MAX` if it is in none.
    of: Vec<u8>,
    /// Free units of each page in a bucket, as counted in its bucket's sum.
    units: Vec<u8>,
    /// Sum of the free units of the pages of each bucket.
    free_units: [u64; BUCKETS],
}

impl Buckets {
    /// Empty buckets for `pages` pages.
    pub fn new(pages: usize) -> Buckets {
        Buckets {
            head: [NONE; BUCKETS],
            tail: [NONE; BUCKETS],
            len: [0; BUCKETS],
            nonempty: 0,
            next: vec![NONE; pages],
            prev: vec![NONE; pages],
            of: vec![u8::MAX; pages],
            units: vec![0; pages],
            free_units: [0; BUCKETS],
        }
    }

    /// The first page of bucket `k`.
    #[inline]
    pub fn first(&self, k: usize) -> Option<u32> {
        let h = self.head[k];
        (h != NONE).then_some(h)
    }

    /// The first page of the smallest non-empty bucket `>= k`.
    #[inline]
    pub fn first_at_least(&self, k: usize) -> Option<u32> {
        let above = if k >= BUCKETS { 0 } else { self.nonempty >> k };
        if above == 0 {
            return None;
        }
        self.first(k + above.trailing_zeros() as usize)
    }

    /// The bucket page `p` is in.
    pub fn bucket_of(&self, p: u32) -> Option<usize> {
        let b = self.of[p as usize];
        (b != u8::MAX).then_some(b as usize)
    }

    /// Pages in bucket `k`.
    pub fn len(&self, k: usize) -> u32 {
        self.len[k]
    }

    /// Sum of the free units of the pages in bucket `k`.
    pub fn free_units(&self, k: usize) -> u64 {
        self.free_units[k]
    }

    /// Records `n` more free units of page `p` (a free) in its bucket's sum.
    #[inline]
    pub fn add_free(&mut self, p: u32, n: u8) {
        if let Some(k) = self.bucket_of(p) {
            self.units[p as usize] += n;
            self.free_units[k] += u64::from(n);
        }
    }

    /// Removes page `p` from its bucket (if any).
    #[inline]
    pub fn remove(&mut self, p: u32) {
        let Some(k) = self.bucket_of(p) else { return };
        let (n, pr) = (self.next[p as usize], self.prev[p as usize]);
        if pr == NONE {
            self.head[k] = n;
        } else {
            self.next[pr as usize] = n;
        }
        if n == NONE {
            self.tail[k] = pr;
        } else {
            self.prev[n as usize] = pr;
        }
        self.next[p as usize] = NONE;
        self.prev[p as usize] = NONE;
        self.of[p as usize] = u8::MAX;
        self.free_units[k] -= u64::from(self.units[p as usize]);
        self.units[p as usize] = 0;
        self.len[k] -= 1;
        if self.len[k] == 0 {
            self.nonempty &= !(1 << k);
        }
    }

    /// Moves page `p`, which has `free` free units, to the tail of bucket `k`.
    #[inline]
    pub fn push_tail(&mut self, k: usize, p: u32, free: u8) {
        self.remove(p);
        let t = self.tail[k];
        self.prev[p as usize] = t;
        self.next[p as usize] = NONE;
        if t == NONE {
            self.head[k] = p;
        } else {
            self.next[t as usize] = p;
        }
        self.tail[k] = p;
        self.of[p as usize] = k as u8;
        self.units[p as usize] = free;
        self.free_units[k] += u64::from(free);
        self.len[k] += 1;
        self.nonempty |= 1 << k;
    }

    /// The pages of bucket `k`, head to tail.
    pub fn pages(&self, k: usize) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.len[k] as usize);
        let mut p = self.head[k];
        while p != NONE && out.len() < self.next.len() {
            out.push(p);
            p = self.next[p as usize];
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_order_and_moves() {
        let mut b = Buckets::new(8);
        for p in [3, 1, 5] {
            b.push_tail(10, p, 20);
        }
        assert_eq!(b.pages(10), vec![3, 1, 5]);
        assert_eq!(b.first(10), Some(3));
        assert_eq!(b.free_units(10), 60);
        b.push_tail(10, 3, 12); // to the tail again
        assert_eq!(b.pages(10), vec![1, 5, 3]);
        assert_eq!(b.free_units(10), 52);
        b.push_tail(2, 5, 4);
        b.add_free(5, 3);
        assert_eq!((b.free_units(2), b.free_units(10)), (7, 32));
        assert_eq!(b.pages(10), vec![1, 3]);
        assert_eq!(b.pages(2), vec![5]);
        assert_eq!(b.bucket_of(5), Some(2));
        b.remove(1);
        b.remove(1);
        assert_eq!(b.pages(10), vec![3]);
        assert_eq!(b.len(10), 1);
        assert_eq!(b.free_units(10), 12);
        assert_eq!(b.first(0), None);
        assert_eq!(b.first_at_least(0), Some(5));
        assert_eq!(b.first_at_least(3), Some(3));
        assert_eq!(b.first_at_least(11), None);
        assert_eq!(b.first_at_least(64), None);
    }
}
