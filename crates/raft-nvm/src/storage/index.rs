//! The DRAM index both engines share: a `BTreeMap` from (key, Raft index) to where
//! that version lives, plus the Raft log's metadata (term of each recent index, the
//! keys an unapplied entry wrote, for truncation).
//!
//! Keys of the map are [`VKey`]s, one byte string per `(key, index)`, so the versions
//! of a key are adjacent and ordered by index, and a lookup for "the greatest version
//! ≤ ts" is one `range(..=probe).next_back()` with a probe built inline: no
//! allocation on the read path for short keys.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;

use crate::storage::error::{Result, StoreError};

/// How many applied entries below the compaction floor keep their metadata in DRAM
/// (their terms serve Raft's consistency checks on a follower's recent log).
/// Entries above the floor always keep it: a leader re-sends them from the store to
/// a lagging follower, which is far cheaper than a snapshot.
pub const RETAIN_APPLIED: u64 = 1024;

pub use crate::storage::vkey::VKey;

/// The encoded (key, ts) of the map.
pub fn vkey(key: &[u8], ts: u64) -> VKey {
    VKey::new(key, ts)
}

/// The key and index a map key encodes.
pub fn split_vkey(v: &VKey) -> (&[u8], u64) {
    (v.key(), v.ts())
}

/// What the map holds for a version.
pub trait Version: Clone {
    /// Whether this version deletes the key.
    fn is_tombstone(&self) -> bool;
}

/// Per-entry metadata of the Raft log.
#[derive(Clone, Debug)]
pub struct EntryMeta {
    /// The entry's term.
    pub term: u64,
    /// The map key it wrote (none for no-ops).
    pub vkey: Option<VKey>,
    /// Engine-specific location of the entry's record (0 if none).
    pub loc: u64,
}

/// The index: versions and log metadata.
#[derive(Debug)]
pub struct Index<V> {
    map: BTreeMap<VKey, V>,
    entries: VecDeque<EntryMeta>,
    first: u64,
    base: u64,
    base_term: u64,
    applied: u64,
    floor: u64,
}

impl<V: Version> Default for Index<V> {
    fn default() -> Self {
        Index {
            map: BTreeMap::new(),
            entries: VecDeque::new(),
            first: 1,
            base: 0,
            base_term: 0,
            applied: 0,
            floor: 0,
        }
    }
}

impl<V: Version> Index<V> {
    /// The last Raft index held.
    pub fn last_index(&self) -> u64 {
        self.first - 1 + self.entries.len() as u64
    }

    /// The term of the last index.
    pub fn last_term(&self) -> u64 {
        self.entries.back().map_or(self.base_term, |e| e.term)
    }

    /// Everything at or below this index was compacted or came with a snapshot.
    pub fn base(&self) -> (u64, u64) {
        (self.base, self.base_term)
    }

    /// The applied index (reads at or above it are never affected by compaction).
    pub fn applied(&self) -> u64 {
        self.applied
    }

    /// Versions superseded at or below this index may be gone (compaction); reads and
    /// snapshots at or above it are exact.
    pub fn floor(&self) -> u64 {
        self.floor.max(self.base)
    }

    /// Raises [`Index::floor`] after a compaction at `base`.
    pub fn raise_floor(&mut self, base: u64) {
        self.floor = self.floor.max(base);
        self.trim();
    }

    /// Drops the metadata of entries below both the compaction floor and the last
    /// [`RETAIN_APPLIED`] applied entries. (Their records are gone or about to be
    /// rewritten, so a follower that needs them gets a snapshot.)
    fn trim(&mut self) {
        let keep_from = self
            .floor()
            .min(self.applied.saturating_sub(RETAIN_APPLIED));
        while self.first < keep_from && !self.entries.is_empty() {
            self.entries.pop_front();
            self.first += 1;
        }
    }

    /// Where a snapshot at `at` stands, if one can be taken there: between the
    /// floor and the applied index, with `at`'s term known.
    pub fn snapshot_meta(&self, at: u64) -> Result<crate::storage::store::SnapshotMeta> {
        let (floor, applied) = (self.floor(), self.applied());
        match self.term_at(at) {
            Some(term) if at >= floor && at <= applied => {
                Ok(crate::storage::store::SnapshotMeta { index: at, term })
            }
            _ => Err(StoreError::SnapshotUnavailable { at, floor, applied }),
        }
    }

