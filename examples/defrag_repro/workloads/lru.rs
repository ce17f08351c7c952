//! `lru`: a Redis-like LRU cache: the [`super::hash`] table for lookups and a
//! doubly linked recency list through the same nodes (most recent at root 1,
//! least recent at root 2). `get` moves a hit to the front; `set` of a new key
//! evicts the least recent entry when the client says the cache is full; `del`
//! removes a key (Redis's DEL).

use super::hash;
use super::store::{tag_of, Kind, Obj, Ref, Store, VALUE};

const K: Kind = Kind::HNode;
const MRU: usize = 1;
const LRU: usize = 2;
const PREV: usize = 1;
const NEXT: usize = 2;

/// Takes the node `r` (contents `o`) out of the recency list.
fn detach<S: Store>(s: &mut S, o: &Obj) -> Result<(), S::E> {
    let (prev, next) = (o.p[PREV], o.p[NEXT]);
    if prev == 0 {
        s.set_root(MRU, K, next)?;
    } else {
        let mut p = s.get(K, prev)?;
        p.p[NEXT] = next;
        s.put(K, prev, &p)?;
    }
    if next == 0 {
        s.set_root(LRU, K, prev)?;
    } else {
        let mut n = s.get(K, next)?;
        n.p[PREV] = prev;
        s.put(K, next, &n)?;
    }
    Ok(())
}

/// Puts the node `r` at the front of the recency list.
fn push_front<S: Store>(s: &mut S, r: Ref) -> Result<(), S::E> {
    let head = s.root(MRU, K)?;
    let mut o = s.get(K, r)?;
    o.p[PREV] = 0;
    o.p[NEXT] = head;
    s.put(K, r, &o)?;
    if head == 0 {
        s.set_root(LRU, K, r)?;
    } else {
        let mut h = s.get(K, head)?;
        h.p[PREV] = r;
        s.put(K, head, &h)?;
    }
    s.set_root(MRU, K, r)
}

/// Sets the new `key` to a value of `tag`; if `evict`, first removes the least
/// recent entry and returns its key.
pub fn set_new<S: Store>(s: &mut S, key: u64, tag: u8, evict: bool) -> Result<Option<u64>, S::E> {
    let mut evicted = None;
    if evict {
        let tail = s.root(LRU, K)?;
        if tail != 0 {
            let k = s.get(K, tail)?.w[0];
            delete(s, k)?;
            evicted = Some(k);
        }
    }
    let n = hash::insert(s, key, tag)?;
    push_front(s, n)?;
    Ok(evicted)
}

/// The tag of `key`'s value, if cached; a hit becomes the most recent.
pub fn get<S: Store>(s: &mut S, key: u64) -> Result<Option<u8>, S::E> {
    let Some((r, o)) = hash::find(s, key)? else {
        return Ok(None);
    };
    if o.p[PREV] != 0 {
        detach(s, &o)?;
        push_front(s, r)?;
    }
    Ok(Some(tag_of::<S>(&o, VALUE, "lru")?))
}

/// Removes `key` (present).
pub fn delete<S: Store>(s: &mut S, key: u64) -> Result<(), S::E> {
    let (r, o) = hash::unlink(s, key)?;
    detach(s, &o)?;
    s.free(K, r)
}

/// Every (key, tag), unordered; checks that the recency list holds exactly the
/// table's entries, linked both ways.
pub fn contents<S: Store>(s: &mut S) -> Result<Vec<(u64, u8)>, S::E> {
    let table = hash::contents(s)?;
    let mut listed = 0usize;
    let (mut prev, mut cur) = (0, s.root(MRU, K)?);
    while cur != 0 {
        let o = s.get(K, cur)?;
        if o.p[PREV] != prev {
            return Err(S::fail(format!("lru: broken back link at {}", o.w[0])));
        }
        listed += 1;
        if listed > table.len() {
            return Err(S::fail(
                "lru: the recency list is longer than the table".into(),
            ));
        }
        prev = cur;
        cur = o.p[NEXT];
    }
    if listed != table.len() || s.root(LRU, K)? != prev {
        return Err(S::fail(
            "lru: the recency list does not match the table".into(),
        ));
    }
    Ok(table)
}
