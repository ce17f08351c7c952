//! `bt`: a B+tree of order 5 (at most 4 keys a node, the paper's "one node can
//! store 4 values"): leaves hold 4 keys and pointers to 128-byte value objects
//! ([`Kind::Val`]), inner nodes 4 separator keys and 5 children, all one node kind
//! (`w[0]`: key count, bit 32 set for a leaf). Inserts split full nodes on the way
//! back up; deletes are lazy, as in many persistent B+trees (FPTree's leaves):
//! no merging, an emptied node is freed and unlinked from its parent, and a root
//! with one child is replaced by it. Half-empty nodes stay: the internal
//! fragmentation the paper notes for `bt`.

use super::store::{tag_of, Kind, Obj, Ref, Store, VALUE};

const K: Kind = Kind::BNode;
const ROOT: usize = 0;
const MAX: usize = 4;
const LEAF: u64 = 1 << 32;
/// Index of the first value pointer of a leaf.
const V0: usize = 5;

fn count(o: &Obj) -> usize {
    (o.w[0] & 0xffff_ffff) as usize
}

fn is_leaf(o: &Obj) -> bool {
    o.w[0] & LEAF != 0
}

fn key(o: &Obj, i: usize) -> u64 {
    o.w[1 + i]
}

fn set_meta(o: &mut Obj, n: usize, leaf: bool) {
    o.w[0] = n as u64 | if leaf { LEAF } else { 0 };
}

/// The child of an inner node to descend for `k`: keys at or above `key(i)` go right.
fn child_index(o: &Obj, k: u64) -> usize {
    (0..count(o)).take_while(|&i| k >= key(o, i)).count()
}

/// Inserts under `r`; a split returns (separator, new right sibling).
fn ins<S: Store>(s: &mut S, r: Ref, k: u64, tag: u8) -> Result<Option<(u64, Ref)>, S::E> {
    let mut o = s.get(K, r)?;
    let n = count(&o);
    if is_leaf(&o) {
        let v = s.alloc(Kind::Val)?;
        let mut val = Obj::zero();
        val.set_value(VALUE, tag);
        s.put(Kind::Val, v, &val)?;
        let at = (0..n).take_while(|&i| key(&o, i) < k).count();
        let mut keys: Vec<u64> = (0..n).map(|i| key(&o, i)).collect();
        let mut vals: Vec<Ref> = (0..n).map(|i| o.p[V0 + i]).collect();
        keys.insert(at, k);
        vals.insert(at, v);
        if keys.len() <= MAX {
            write_leaf(&mut o, &keys, &vals);
            s.put(K, r, &o)?;
            return Ok(None);
        }
        let half = keys.len() / 2;
        let right = s.alloc(K)?;
        let mut ro = Obj::zero();
        write_leaf(&mut ro, &keys[half..], &vals[half..]);
        s.put(K, right, &ro)?;
        write_leaf(&mut o, &keys[..half], &vals[..half]);
        s.put(K, r, &o)?;
        return Ok(Some((keys[half], right)));
    }
    let i = child_index(&o, k);
    let Some((sep, new)) = ins(s, o.p[i], k, tag)? else {
        return Ok(None);
    };
    let mut keys: Vec<u64> = (0..n).map(|j| key(&o, j)).collect();
    let mut kids: Vec<Ref> = (0..=n).map(|j| o.p[j]).collect();
    keys.insert(i, sep);
    kids.insert(i + 1, new);
    if keys.len() <= MAX {
        write_inner(&mut o, &keys, &kids);
        s.put(K, r, &o)?;
        return Ok(None);
    }
    // Five keys, six children: two keys stay, the middle one rises, two go right.
    let right = s.alloc(K)?;
    let mut ro = Obj::zero();
    write_inner(&mut ro, &keys[3..], &kids[3..]);
    s.put(K, right, &ro)?;
    write_inner(&mut o, &keys[..2], &kids[..3]);
    s.put(K, r, &o)?;
    Ok(Some((keys[2], right)))
}

fn write_leaf(o: &mut Obj, keys: &[u64], vals: &[Ref]) {
    *o = Obj::zero();
    set_meta(o, keys.len(), true);
    for (i, (&k, &v)) in keys.iter().zip(vals).enumerate() {
        o.w[1 + i] = k;
        o.p[V0 + i] = v;
    }
}

