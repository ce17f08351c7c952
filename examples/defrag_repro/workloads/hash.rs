//! A persistent hash table of [`Kind::HNode`] chains under a three-level directory
//! (a [`Kind::HTop`] of 16 [`Kind::HMid`]s of 16 [`Kind::HDir`]s of 16 bucket
//! heads: 4,096 buckets; narrow nodes, as a transaction heals at most a few dozen
//! pointers during a compaction),
//! shared by the `lru` cache and the 4-thread concurrent hash map.

use super::store::{tag_of, Kind, Obj, Ref, Store, VALUE};

/// The root of the directory.
pub const DIR_ROOT: usize = 0;
const FAN: u64 = 16;

/// `key`'s bucket: (top slot, middle slot, directory slot).
fn bucket(key: u64) -> (usize, usize, usize) {
    let h = key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52;
    (
        (h / (FAN * FAN)) as usize,
        (h / FAN % FAN) as usize,
        (h % FAN) as usize,
    )
}

/// The `i`th child (kind `k`) of the directory node `r` (kind `of`), made if
/// `create` (`None`: absent).
fn level<S: Store>(
    s: &mut S,
    of: Kind,
    r: Ref,
    i: usize,
    k: Kind,
    create: bool,
) -> Result<Option<Ref>, S::E> {
    let mut o = s.get(of, r)?;
    if o.p[i] == 0 {
        if !create {
            return Ok(None);
        }
        o.p[i] = s.alloc(k)?;
        s.put(of, r, &o)?;
    }
    Ok(Some(o.p[i]))
}

/// The directory of `key`'s bucket and the bucket's index in it, made if `create`
/// (`None`: it does not exist).
fn dir<S: Store>(s: &mut S, key: u64, create: bool) -> Result<Option<(Ref, usize)>, S::E> {
    let (t, m, d) = bucket(key);
    let mut top = s.root(DIR_ROOT, Kind::HTop)?;
    if top == 0 {
        if !create {
            return Ok(None);
        }
        top = s.alloc(Kind::HTop)?;
        s.set_root(DIR_ROOT, Kind::HTop, top)?;
    }
    let Some(mid) = level(s, Kind::HTop, top, t, Kind::HMid, create)? else {
        return Ok(None);
    };
    let dir = level(s, Kind::HMid, mid, m, Kind::HDir, create)?;
    Ok(dir.map(|dr| (dr, d)))
}

/// The node of `key` and its contents, if present.
pub fn find<S: Store>(s: &mut S, key: u64) -> Result<Option<(Ref, Obj)>, S::E> {
    let Some((dr, d)) = dir(s, key, false)? else {
        return Ok(None);
    };
    let mut cur = s.get(Kind::HDir, dr)?.p[d];
    while cur != 0 {
        let o = s.get(Kind::HNode, cur)?;
        if o.w[0] == key {
            return Ok(Some((cur, o)));
        }
        cur = o.p[0];
    }
    Ok(None)
}

/// A new node of `key` with a value of `tag`, at the head of its bucket (its
/// recency links null). Returns it.
pub fn insert<S: Store>(s: &mut S, key: u64, tag: u8) -> Result<Ref, S::E> {
    let (dr, d) = dir(s, key, true)?.ok_or_else(|| S::fail("hash: no directory".into()))?;
    let mut dir_o = s.get(Kind::HDir, dr)?;
    let n = s.alloc(Kind::HNode)?;
    let mut o = Obj::zero();
    o.p[0] = dir_o.p[d];
    o.w[0] = key;
    o.set_value(VALUE, tag);
    s.put(Kind::HNode, n, &o)?;
    dir_o.p[d] = n;
    s.put(Kind::HDir, dr, &dir_o)?;
    Ok(n)
}

/// Unlinks `key`'s node from its bucket (not freed); returns it and its contents.
pub fn unlink<S: Store>(s: &mut S, key: u64) -> Result<(Ref, Obj), S::E> {
    let missing = || S::fail(format!("hash: key {key} missing"));
    let (dr, d) = dir(s, key, false)?.ok_or_else(missing)?;
    let mut dir_o = s.get(Kind::HDir, dr)?;
    let (mut prev, mut cur) = (0, dir_o.p[d]);
    while cur != 0 {
        let o = s.get(Kind::HNode, cur)?;
        if o.w[0] == key {
            if prev == 0 {
                dir_o.p[d] = o.p[0];
                s.put(Kind::HDir, dr, &dir_o)?;
            } else {
                let mut p = s.get(Kind::HNode, prev)?;
                p.p[0] = o.p[0];
                s.put(Kind::HNode, prev, &p)?;
            }
            return Ok((cur, o));
        }
        prev = cur;
        cur = o.p[0];
    }
    Err(missing())
}

/// Deletes `key` (present) from a table without recency list.
pub fn delete<S: Store>(s: &mut S, key: u64) -> Result<(), S::E> {
    let (r, _) = unlink(s, key)?;
    s.free(Kind::HNode, r)
}

/// Every (key, tag) of the table, unordered; checks each key's bucket.
pub fn contents<S: Store>(s: &mut S) -> Result<Vec<(u64, u8)>, S::E> {
    let mut out = Vec::new();
    let top = s.root(DIR_ROOT, Kind::HTop)?;
    if top == 0 {
        return Ok(out);
    }
    let to = s.get(Kind::HTop, top)?;
    for t in 0..FAN as usize {
        if to.p[t] == 0 {
            continue;
        }
        let mo = s.get(Kind::HMid, to.p[t])?;
        for m in 0..FAN as usize {
            if mo.p[m] == 0 {
                continue;
            }
            let dir_o = s.get(Kind::HDir, mo.p[m])?;
            for d in 0..FAN as usize {
                let mut cur = dir_o.p[d];
                while cur != 0 {
                    let o = s.get(Kind::HNode, cur)?;
                    if bucket(o.w[0]) != (t, m, d) {
                        return Err(S::fail(format!("hash: key {} in a wrong bucket", o.w[0])));
                    }
                    out.push((o.w[0], tag_of::<S>(&o, VALUE, "hash")?));
                    cur = o.p[0];
                }
            }
        }
    }
    Ok(out)
}
