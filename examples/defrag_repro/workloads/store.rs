//! The store abstraction the data structures are written against once: objects of
//! a few fixed shapes ([`Kind`]: pointers, then 64-bit words, then value bytes),
//! read and written whole ([`Obj`]), allocated, freed, and named by up to eight
//! roots. Two backends implement [`Store`]: pmkit's `DefragTx`
//! ([`super::pmkit_store`]) and libpmemobj ([`super::pmdk_store`]).
//!
//! A [`Ref`] is an object's offset in its pool, valid only within one workload
//! operation: both heaps move objects between operations, so the data structures
//! keep no reference across operations (every operation starts from a root).

/// An object's offset in its pool (0: null). Valid within one operation only.
pub type Ref = u64;

/// Bytes of a value (the paper's 128 B).
pub const VALUE: usize = 128;

/// The object kinds of every workload; the discriminant is the pmkit type id and
/// the PMDK type number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// `ll`: next; key; value.
    List = 1,
    /// `avl`: left, right; key, height; value.
    Avl,
    /// `rbt`: left, right; key, colour; value.
    Rb,
    /// `bt`: 5 children, 4 value objects; meta (keys, leaf flag), 4 keys.
    BNode,
    /// `bt`: a 128-byte value of a leaf.
    Val,
    /// `ss`: a radix-8 node: 8 children, then 8 string slots per class.
    RNode,
    /// `ss`: strings of the four lengths (key word + bytes: 64, 128, 192, 256 B).
    S0,
    /// See [`Kind::S0`].
    S1,
    /// See [`Kind::S0`].
    S2,
    /// See [`Kind::S0`].
    S3,
    /// `lru` and the concurrent hash map: hash chain, recency prev/next; key; value.
    HNode,
    /// The hash directory's top: 16 middle directories.
    HTop,
    /// A middle hash directory: 16 directories.
    HMid,
    /// A hash directory: 16 bucket heads.
    HDir,
}

/// The layout of a kind: `p` pointers, `w` words, `v` value bytes, in that order.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Pointer fields.
    pub p: usize,
    /// 64-bit words.
    pub w: usize,
    /// Value bytes.
    pub v: usize,
}

impl Shape {
    /// Bytes of an object whose pointers are `ptr` bytes wide (pmkit 8, PMDK's
    /// `PMEMoid` 16).
    pub const fn bytes(self, ptr: usize) -> usize {
        self.p * ptr + self.w * 8 + self.v
    }
}

/// Most pointers of a kind.
pub const MAXP: usize = 40;
/// Most words of a kind.
pub const MAXW: usize = 5;
/// Most value bytes of a kind.
pub const MAXV: usize = 248;

/// The string lengths of `ss` (value bytes of `S0`..`S3`).
pub const STR_BYTES: [usize; 4] = [56, 120, 184, 248];

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 14] = [
        Kind::List,
        Kind::Avl,
        Kind::Rb,
        Kind::BNode,
        Kind::Val,
        Kind::RNode,
        Kind::S0,
        Kind::S1,
        Kind::S2,
        Kind::S3,
        Kind::HNode,
        Kind::HTop,
        Kind::HMid,
        Kind::HDir,
    ];

    /// The kind's layout.
    pub const fn shape(self) -> Shape {
        let (p, w, v) = match self {
            Kind::List => (1, 1, VALUE),
            Kind::Avl | Kind::Rb => (2, 2, VALUE),
            Kind::BNode => (9, 5, 0),
            Kind::Val => (0, 0, VALUE),
            Kind::RNode => (40, 0, 0),
            Kind::S0 => (0, 1, STR_BYTES[0]),
            Kind::S1 => (0, 1, STR_BYTES[1]),
            Kind::S2 => (0, 1, STR_BYTES[2]),
            Kind::S3 => (0, 1, STR_BYTES[3]),
            Kind::HNode => (3, 1, VALUE),
            Kind::HTop | Kind::HMid | Kind::HDir => (16, 0, 0),
        };
        Shape { p, w, v }
    }

    /// The kind with type id / type number `id`.
    pub fn from_id(id: u64) -> Option<Kind> {
        Kind::ALL.iter().copied().find(|k| *k as u64 == id)
    }

    /// The string kind of class `c` (0..4).
    pub fn string(c: usize) -> Kind {
        [Kind::S0, Kind::S1, Kind::S2, Kind::S3][c % 4]
    }
}