    /// Checks that the store holds nothing (snapshot installation needs that).
    pub fn check_empty(&self) -> Result<()> {
        let last = self.last_index();
        if last != 0 || !self.map.is_empty() || self.base != 0 {
            return Err(StoreError::NotEmpty { last });
        }
        Ok(())
    }

    /// The term of `index`, if the index is still known.
    pub fn term_at(&self, index: u64) -> Option<u64> {
        if index == self.base {
            return Some(self.base_term);
        }
        if index >= self.first && index <= self.last_index() {
            return Some(self.entries[(index - self.first) as usize].term);
        }
        None
    }

    /// The terms of `from..=to`, if all are known.
    pub fn terms(&self, from: u64, to: u64) -> Option<Vec<u64>> {
        (from..=to).map(|i| self.term_at(i)).collect()
    }

    /// The metadata of `index`, if still held.
    pub fn entry(&self, index: u64) -> Option<&EntryMeta> {
        index
            .checked_sub(self.first)
            .and_then(|i| self.entries.get(i as usize))
    }

    /// Resets the log to start after `(index, term)`; the map keeps its versions.
    pub fn set_base(&mut self, index: u64, term: u64) {
        self.base = index;
        self.base_term = term;
        // `index` may come from a peer's snapshot metadata (checked by
        // `Message::validate`, far below `u64::MAX`): never an overflow panic here.
        self.first = index.saturating_add(1);
        self.entries.clear();
        self.applied = self.applied.max(index);
    }

    /// Checks that `index` may be appended next.
    pub fn check_next(&self, index: u64) -> Result<()> {
        let last = self.last_index();
        if index != last + 1 {
            return Err(StoreError::OutOfOrder { index, last });
        }
        Ok(())
    }

    /// Records entry `index` (already checked with [`Index::check_next`]); `version`
    /// is `Some((key, v))` for puts and deletes.
    pub fn push(&mut self, term: u64, version: Option<(VKey, V)>, loc: u64) {
        let vkey = version.map(|(k, v)| {
            self.map.insert(k.clone(), v);
            k
        });
        self.entries.push_back(EntryMeta { term, vkey, loc });
    }

    /// Inserts a version that is at or below the base (compaction output or snapshot
    /// contents): it is not a log entry.
    pub fn insert_old(&mut self, key: VKey, v: V) {
        self.map.insert(key, v);
    }

    /// Discards entries above `after`.
    pub fn truncate_after(&mut self, after: u64) -> Result<()> {
        self.check_truncate(after)?;
        while self.last_index() > after {
            if let Some(e) = self.entries.pop_back() {
                if let Some(k) = e.vkey {
                    self.map.remove(&k);
                }
            }
        }
        Ok(())
    }

    /// Refuses to discard applied (or compacted) entries.
    fn check_truncate(&self, after: u64) -> Result<()> {
        let applied = self.applied.max(self.base);
        if after < applied {
            return Err(StoreError::TruncateApplied { after, applied });
        }
        Ok(())
    }

    /// Raises the applied index (and trims log metadata the floor left behind).
    pub fn set_applied(&mut self, applied: u64) {
        self.applied = self.applied.max(applied.min(self.last_index()));
        self.trim();
    }

    /// The greatest version of `key` at or below `ts`, with its index (tombstones
    /// included).
    pub fn version_at(&self, key: &[u8], ts: u64) -> Option<(u64, &V)> {
        if key.len() > usize::from(u16::MAX) {
            return None;
        }
        let probe = VKey::new(key, ts);
        let (k, v) = self.map.range(..=probe).next_back()?;
        (k.key() == key).then_some((k.ts(), v))
    }

    /// The visible version of `key` at `ts` (`None` if absent or deleted).
    pub fn get(&self, key: &[u8], ts: u64) -> Option<&V> {
        self.version_at(key, ts)
            .and_then(|(_, v)| (!v.is_tombstone()).then_some(v))
    }

    /// The version stored under an exact map key.
    pub fn get_exact(&self, vkey: &VKey) -> Option<&V> {
        self.map.get(vkey)
    }

