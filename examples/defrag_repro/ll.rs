//! The `ll` workload of the protocol table (a list of [`Node`]s, every other one
//! freed), shared by `defrag_repro` and the `defrag` criterion bench
//! (`benches/defrag.rs` includes this file with `#[path]`).

use std::path::{Path, PathBuf};

use pmem_core::{ModeRequest, PPtr, Pool, PoolOptions};
use pmem_defrag::{persistent_type, DefragHeap, HeapRoot, Registry};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Bytes of a value (the paper's 128 B).
pub const VALUE: usize = 128;

/// A node of the list.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct Node {
    /// The value: one byte repeated.
    pub value: [u8; VALUE],
    /// The next node (null: the end).
    pub next: PPtr<Node>,
}
persistent_type!(Node, id = 1, pointers = [next: Node]);

/// A pool file of the run (removed when dropped).
pub struct PoolFile(pub PathBuf);

impl Drop for PoolFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The registry of the list's one type.
pub fn registry() -> Registry {
    Registry::new().with::<Node>()
}

/// Builds the `ll` workload: `n` nodes pushed, then every other freed (one
/// transaction each). `durable`: an ordinary file in pmem-core's msync mode
/// instead of forced DAX.
pub fn build_ll(
    dir: &Path,
    tag: &str,
    n: u64,
    durable: bool,
) -> Result<(DefragHeap, PoolFile), String> {
    let path = dir.join(format!(
        "pmkit-defrag-repro-{tag}-{}.pool",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let file = PoolFile(path);
    let size = (n * 2 * 4096 / 26 + (16 << 20)).next_power_of_two();
    let opts = PoolOptions::new("defrag-repro", size).root::<HeapRoot>();
    let opts = if durable {
        opts
    } else {
        opts.mode(ModeRequest::ForceDax)
    };
    let pool = Pool::create(&file.0, &opts).map_err(|e| e.to_string())?;
    let heap = DefragHeap::create(pool, &registry()).map_err(|e| e.to_string())?;
    for i in 0..n {
        heap.transaction(|t| {
            let next = t.root::<Node>("ll")?;
            let node = t.alloc::<Node>()?;
            t.write(
                node,
                &Node {
                    value: [i as u8; VALUE],
                    next,
                },
            )?;
            t.set_root("ll", node)
        })
        .map_err(|e| e.to_string())?;
    }
    let mut keep = heap.root::<Node>("ll").map_err(|e| e.to_string())?;
    while !keep.is_null() {
        let gone = heap.read(keep).map_err(|e| e.to_string())?.next;
        if gone.is_null() {
            break;
        }
        let after = heap.read(gone).map_err(|e| e.to_string())?.next;
        heap.transaction(|t| {
            let mut k = t.read(keep)?;
            k.next = after;
            t.write(keep, &k)?;
            t.free(gone)
        })
        .map_err(|e| e.to_string())?;
        keep = after;
    }
    Ok((heap, file))
}

/// The list's first value bytes, in order.
pub fn values(h: &DefragHeap) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut p = h.root::<Node>("ll").map_err(|e| e.to_string())?;
    while !p.is_null() {
        let node = h.read(p).map_err(|e| e.to_string())?;
        out.push(node.value[0]);
        p = node.next;
    }
    Ok(out)
}