/// An object as DRAM sees it (fields past the kind's shape are zero).
#[derive(Clone)]
pub struct Obj {
    /// Pointers.
    pub p: [Ref; MAXP],
    /// Words.
    pub w: [u64; MAXW],
    /// Value bytes.
    pub v: [u8; MAXV],
}

impl Obj {
    /// All zero (null pointers).
    pub fn zero() -> Obj {
        Obj {
            p: [0; MAXP],
            w: [0; MAXW],
            v: [0; MAXV],
        }
    }

    /// Parses an object of `shape` from `bytes`, whose pointers are `ptr` bytes
    /// wide with the offset in their last 8 bytes (a pmkit `PPtr`, a PMDK
    /// `PMEMoid { pool_uuid_lo, off }`).
    pub fn decode(shape: Shape, bytes: &[u8], ptr: usize) -> Obj {
        let mut o = Obj::zero();
        let word = |at: usize| {
            bytes
                .get(at..at + 8)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_le_bytes)
        };
        for i in 0..shape.p {
            o.p[i] = word(i * ptr + ptr - 8);
        }
        let base = shape.p * ptr;
        for i in 0..shape.w {
            o.w[i] = word(base + 8 * i);
        }
        let base = base + 8 * shape.w;
        if let Some(v) = bytes.get(base..base + shape.v) {
            o.v[..shape.v].copy_from_slice(v);
        }
        o
    }

    /// The bytes of this object as `shape` with `ptr`-byte pointers; a 16-byte
    /// pointer gets `uuid` in its first 8 bytes (PMDK's `pool_uuid_lo`; a null
    /// `PMEMoid` is all zero).
    pub fn encode(&self, shape: Shape, ptr: usize, uuid: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(shape.bytes(ptr));
        for &r in &self.p[..shape.p] {
            if ptr == 16 {
                out.extend_from_slice(&(if r == 0 { 0 } else { uuid }).to_le_bytes());
            }
            out.extend_from_slice(&r.to_le_bytes());
        }
        for &w in &self.w[..shape.w] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&self.v[..shape.v]);
        out
    }
}

/// A heap the data structures run on; one workload operation is one sequence of
/// these calls (for pmkit, one transaction).
pub trait Store {
    /// The backend's error.
    type E;
    /// An error of the data structure itself (a broken invariant).
    fn fail(msg: String) -> Self::E;
    /// A zeroed object of kind `k`.
    fn alloc(&mut self, k: Kind) -> Result<Ref, Self::E>;
    /// Frees the `k` at `r`.
    fn free(&mut self, k: Kind, r: Ref) -> Result<(), Self::E>;
    /// Reads the `k` at `r`.
    fn get(&mut self, k: Kind, r: Ref) -> Result<Obj, Self::E>;
    /// Writes the `k` at `r`.
    fn put(&mut self, k: Kind, r: Ref, o: &Obj) -> Result<(), Self::E>;
    /// Root `i` (0..8), a `k` or null.
    fn root(&mut self, i: usize, k: Kind) -> Result<Ref, Self::E>;
    /// Sets root `i` to the `k` at `r` (0: null).
    fn set_root(&mut self, i: usize, k: Kind, r: Ref) -> Result<(), Self::E>;
}

/// Roots a store offers.
pub const ROOTS: usize = 8;

/// The workspace's one seeded generator: every backend replays the same operations
/// from the same seed.
pub use pmem_core::SplitMix64 as Rng;

impl Obj {
    /// Fills the first `len` value bytes with `tag` (a workload's value).
    pub fn set_value(&mut self, len: usize, tag: u8) {
        self.v[..len.min(MAXV)].fill(tag);
    }

    /// The tag of a value of `len` bytes; `None` if its bytes differ (torn or
    /// corrupted).
    pub fn tag(&self, len: usize) -> Option<u8> {
        let v = &self.v[..len.clamp(1, MAXV)];
        v.iter().all(|&b| b == v[0]).then_some(v[0])
    }
}

/// The tag of `o`'s value of `len` bytes, or the store's error naming `what`.
pub fn tag_of<S: Store>(o: &Obj, len: usize, what: &str) -> Result<u8, S::E> {
    o.tag(len)
        .ok_or_else(|| S::fail(format!("{what}: a value's bytes differ")))
}