    /// Replaces the version under `vkey` if it is still `old` (compaction's remap).
    pub fn remap(&mut self, vkey: &VKey, is_old: impl Fn(&V) -> bool, new: Option<V>) -> bool {
        match self.map.get_mut(vkey) {
            Some(v) if is_old(v) => {
                match new {
                    Some(n) => *v = n,
                    None => {
                        self.map.remove(vkey);
                    }
                }
                true
            }
            _ => false,
        }
    }

    /// Updates the location of entry `index` if it is still `old`.
    pub fn remap_entry(&mut self, index: u64, old: u64, new: u64) {
        if let Some(i) = index.checked_sub(self.first) {
            if let Some(e) = self.entries.get_mut(i as usize) {
                if e.loc == old {
                    e.loc = new;
                }
            }
        }
    }

    /// Forgets the location of every entry at or below `up_to` whose location
    /// `gone` says was dropped (compaction: its page is about to be recycled).
    pub fn forget_entry_locations(&mut self, up_to: u64, gone: impl Fn(u64) -> bool) {
        let end = up_to.saturating_sub(self.first).saturating_add(1);
        for e in self
            .entries
            .iter_mut()
            .take(end.min(usize::MAX as u64) as usize)
        {
            if e.loc != 0 && gone(e.loc) {
                e.loc = 0;
            }
        }
    }

    /// Number of versions (all keys, all indexes, tombstones included).
    pub fn versions(&self) -> usize {
        self.map.len()
    }

    /// The map keys from `after` (exclusive) on, at most `max` of them, that are the
    /// visible version at `at` of their key: one chunk of a snapshot.
    pub fn visible_chunk(&self, after: Option<&VKey>, at: u64, max: usize) -> Vec<(VKey, V)> {
        let lower = match after {
            Some(a) => Bound::Excluded(a),
            None => Bound::Unbounded,
        };
        let mut out = Vec::new();
        let mut iter = self
            .map
            .range::<VKey, _>((lower, Bound::Unbounded))
            .peekable();
        while let Some((k, v)) = iter.next() {
            let (key, ts) = split_vkey(k);
            if ts > at {
                continue;
            }
            // The visible version is the last one <= at before the key changes.
            let superseded = iter.peek().is_some_and(|(nk, _)| {
                let (nkey, nts) = split_vkey(nk);
                nkey == key && nts <= at
            });
            if superseded || v.is_tombstone() {
                continue;
            }
            out.push((k.clone(), v.clone()));
            if out.len() >= max {
                break;
            }
        }
        out
    }
}

/// Builds an [`Index`] while recovery replays a store's records in log order.
///
/// Replaying into the B-tree one random key at a time costs a cache miss per level
/// for every record; the builder collects the versions instead (a rollback removes
/// its entries' versions, which are always the newest) and builds the tree once,
/// from sorted input, when the replay is done. The log metadata is kept as
/// [`Index`] keeps it.
#[derive(Debug)]
pub struct IndexBuilder<V> {
    index: Index<V>,
    /// The versions replayed so far, in replay order (later ones win).
    versions: Vec<(VKey, V)>,
}

impl<V: Version> Default for IndexBuilder<V> {
    fn default() -> Self {
        IndexBuilder {
            index: Index::default(),
            versions: Vec::new(),
        }
    }
}

impl<V: Version> IndexBuilder<V> {
    /// See [`Index::last_index`].
    pub fn last_index(&self) -> u64 {
        self.index.last_index()
    }

    /// See [`Index::base`].
    pub fn base(&self) -> (u64, u64) {
        self.index.base()
    }

    /// See [`Index::versions`].
    pub fn versions(&self) -> usize {
        self.versions.len()
    }

    /// See [`Index::set_base`].
    pub fn set_base(&mut self, index: u64, term: u64) {
        self.index.set_base(index, term);
    }

    /// See [`Index::check_next`].
    pub fn check_next(&self, index: u64) -> Result<()> {
        self.index.check_next(index)
    }

    /// See [`Index::push`].
    pub fn push(&mut self, term: u64, version: Option<(VKey, V)>, loc: u64) {
        let vkey = version.map(|(k, v)| {
            self.versions.push((k.clone(), v));
            k
        });
        self.index.entries.push_back(EntryMeta { term, vkey, loc });
    }

    /// See [`Index::insert_old`].
    pub fn insert_old(&mut self, key: VKey, v: V) {
        self.versions.push((key, v));
    }

