//! 64 buckets of divided pages, indexed by the size of a page's current maximum
//! free segment, as intrusive doubly linked lists over page numbers: O(1) removal
//! and append to the tail, no allocation after construction. Each bucket also keeps
//! the sum of its pages' free units, so reform's test `TF_k.avg > k` costs O(1) per
//! bucket rather than a walk over its pages.

const NONE: u32 = u32::MAX;
/// Number of buckets (segment sizes 0..=63).
pub const BUCKETS: usize = 64;

/// A page's place in the buckets.
#[derive(Clone, Copy, Debug)]
struct Link {
    next: u32,
    prev: u32,
    /// Bucket of the page, or `u8::MAX` if it is in none.
    of: u8,
    /// Free units of the page, as counted in its bucket's sum.
    units: u8,
}

const UNLINKED: Link = Link {
    next: NONE,
    prev: NONE,
    of: u8::MAX,
    units: 0,
};

/// The bucket lists.
#[derive(Debug)]
pub struct Buckets {
    head: [u32; BUCKETS],
    tail: [u32; BUCKETS],
    len: [u32; BUCKETS],
    /// Bit `k` set iff bucket `k` is non-empty: best fit is one bit scan.
    nonempty: u64,
    /// Each page's links, bucket and counted free units (one entry per page, so
    /// one bounds check and one cache line per page touched).
    links: Vec<Link>,
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
            links: vec![UNLINKED; pages],
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
    #[inline]
    pub fn bucket_of(&self, p: u32) -> Option<usize> {
        let b = self.links.get(p as usize)?.of;
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
        if let Some(l) = self.links.get_mut(p as usize) {
            if let Some(sum) = self.free_units.get_mut(usize::from(l.of)) {
                l.units += n;
                *sum += u64::from(n);
            }
        }
    }

    /// Removes page `p` from its bucket (if any).
    #[inline]
    pub fn remove(&mut self, p: u32) {
        let Some(&l) = self.links.get(p as usize) else {
            return;
        };
        let k = usize::from(l.of);
        if k >= BUCKETS {
            return;
        }
        if l.prev == NONE {
            self.head[k] = l.next;
        } else {
            self.links[l.prev as usize].next = l.next;
        }
        if l.next == NONE {
            self.tail[k] = l.prev;
        } else {
            self.links[l.next as usize].prev = l.prev;
        }
        self.links[p as usize] = UNLINKED;
        self.free_units[k] -= u64::from(l.units);
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
        self.links[p as usize] = Link {
            next: NONE,
            prev: t,
            of: k as u8,
            units: free,
        };
        if t == NONE {
            self.head[k] = p;
        } else {
            self.links[t as usize].next = p;
        }
        self.tail[k] = p;
        self.free_units[k] += u64::from(free);
        self.len[k] += 1;
        self.nonempty |= 1 << k;
    }

    /// The pages of bucket `k`, head to tail.
    pub fn pages(&self, k: usize) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.len[k] as usize);
        let mut p = self.head[k];
        while p != NONE && out.len() < self.links.len() {
            out.push(p);
            p = self.links[p as usize].next;
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
