//! `ll`: a singly linked list of 128-byte values, pushed at the head. Deletes go
//! round the list with a cursor kept in a root (an object reference may not be
//! held across operations: objects move), skipping a random 0..3 nodes before each
//! deleted one, so the freed nodes are scattered over the pages.

use super::store::{tag_of, Kind, Obj, Ref, Store, VALUE};

const HEAD: usize = 0;
const CURSOR: usize = 1;

/// Pushes `key` with a value of `tag` at the head.
pub fn insert<S: Store>(s: &mut S, key: u64, tag: u8) -> Result<(), S::E> {
    let head = s.root(HEAD, Kind::List)?;
    let n = s.alloc(Kind::List)?;
    let mut o = Obj::zero();
    o.p[0] = head;
    o.w[0] = key;
    o.set_value(VALUE, tag);
    s.put(Kind::List, n, &o)?;
    s.set_root(HEAD, Kind::List, n)
}

/// Deletes the node `skip` nodes past the cursor (wrapping round); returns its key.
pub fn delete_next<S: Store>(s: &mut S, skip: u64) -> Result<u64, S::E> {
    let head = s.root(HEAD, Kind::List)?;
    if head == 0 {
        return Err(S::fail("ll: delete from an empty list".into()));
    }
    // `prev`: the node before the victim (0: before the head).
    let mut prev: Ref = s.root(CURSOR, Kind::List)?;
    let next_of = |s: &mut S, r: Ref| -> Result<Ref, S::E> {
        Ok(if r == 0 {
            head
        } else {
            s.get(Kind::List, r)?.p[0]
        })
    };
    for _ in 0..skip {
        prev = next_of(s, prev)?;
    }
    let mut victim = next_of(s, prev)?;
    if victim == 0 {
        prev = 0;
        victim = head;
    }
    let v = s.get(Kind::List, victim)?;
    if prev == 0 {
        s.set_root(HEAD, Kind::List, v.p[0])?;
    } else {
        let mut p = s.get(Kind::List, prev)?;
        p.p[0] = v.p[0];
        s.put(Kind::List, prev, &p)?;
    }
    s.free(Kind::List, victim)?;
    s.set_root(CURSOR, Kind::List, prev)?;
    Ok(v.w[0])
}

/// Every (key, tag), head first.
pub fn contents<S: Store>(s: &mut S) -> Result<Vec<(u64, u8)>, S::E> {
    let mut out = Vec::new();
    let mut p = s.root(HEAD, Kind::List)?;
    while p != 0 {
        let o = s.get(Kind::List, p)?;
        out.push((o.w[0], tag_of::<S>(&o, VALUE, "ll")?));
        p = o.p[0];
    }
    Ok(out)
}