    /// See [`Index::truncate_after`].
    pub fn truncate_after(&mut self, after: u64) -> Result<()> {
        let index = &mut self.index;
        index.check_truncate(after)?;
        while index.last_index() > after {
            if let Some(EntryMeta { vkey: Some(k), .. }) = index.entries.pop_back() {
                // Entries are popped newest first, so their versions sit at the end.
                if let Some(pos) = self.versions.iter().rposition(|(v, _)| *v == k) {
                    self.versions.remove(pos);
                }
            }
        }
        Ok(())
    }

    /// The finished index: its B-tree built in one pass from the sorted versions.
    pub fn finish(self) -> Index<V>
    where
        V: Send,
    {
        let IndexBuilder {
            mut index,
            mut versions,
        } = self;
        presort_halves(&mut versions);
        // `from_iter` sorts stably and keeps the last of equal keys: the same
        // result as inserting in replay order. It finds the two sorted halves
        // and merges them.
        index.map = versions.into_iter().collect();
        index
    }
}

/// Below this many versions a second thread costs more than it saves.
const PRESORT_MIN: usize = 16 * 1024;

/// Sorts each half of a large `versions` by key, stably and in place, one half on
/// a second thread, so that the stable sort that follows only merges two runs.
/// The halves stay in replay order relative to each other, so the merged result
/// is the stable sort of the whole. Sorting is most of building the tree after a
/// replay; this puts the second core to work on it.
fn presort_halves<V: Send>(versions: &mut [(VKey, V)]) {
    if versions.len() < PRESORT_MIN {
        return;
    }
    let by_key = |a: &(VKey, V), b: &(VKey, V)| a.0.cmp(&b.0);
    let (left, right) = versions.split_at_mut(versions.len() / 2);
    std::thread::scope(|scope| {
        scope.spawn(|| right.sort_by(by_key));
        left.sort_by(by_key);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    struct V(Option<u32>);
    impl Version for V {
        fn is_tombstone(&self) -> bool {
            self.0.is_none()
        }
    }

    fn put(ix: &mut Index<V>, i: u64, key: &[u8], v: Option<u32>) {
        ix.check_next(i).expect("in order");
        ix.push(1, Some((vkey(key, i), V(v))), i);
    }

    /// One step of a recovery replay.
    #[derive(Clone, Debug)]
    enum Step {
        Put(u8, Option<u32>),
        Noop,
        Truncate(u8),
        Base(u8, u8),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            6 => (0u8..6, proptest::option::of(0u32..9)).prop_map(|(k, v)| Step::Put(k, v)),
            1 => Just(Step::Noop),
            2 => (0u8..40).prop_map(Step::Truncate),
            1 => (0u8..6, 0u8..40).prop_map(|(k, at)| Step::Base(k, at)),
        ]
    }

    proptest::proptest! {
        /// The builder ends where inserting one record at a time ends.
        #[test]
        fn the_builder_builds_what_replaying_builds(steps in proptest::collection::vec(step(), 0..60)) {
            let mut ix: Index<V> = Index::default();
            let mut b: IndexBuilder<V> = IndexBuilder::default();
            for s in steps {
                match s {
                    Step::Put(k, v) => {
                        let i = ix.last_index() + 1;
                        let version = Some((vkey(&[b'k', k], i), V(v)));
                        ix.push(1, version.clone(), i);
                        b.push(1, version, i);
                    }
                    Step::Noop => {
                        let i = ix.last_index() + 1;
                        ix.push(1, None, i);
                        b.push(1, None, i);
                    }
                    Step::Truncate(after) => {
                        let after = u64::from(after);
                        proptest::prop_assert_eq!(
                            ix.truncate_after(after).is_ok(),
                            b.truncate_after(after).is_ok()
                        );
                    }
                    // A base record starts the log (only ever first) with the
                    // versions compaction kept below it.
                    Step::Base(k, at) if ix.last_index() == 0 && ix.versions() == 0 => {
                        let at = u64::from(at);
                        ix.set_base(at, 1);
                        b.set_base(at, 1);
                        if at > 0 {
                            ix.insert_old(vkey(&[b'k', k], at), V(Some(7)));
                            b.insert_old(vkey(&[b'k', k], at), V(Some(7)));
                        }
                    }
                    Step::Base(..) => {}
                }
                proptest::prop_assert_eq!(ix.versions(), b.versions());
                proptest::prop_assert_eq!(ix.last_index(), b.last_index());
            }
            let built = b.finish();
            let map = |i: &Index<V>| i.map.iter().map(|(k, v)| (k.to_vec(), v.clone())).collect::<Vec<_>>();
            proptest::prop_assert_eq!(map(&built), map(&ix));
            let metas = |i: &Index<V>| {
                i.entries.iter().map(|e| (e.term, e.vkey.as_ref().map(|k| k.to_vec()), e.loc)).collect::<Vec<_>>()
            };
            proptest::prop_assert_eq!(metas(&built), metas(&ix));
            proptest::prop_assert_eq!((built.first, built.base), (ix.first, ix.base));
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(12))]
        /// Presorting the halves, then sorting stably, is the stable sort: equal
        /// keys keep their replay order.
        #[test]
        fn presorted_halves_sort_to_the_stable_order(
            keys in proptest::collection::vec((0u8..40, 0u64..3), PRESORT_MIN..(2 * PRESORT_MIN)),
        ) {
            let versions: Vec<(VKey, usize)> = keys
                .iter()
                .enumerate()
                .map(|(i, &(k, ts))| (vkey(&[b'k', k], ts), i))
                .collect();
            let mut expected = versions.clone();
            expected.sort_by(|a, b| a.0.cmp(&b.0));
            let mut got = versions;
            presort_halves(&mut got);
            got.sort_by(|a, b| a.0.cmp(&b.0));
            proptest::prop_assert!(got.iter().map(|v| v.1).eq(expected.iter().map(|v| v.1)));
        }
    }

    #[test]
    fn versions_are_read_at_a_timestamp() {
        let mut ix = Index::default();
        put(&mut ix, 1, b"a", Some(1));
        put(&mut ix, 2, b"ab", Some(2));
        put(&mut ix, 3, b"a", Some(3));
        put(&mut ix, 4, b"a", None);
        assert_eq!(ix.get(b"a", 0), None);
        assert_eq!(ix.get(b"a", 1), Some(&V(Some(1))));
        assert_eq!(ix.get(b"a", 2), Some(&V(Some(1))));
        assert_eq!(ix.get(b"a", 3), Some(&V(Some(3))));
        assert_eq!(ix.get(b"a", 9), None, "deleted at 4");
        assert_eq!(ix.get(b"ab", 9), Some(&V(Some(2))));
        assert_eq!(ix.get(b"b", 9), None);
        assert_eq!(ix.get(b"", 9), None);
    }

    #[test]
    fn truncation_removes_the_suffix_and_respects_applied() {
        let mut ix = Index::default();
        for i in 1..=5 {
            put(&mut ix, i, b"k", Some(i as u32));
        }
        ix.set_applied(2);
        assert!(matches!(
            ix.truncate_after(1),
            Err(StoreError::TruncateApplied { .. })
        ));
        ix.truncate_after(3).expect("above applied");
        assert_eq!(ix.last_index(), 3);
        assert_eq!(ix.get(b"k", 9), Some(&V(Some(3))));
        assert!(ix.check_next(5).is_err());
        put(&mut ix, 4, b"k", Some(40));
        assert_eq!(ix.get(b"k", 9), Some(&V(Some(40))));
    }

    #[test]
    fn snapshot_chunks_see_one_version_per_key() {
        let mut ix = Index::default();
        put(&mut ix, 1, b"a", Some(1));
        put(&mut ix, 2, b"b", Some(2));
        put(&mut ix, 3, b"a", Some(3));
        put(&mut ix, 4, b"b", None);
        put(&mut ix, 5, b"c", Some(5));
        let all = ix.visible_chunk(None, 4, 100);
        let keys: Vec<_> = all
            .iter()
            .map(|(k, v)| (split_vkey(k), v.clone()))
            .collect();
        assert_eq!(keys, vec![((&b"a"[..], 3), V(Some(3)))]);
        let at2 = ix.visible_chunk(None, 2, 1);
        assert_eq!(at2.len(), 1);
        let rest = ix.visible_chunk(Some(&at2[0].0), 2, 10);
        assert_eq!(rest.len(), 1);
        assert_eq!(split_vkey(&rest[0].0).0, b"b");
    }
}
