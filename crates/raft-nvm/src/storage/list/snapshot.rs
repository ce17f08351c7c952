//! Snapshots of the list store: streaming the live records at an index (for a
//! lagging replica) and installing such a stream into an empty store (all or
//! nothing: see [`install`]).
//!
//! A stream holds the collector's gate shared, so compaction waits until it is
//! dropped (as in the thesis); appends and reads go on. It reads the index in chunks,
//! each under a short read lock, copying values out of the pool.

use std::collections::VecDeque;

use super::layout::Loc;
use super::Shared;
use crate::storage::error::Result;
use crate::storage::index::{split_vkey, vkey};
use crate::storage::record::{Kind, Record};
use crate::storage::store::{SnapshotItem, SnapshotMeta};
use crate::storage::sync::{lock, read, write, RwLockReadGuard};

/// Versions read per index lock hold.
const CHUNK: usize = 256;

/// A snapshot stream.
struct Stream<'a> {
    s: &'a Shared,
    _gate: RwLockReadGuard<'a, ()>,
    at: u64,
    cursor: Option<crate::storage::index::VKey>,
    ready: VecDeque<SnapshotItem>,
    done: bool,
}

impl Iterator for Stream<'_> {
    type Item = Result<SnapshotItem>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.ready.is_empty() && !self.done {
            if let Err(e) = self.refill() {
                self.done = true;
                return Some(Err(e));
            }
        }
        self.ready.pop_front().map(Ok)
    }
}

impl Stream<'_> {
    fn refill(&mut self) -> Result<()> {
        let index = read(&self.s.index);
        let chunk = index.visible_chunk(self.cursor.as_ref(), self.at, CHUNK);
        if chunk.len() < CHUNK {
            self.done = true;
        }
        for (k, loc) in &chunk {
            let (key, at) = split_vkey(k);
            self.ready.push_back(SnapshotItem {
                key: key.to_vec(),
                value: self.s.read_value(*loc)?,
                index: at,
            });
        }
        if let Some((k, _)) = chunk.into_iter().last() {
            self.cursor = Some(k);
        }
        Ok(())
    }
}

/// Starts a stream of the live records at `at`.
pub(crate) fn stream(
    s: &Shared,
    at: u64,
) -> Result<(SnapshotMeta, crate::storage::store::SnapshotStream<'_>)> {
    let gate = read(&s.gc_gate);
    let meta = read(&s.index).snapshot_meta(at)?;
    let stream = Stream {
        s,
        _gate: gate,
        at,
        cursor: None,
        ready: VecDeque::new(),
        done: false,
    };
    Ok((meta, Box::new(stream)))
}

/// Installs a stream into an empty store, durably and all or nothing: the records
/// go to a chain of fresh pages that one checksummed seal of the tail page links in
/// once the chain is durable. After an error the store must be discarded (the
/// replica installs into a staging store for that reason).
pub(crate) fn install(
    s: &Shared,
    meta: SnapshotMeta,
    items: &mut dyn Iterator<Item = SnapshotItem>,
) -> Result<()> {
    let mut t = lock(&s.tail);
    read(&s.index).check_empty()?;
    let from = s.detach(&mut t)?;
    s.write_record(&mut t, &Record::bare(Kind::Base, meta.index, meta.term))?;
    write(&s.index).set_base(meta.index, meta.term);
    for item in items {
        meta.check_item(&item)?;
        let off = s.write_entry(
            &mut t,
            &Record {
                kind: Kind::Put,
                index: item.index,
                term: 0,
                key: &item.key,
                value: &item.value,
            },
        )?;
        write(&s.index).insert_old(vkey(&item.key, item.index), Loc::new(off, false));
    }
    t.last_index = meta.index;
    s.attach(&mut t, from)
}
