//! `rbt`: a red-black tree of 128-byte values (Sedgewick's left-leaning variant:
//! left, right; key, colour), recursive insert and delete with rotations and
//! colour flips; a deleted node with a right subtree takes its successor's key and
//! value, and the successor's node is freed.

use super::store::{tag_of, Kind, Obj, Ref, Store, VALUE};

const K: Kind = Kind::Rb;
const ROOT: usize = 0;
const RED: u64 = 1;

fn red<S: Store>(s: &mut S, r: Ref) -> Result<bool, S::E> {
    Ok(r != 0 && s.get(K, r)?.w[1] == RED)
}

/// Whether the child `side` of `r` is red.
fn red_child<S: Store>(s: &mut S, r: Ref, side: usize) -> Result<bool, S::E> {
    let c = child(s, r, side)?;
    red(s, c)
}

/// The left (`side` 0) or right child of `r`.
fn child<S: Store>(s: &mut S, r: Ref, side: usize) -> Result<Ref, S::E> {
    Ok(if r == 0 { 0 } else { s.get(K, r)?.p[side] })
}

/// Rotates at `h`: `dir` 1 left (the right child rises), 0 right.
fn rotate<S: Store>(s: &mut S, h: Ref, dir: usize) -> Result<Ref, S::E> {
    let (up, down) = if dir == 1 { (1, 0) } else { (0, 1) };
    let mut o = s.get(K, h)?;
    let xr = o.p[up];
    let mut x = s.get(K, xr)?;
    o.p[up] = x.p[down];
    x.p[down] = h;
    x.w[1] = o.w[1];
    o.w[1] = RED;
    s.put(K, h, &o)?;
    s.put(K, xr, &x)?;
    Ok(xr)
}

/// Flips the colours of `h` and its two children.
fn flip<S: Store>(s: &mut S, h: Ref) -> Result<(), S::E> {
    let mut o = s.get(K, h)?;
    o.w[1] ^= 1;
    s.put(K, h, &o)?;
    for c in [o.p[0], o.p[1]] {
        if c != 0 {
            let mut x = s.get(K, c)?;
            x.w[1] ^= 1;
            s.put(K, c, &x)?;
        }
    }
    Ok(())
}

fn fixup<S: Store>(s: &mut S, mut h: Ref) -> Result<Ref, S::E> {
    let (l, r) = (child(s, h, 0)?, child(s, h, 1)?);
    if red(s, r)? && !red(s, l)? {
        h = rotate(s, h, 1)?;
    }
    let l = child(s, h, 0)?;
    if red(s, l)? && red_child(s, l, 0)? {
        h = rotate(s, h, 0)?;
    }
    let (l, r) = (child(s, h, 0)?, child(s, h, 1)?);
    if red(s, l)? && red(s, r)? {
        flip(s, h)?;
    }
    Ok(h)
}

fn set_child<S: Store>(s: &mut S, h: Ref, side: usize, c: Ref) -> Result<(), S::E> {
    let mut o = s.get(K, h)?;
    if o.p[side] != c {
        o.p[side] = c;
        s.put(K, h, &o)?;
    }
    Ok(())
}

fn ins<S: Store>(s: &mut S, h: Ref, key: u64, tag: u8) -> Result<Ref, S::E> {
    if h == 0 {
        let n = s.alloc(K)?;
        let mut o = Obj::zero();
        o.w[0] = key;
        o.w[1] = RED;
        o.set_value(VALUE, tag);
        s.put(K, n, &o)?;
        return Ok(n);
    }
    let o = s.get(K, h)?;
    let side = usize::from(key >= o.w[0]);
    let c = ins(s, o.p[side], key, tag)?;
    set_child(s, h, side, c)?;
    fixup(s, h)
}

fn set_black<S: Store>(s: &mut S, r: Ref, black: bool) -> Result<(), S::E> {
    if r != 0 {
        let mut o = s.get(K, r)?;
        let c = u64::from(!black);
        if o.w[1] != c {
            o.w[1] = c;
            s.put(K, r, &o)?;
        }
    }
    Ok(())
}

/// Inserts `key` (absent) with a value of `tag`.
pub fn insert<S: Store>(s: &mut S, key: u64, tag: u8) -> Result<(), S::E> {
    let r = s.root(ROOT, K)?;
    let n = ins(s, r, key, tag)?;
    set_black(s, n, true)?;
    if n != r {
        s.set_root(ROOT, K, n)?;
    }
    Ok(())
}

