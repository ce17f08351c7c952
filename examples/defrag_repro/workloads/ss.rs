//! `ss`: string swap. A table of string slots (a radix-8 tree of [`Kind::RNode`]
//! of fixed depth: inner nodes use their 8 child pointers, leaves 8 slots per
//! string class), each slot empty or naming one string of one of four lengths
//! (64 to 256 bytes with its key word; the class is the value's tag mod 4).
//! Inserts fill an empty slot, deletes free a slot's string, swaps free a slot's
//! string and put one of another length in its place. Table nodes are never freed
//! (like an array that stays allocated).

use super::store::{tag_of, Kind, Obj, Ref, Store, STR_BYTES};

const K: Kind = Kind::RNode;
const ROOT: usize = 0;

/// Levels of the table for `slots` slots (at least one).
pub fn depth(slots: u64) -> u32 {
    let mut d = 1;
    while 8u64.saturating_pow(d) < slots {
        d += 1;
    }
    d
}

fn digit(key: u64, level: u32, depth: u32) -> usize {
    ((key >> (3 * (depth - 1 - level))) & 7) as usize
}

fn slot(class: usize, d: usize) -> usize {
    8 + class * 8 + d
}

/// The leaf holding `key`'s slot, made on the way if `create`.
fn leaf<S: Store>(s: &mut S, key: u64, depth: u32, create: bool) -> Result<Ref, S::E> {
    let mut r = s.root(ROOT, K)?;
    if r == 0 {
        if !create {
            return Err(S::fail("ss: empty table".into()));
        }
        r = s.alloc(K)?;
        s.set_root(ROOT, K, r)?;
    }
    for level in 0..depth - 1 {
        let d = digit(key, level, depth);
        let mut o = s.get(K, r)?;
        if o.p[d] == 0 {
            if !create {
                return Err(S::fail(format!("ss: slot {key} missing")));
            }
            o.p[d] = s.alloc(K)?;
            s.put(K, r, &o)?;
        }
        r = o.p[d];
    }
    Ok(r)
}

/// Puts a string of `tag` (class `tag % 4`) in `key`'s slot of the leaf `l`.
fn fill<S: Store>(s: &mut S, l: Ref, key: u64, tag: u8, depth: u32) -> Result<(), S::E> {
    let c = usize::from(tag % 4);
    let k = Kind::string(c);
    let st = s.alloc(k)?;
    let mut o = Obj::zero();
    o.w[0] = key;
    o.set_value(STR_BYTES[c], tag);
    s.put(k, st, &o)?;
    let mut lo = s.get(K, l)?;
    lo.p[slot(c, digit(key, depth - 1, depth))] = st;
    s.put(K, l, &lo)
}

/// Frees the string in `key`'s slot of the leaf `l`.
fn empty<S: Store>(s: &mut S, l: Ref, key: u64, depth: u32) -> Result<(), S::E> {
    let d = digit(key, depth - 1, depth);
    let mut lo = s.get(K, l)?;
    let c = (0..4)
        .find(|&c| lo.p[slot(c, d)] != 0)
        .ok_or_else(|| S::fail(format!("ss: slot {key} empty")))?;
    s.free(Kind::string(c), lo.p[slot(c, d)])?;
    lo.p[slot(c, d)] = 0;
    s.put(K, l, &lo)
}

/// Puts a string of `tag` in the empty slot `key`.
pub fn insert<S: Store>(s: &mut S, key: u64, tag: u8, depth: u32) -> Result<(), S::E> {
    let l = leaf(s, key, depth, true)?;
    fill(s, l, key, tag, depth)
}

/// Frees the string of the slot `key`.
pub fn delete<S: Store>(s: &mut S, key: u64, depth: u32) -> Result<(), S::E> {
    let l = leaf(s, key, depth, false)?;
    empty(s, l, key, depth)
}

/// Replaces the string of the slot `key` by one of `tag` (another length when
/// its class differs).
pub fn swap<S: Store>(s: &mut S, key: u64, tag: u8, depth: u32) -> Result<(), S::E> {
    let l = leaf(s, key, depth, false)?;
    empty(s, l, key, depth)?;
    fill(s, l, key, tag, depth)
}

/// Every (slot, tag) in slot order; checks each string's key word and class.
pub fn contents<S: Store>(s: &mut S, depth: u32) -> Result<Vec<(u64, u8)>, S::E> {
    let mut out = Vec::new();
    let r = s.root(ROOT, K)?;
    if r != 0 {
        walk(s, r, 0, 0, depth, &mut out)?;
    }
    Ok(out)
}

fn walk<S: Store>(
    s: &mut S,
    r: Ref,
    prefix: u64,
    level: u32,
    depth: u32,
    out: &mut Vec<(u64, u8)>,
) -> Result<(), S::E> {
    let o = s.get(K, r)?;
    if level + 1 < depth {
        for d in 0..8 {
            if o.p[d] != 0 {
                walk(s, o.p[d], prefix * 8 + d as u64, level + 1, depth, out)?;
            }
        }
        return Ok(());
    }
    for d in 0..8 {
        let key = prefix * 8 + d as u64;
        let mut found = None;
        for (c, &len) in STR_BYTES.iter().enumerate() {
            let st = o.p[slot(c, d)];
            if st == 0 {
                continue;
            }
            let so = s.get(Kind::string(c), st)?;
            let tag = tag_of::<S>(&so, len, "ss")?;
            if found.is_some() || so.w[0] != key || usize::from(tag % 4) != c {
                return Err(S::fail(format!("ss: slot {key} is inconsistent")));
            }
            found = Some(tag);
        }
        if let Some(t) = found {
            out.push((key, t));
        }
    }
    Ok(())
}
