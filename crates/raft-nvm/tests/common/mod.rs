//! Random store workloads shared by the crash suites: steps, a strategy, their
//! application to any [`Store`], and the model they are checked against.

#![allow(dead_code)]

use std::collections::BTreeMap;

use proptest::prelude::*;
use raft_nvm::{Op, Store, StoreError};

/// One workload step.
#[derive(Clone, Debug)]
pub enum Step {
    /// Put a value of this many bytes to key `k`.
    Put(u8, u8),
    /// Delete key `k`.
    Delete(u8),
    /// Discard this many of the newest unapplied entries.
    Truncate(u8),
    /// Make everything durable.
    Sync,
    /// Sync, mark everything durable as applied, then compact (the WAL: snapshot).
    Compact,
}

/// Steps over keys `0..keys` with values of `1..max_len` bytes.
pub fn step(keys: u8, max_len: u8) -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..keys, 1..max_len).prop_map(|(k, n)| Step::Put(k, n)),
        2 => (0..keys).prop_map(Step::Delete),
        1 => (1u8..4).prop_map(Step::Truncate),
        2 => Just(Step::Sync),
        1 => Just(Step::Compact),
    ]
}

/// A record of the model log.
#[derive(Clone, Debug)]
pub enum Rec {
    /// Entry `index` puts a value.
    Put(u64, Vec<u8>, Vec<u8>),
    /// Entry `index` deletes a key.
    Delete(u64, Vec<u8>),
    /// Entries above this index are discarded.
    Rollback(u64),
}

/// What the model says after a prefix: last index and each key's newest value.
pub type View = (u64, BTreeMap<Vec<u8>, Vec<u8>>);

/// The view after replaying `log`.
pub fn view_after(log: &[Rec]) -> View {
    let mut entries: Vec<(u64, Vec<u8>, Option<Vec<u8>>)> = Vec::new();
    for r in log {
        match r {
            Rec::Put(i, k, v) => entries.push((*i, k.clone(), Some(v.clone()))),
            Rec::Delete(i, k) => entries.push((*i, k.clone(), None)),
            Rec::Rollback(after) => entries.retain(|(i, _, _)| i <= after),
        }
    }
    let mut map = BTreeMap::new();
    for (_, k, v) in &entries {
        match v {
            Some(v) => map.insert(k.clone(), v.clone()),
            None => map.remove(k),
        };
    }
    (entries.last().map_or(0, |e| e.0), map)
}

/// The value a `Put(k, n)` writes.
pub fn value(n: u8, k: u8) -> Vec<u8> {
    (0..n).map(|i| i.wrapping_mul(31) ^ k).collect()
}

/// Applies `step` to `store`, appending what it did to the model `log`.
pub fn apply(store: &dyn Store, step: &Step, log: &mut Vec<Rec>) -> Result<(), StoreError> {
    let last = store.last_index();
    match step {
        Step::Put(k, n) => {
            let (key, val) = (vec![b'k', *k], value(*n, *k));
            store.append(
                last + 1,
                1,
                Op::Put {
                    key: &key,
                    value: &val,
                },
            )?;
            log.push(Rec::Put(last + 1, key, val));
        }
        Step::Delete(k) => {
            let key = vec![b'k', *k];
            store.append(last + 1, 1, Op::Delete { key: &key })?;
            log.push(Rec::Delete(last + 1, key));
        }
        Step::Truncate(n) => {
            let after = last.saturating_sub(u64::from(*n)).max(store.applied());
            if after < last {
                store.truncate_after(after, 2)?;
                log.push(Rec::Rollback(after));
            }
        }
        Step::Sync => store.sync()?,
        Step::Compact => {
            store.sync()?;
            store.set_applied(store.durable_index());
            store.compact()?;
        }
    }
    Ok(())
}

/// Applies the puts and deletes `steps` (nothing else) as one
/// [`Store::append_batch`], appending them to the model `log`.
pub fn apply_batch(
    store: &dyn Store,
    steps: &[Step],
    log: &mut Vec<Rec>,
) -> Result<(), StoreError> {
    let first = store.last_index() + 1;
    let kvs: Vec<(Vec<u8>, Option<Vec<u8>>)> = steps
        .iter()
        .map(|s| match s {
            Step::Put(k, n) => (vec![b'k', *k], Some(value(*n, *k))),
            Step::Delete(k) => (vec![b'k', *k], None),
            other => panic!("not a put or delete: {other:?}"),
        })
        .collect();
    let batch: Vec<(u64, u64, Op<'_>)> = kvs
        .iter()
        .zip(first..)
        .map(|((key, val), i)| {
            let op = match val {
                Some(value) => Op::Put { key, value },
                None => Op::Delete { key },
            };
            (i, 1, op)
        })
        .collect();
    store.append_batch(&batch)?;
    for ((key, val), i) in kvs.into_iter().zip(first..) {
        log.push(match val {
            Some(v) => Rec::Put(i, key, v),
            None => Rec::Delete(i, key),
        });
    }
    Ok(())
}

/// Every key's newest visible value in `store` (keys as [`apply`] writes them).
pub fn observe(store: &dyn Store, keys: u8) -> Result<View, StoreError> {
    let mut map = BTreeMap::new();
    for k in 0..keys {
        let key = vec![b'k', k];
        if let Some(v) = store.get(&key, u64::MAX)? {
            map.insert(key, v);
        }
    }
    Ok((store.last_index(), map))
}
