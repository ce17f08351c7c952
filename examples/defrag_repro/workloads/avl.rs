//! `avl`: an AVL tree of 128-byte values keyed by `u64` (left, right; key, height),
//! recursive insert and delete with rotations; a node with two children takes its
//! successor's key and value, and the successor's node is freed.

use super::store::{tag_of, Kind, Obj, Ref, Store, VALUE};

const K: Kind = Kind::Avl;
const ROOT: usize = 0;

fn height<S: Store>(s: &mut S, r: Ref) -> Result<u64, S::E> {
    Ok(if r == 0 { 0 } else { s.get(K, r)?.w[1] })
}

/// Sets `o`'s height from its children and writes it at `r`.
fn update<S: Store>(s: &mut S, r: Ref, o: &mut Obj) -> Result<(), S::E> {
    o.w[1] = 1 + height(s, o.p[0])?.max(height(s, o.p[1])?);
    s.put(K, r, o)
}

/// Rotates the subtree at `r` (whose node is `o`): `dir` 0 right (the left
/// child rises), 1 left. Returns the new subtree root.
fn rotate<S: Store>(s: &mut S, r: Ref, mut o: Obj, dir: usize) -> Result<Ref, S::E> {
    let (a, b) = if dir == 0 { (0, 1) } else { (1, 0) };
    let cr = o.p[a];
    let mut c = s.get(K, cr)?;
    o.p[a] = c.p[b];
    update(s, r, &mut o)?;
    c.p[b] = r;
    update(s, cr, &mut c)?;
    Ok(cr)
}

/// Restores the balance of the subtree at `r` (node `o`, children final).
fn rebalance<S: Store>(s: &mut S, r: Ref, mut o: Obj) -> Result<Ref, S::E> {
    let (hl, hr) = (height(s, o.p[0])?, height(s, o.p[1])?);
    for (heavy, dir) in [(0usize, 0usize), (1, 1)] {
        let (h_heavy, h_light) = if heavy == 0 { (hl, hr) } else { (hr, hl) };
        if h_heavy > h_light + 1 {
            let cr = o.p[heavy];
            let c = s.get(K, cr)?;
            let (inner, outer) = (c.p[1 - heavy], c.p[heavy]);
            if height(s, inner)? > height(s, outer)? {
                o.p[heavy] = rotate(s, cr, c, 1 - dir)?;
            }
            return rotate(s, r, o, dir);
        }
    }
    update(s, r, &mut o)?;
    Ok(r)
}

fn ins<S: Store>(s: &mut S, r: Ref, key: u64, tag: u8) -> Result<Ref, S::E> {
    if r == 0 {
        let n = s.alloc(K)?;
        let mut o = Obj::zero();
        o.w[0] = key;
        o.w[1] = 1;
        o.set_value(VALUE, tag);
        s.put(K, n, &o)?;
        return Ok(n);
    }
    let mut o = s.get(K, r)?;
    let side = usize::from(key >= o.w[0]);
    o.p[side] = ins(s, o.p[side], key, tag)?;
    rebalance(s, r, o)
}

/// Inserts `key` (absent) with a value of `tag`.
pub fn insert<S: Store>(s: &mut S, key: u64, tag: u8) -> Result<(), S::E> {
    let r = s.root(ROOT, K)?;
    let n = ins(s, r, key, tag)?;
    if n != r {
        s.set_root(ROOT, K, n)?;
    }
    Ok(())
}

/// Removes the smallest node of the subtree at `r`: (new subtree root, its node).
fn del_min<S: Store>(s: &mut S, r: Ref) -> Result<(Ref, Obj), S::E> {
    let mut o = s.get(K, r)?;
    if o.p[0] == 0 {
        s.free(K, r)?;
        return Ok((o.p[1], o));
    }
    let (l, min) = del_min(s, o.p[0])?;
    o.p[0] = l;
    Ok((rebalance(s, r, o)?, min))
}

fn del<S: Store>(s: &mut S, r: Ref, key: u64) -> Result<Ref, S::E> {
    if r == 0 {
        return Err(S::fail(format!("avl: key {key} missing")));
    }
    let mut o = s.get(K, r)?;
    if key != o.w[0] {
        let side = usize::from(key > o.w[0]);
        o.p[side] = del(s, o.p[side], key)?;
        return rebalance(s, r, o);
    }
    if o.p[0] == 0 || o.p[1] == 0 {
        s.free(K, r)?;
        return Ok(o.p[0] | o.p[1]);
    }
    let (right, min) = del_min(s, o.p[1])?;
    o.p[1] = right;
    o.w[0] = min.w[0];
    o.v = min.v;
    rebalance(s, r, o)
}

/// Deletes `key` (present).
pub fn delete<S: Store>(s: &mut S, key: u64) -> Result<(), S::E> {
    let r = s.root(ROOT, K)?;
    let n = del(s, r, key)?;
    if n != r {
        s.set_root(ROOT, K, n)?;
    }
    Ok(())
}

/// Every (key, tag) in key order; checks the AVL balance and order on the way.
pub fn contents<S: Store>(s: &mut S) -> Result<Vec<(u64, u8)>, S::E> {
    let mut out = Vec::new();
    let r = s.root(ROOT, K)?;
    walk(s, r, &mut out)?;
    Ok(out)
}

fn walk<S: Store>(s: &mut S, r: Ref, out: &mut Vec<(u64, u8)>) -> Result<u64, S::E> {
    if r == 0 {
        return Ok(0);
    }
    let o = s.get(K, r)?;
    let hl = walk(s, o.p[0], out)?;
    out.push((o.w[0], tag_of::<S>(&o, VALUE, "avl")?));
    let hr = walk(s, o.p[1], out)?;
    if hl.abs_diff(hr) > 1 || o.w[1] != 1 + hl.max(hr) {
        return Err(S::fail(format!("avl: node {} unbalanced", o.w[0])));
    }
    Ok(o.w[1])
}
