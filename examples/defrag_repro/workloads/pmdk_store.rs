//! libpmemobj's backend of [`Store`]: objects of a kind are `pmemobj_zalloc`ed with
//! the kind as type number and laid out as its [`Shape`](super::store::Shape) with
//! 16-byte `PMEMoid` pointers; writes are direct stores and `pmemobj_persist`.
//! These updates are NOT crash-consistent (no PMDK transactions): the peer is
//! measured on its footprint and on `pmemobj_defrag`, not on recovery.

use crate::pmdk::{PmdkHeap, Walk};

use super::store::{Kind, Obj, Ref, Store};

/// A [`Store`] over a PMDK pool.
pub struct Pd<'x, 'a>(pub &'x mut PmdkHeap<'a>);

/// (oids at the start, bytes) of an object of type number `t`.
pub fn layout(t: u64) -> Option<(usize, u64)> {
    Kind::from_id(t).map(|k| (k.shape().p, k.shape().bytes(16) as u64))
}

/// Walks a PMDK pool of the workloads' kinds.
pub fn walk(h: &PmdkHeap<'_>) -> Result<Walk, String> {
    h.walk(&layout)
}

impl Store for Pd<'_, '_> {
    type E = String;

    fn fail(msg: String) -> String {
        msg
    }

    fn alloc(&mut self, k: Kind) -> Result<Ref, String> {
        self.0.alloc(k.shape().bytes(16), k as u64)
    }

    fn free(&mut self, _k: Kind, r: Ref) -> Result<(), String> {
        self.0.free(r);
        Ok(())
    }

    fn get(&mut self, k: Kind, r: Ref) -> Result<Obj, String> {
        let s = k.shape();
        Ok(Obj::decode(s, &self.0.read(r, s.bytes(16))?, 16))
    }

    fn put(&mut self, k: Kind, r: Ref, o: &Obj) -> Result<(), String> {
        let uuid = self.0.uuid;
        self.0.write(r, &o.encode(k.shape(), 16, uuid))
    }

    fn root(&mut self, i: usize, _k: Kind) -> Result<Ref, String> {
        Ok(self.0.root(i))
    }

    fn set_root(&mut self, i: usize, _k: Kind, r: Ref) -> Result<(), String> {
        self.0.set_root(i, r);
        Ok(())
    }
}