fn move_red_left<S: Store>(s: &mut S, mut h: Ref) -> Result<Ref, S::E> {
    flip(s, h)?;
    let r = child(s, h, 1)?;
    if red_child(s, r, 0)? {
        let nr = rotate(s, r, 0)?;
        set_child(s, h, 1, nr)?;
        h = rotate(s, h, 1)?;
        flip(s, h)?;
    }
    Ok(h)
}

fn move_red_right<S: Store>(s: &mut S, mut h: Ref) -> Result<Ref, S::E> {
    flip(s, h)?;
    let l = child(s, h, 0)?;
    if red_child(s, l, 0)? {
        h = rotate(s, h, 0)?;
        flip(s, h)?;
    }
    Ok(h)
}

/// Removes the smallest node under `h`: (new subtree root, the removed node).
fn del_min<S: Store>(s: &mut S, mut h: Ref) -> Result<(Ref, Obj), S::E> {
    let o = s.get(K, h)?;
    if o.p[0] == 0 {
        s.free(K, h)?;
        return Ok((0, o));
    }
    let l = o.p[0];
    if !red(s, l)? && !red_child(s, l, 0)? {
        h = move_red_left(s, h)?;
    }
    let l = child(s, h, 0)?;
    let (nl, min) = del_min(s, l)?;
    set_child(s, h, 0, nl)?;
    Ok((fixup(s, h)?, min))
}

fn del<S: Store>(s: &mut S, mut h: Ref, key: u64) -> Result<Ref, S::E> {
    if h == 0 {
        return Err(S::fail(format!("rbt: key {key} missing")));
    }
    let k = s.get(K, h)?.w[0];
    if key < k {
        let l = child(s, h, 0)?;
        if !red(s, l)? && !red_child(s, l, 0)? {
            h = move_red_left(s, h)?;
        }
        let l = child(s, h, 0)?;
        let nl = del(s, l, key)?;
        set_child(s, h, 0, nl)?;
    } else {
        if red_child(s, h, 0)? {
            h = rotate(s, h, 0)?;
        }
        let o = s.get(K, h)?;
        if key == o.w[0] && o.p[1] == 0 {
            s.free(K, h)?;
            return Ok(0);
        }
        let r = o.p[1];
        if !red(s, r)? && !red_child(s, r, 0)? {
            h = move_red_right(s, h)?;
        }
        let mut o = s.get(K, h)?;
        if key == o.w[0] {
            let (nr, min) = del_min(s, o.p[1])?;
            let mut o2 = s.get(K, h)?;
            o2.p[1] = nr;
            o2.w[0] = min.w[0];
            o2.v = min.v;
            s.put(K, h, &o2)?;
        } else {
            o.p[1] = del(s, o.p[1], key)?;
            set_child(s, h, 1, o.p[1])?;
        }
    }
    fixup(s, h)
}

/// Deletes `key` (present).
pub fn delete<S: Store>(s: &mut S, key: u64) -> Result<(), S::E> {
    let r = s.root(ROOT, K)?;
    if !red_child(s, r, 0)? && !red_child(s, r, 1)? {
        set_black(s, r, false)?;
    }
    let n = del(s, r, key)?;
    set_black(s, n, true)?;
    if n != r {
        s.set_root(ROOT, K, n)?;
    }
    Ok(())
}

/// Every (key, tag) in key order; checks the colouring (no red right child, no
/// two reds in a row, equal black heights) on the way.
pub fn contents<S: Store>(s: &mut S) -> Result<Vec<(u64, u8)>, S::E> {
    let mut out = Vec::new();
    let r = s.root(ROOT, K)?;
    walk(s, r, false, &mut out)?;
    Ok(out)
}

fn walk<S: Store>(
    s: &mut S,
    r: Ref,
    parent_red: bool,
    out: &mut Vec<(u64, u8)>,
) -> Result<u64, S::E> {
    if r == 0 {
        return Ok(1);
    }
    let o = s.get(K, r)?;
    let is_red = o.w[1] == RED;
    if is_red && parent_red {
        return Err(S::fail(format!("rbt: two reds at {}", o.w[0])));
    }
    let bl = walk(s, o.p[0], is_red, out)?;
    out.push((o.w[0], tag_of::<S>(&o, VALUE, "rbt")?));
    if red(s, o.p[1])? {
        return Err(S::fail(format!("rbt: red right child under {}", o.w[0])));
    }
    let br = walk(s, o.p[1], is_red, out)?;
    if bl != br {
        return Err(S::fail(format!("rbt: black heights differ at {}", o.w[0])));
    }
    Ok(bl + u64::from(!is_red))
}