fn write_inner(o: &mut Obj, keys: &[u64], kids: &[Ref]) {
    *o = Obj::zero();
    set_meta(o, keys.len(), false);
    for (i, &k) in keys.iter().enumerate() {
        o.w[1 + i] = k;
    }
    for (i, &c) in kids.iter().enumerate() {
        o.p[i] = c;
    }
}

/// Inserts `k` (absent) with a value of `tag`.
pub fn insert<S: Store>(s: &mut S, k: u64, tag: u8) -> Result<(), S::E> {
    let mut r = s.root(ROOT, K)?;
    if r == 0 {
        r = s.alloc(K)?;
        let mut o = Obj::zero();
        set_meta(&mut o, 0, true);
        s.put(K, r, &o)?;
        s.set_root(ROOT, K, r)?;
    }
    if let Some((sep, right)) = ins(s, r, k, tag)? {
        let top = s.alloc(K)?;
        let mut o = Obj::zero();
        write_inner(&mut o, &[sep], &[r, right]);
        s.put(K, top, &o)?;
        s.set_root(ROOT, K, top)?;
    }
    Ok(())
}

/// Deletes under `r`; returns whether `r` was emptied (and freed).
fn del<S: Store>(s: &mut S, r: Ref, k: u64) -> Result<bool, S::E> {
    let mut o = s.get(K, r)?;
    let n = count(&o);
    if is_leaf(&o) {
        let at = (0..n)
            .find(|&i| key(&o, i) == k)
            .ok_or_else(|| S::fail(format!("bt: key {k} missing")))?;
        s.free(Kind::Val, o.p[V0 + at])?;
        let mut keys: Vec<u64> = (0..n).map(|i| key(&o, i)).collect();
        let mut vals: Vec<Ref> = (0..n).map(|i| o.p[V0 + i]).collect();
        keys.remove(at);
        vals.remove(at);
        if keys.is_empty() {
            s.free(K, r)?;
            return Ok(true);
        }
        write_leaf(&mut o, &keys, &vals);
        s.put(K, r, &o)?;
        return Ok(false);
    }
    let i = child_index(&o, k);
    if !del(s, o.p[i], k)? {
        return Ok(false);
    }
    if n == 0 {
        s.free(K, r)?;
        return Ok(true);
    }
    let mut keys: Vec<u64> = (0..n).map(|j| key(&o, j)).collect();
    let mut kids: Vec<Ref> = (0..=n).map(|j| o.p[j]).collect();
    kids.remove(i);
    keys.remove(i.saturating_sub(1));
    write_inner(&mut o, &keys, &kids);
    s.put(K, r, &o).map(|()| false)
}

/// Deletes `k` (present).
pub fn delete<S: Store>(s: &mut S, k: u64) -> Result<(), S::E> {
    let r = s.root(ROOT, K)?;
    if r == 0 {
        return Err(S::fail(format!("bt: key {k} missing")));
    }
    if del(s, r, k)? {
        return s.set_root(ROOT, K, 0);
    }
    // A root left with one child gives way to it.
    let mut r = r;
    loop {
        let o = s.get(K, r)?;
        if is_leaf(&o) || count(&o) > 0 {
            break;
        }
        s.free(K, r)?;
        r = o.p[0];
        s.set_root(ROOT, K, r)?;
    }
    Ok(())
}

/// Every (key, tag) in key order; checks the keys' order against the separators.
pub fn contents<S: Store>(s: &mut S) -> Result<Vec<(u64, u8)>, S::E> {
    let mut out = Vec::new();
    let r = s.root(ROOT, K)?;
    if r != 0 {
        walk(s, r, 0, u64::MAX, &mut out)?;
    }
    Ok(out)
}

fn walk<S: Store>(
    s: &mut S,
    r: Ref,
    lo: u64,
    hi: u64,
    out: &mut Vec<(u64, u8)>,
) -> Result<(), S::E> {
    let o = s.get(K, r)?;
    let n = count(&o);
    if is_leaf(&o) {
        for i in 0..n {
            let k = key(&o, i);
            if k < lo || k >= hi {
                return Err(S::fail(format!("bt: key {k} outside [{lo}, {hi})")));
            }
            let v = s.get(Kind::Val, o.p[V0 + i])?;
            out.push((k, tag_of::<S>(&v, VALUE, "bt")?));
        }
        return Ok(());
    }
    for i in 0..=n {
        let a = if i == 0 { lo } else { key(&o, i - 1) };
        let b = if i == n { hi } else { key(&o, i) };
        walk(s, o.p[i], a, b, out)?;
    }
    Ok(())
}
