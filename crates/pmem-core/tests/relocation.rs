//! Offset pointers survive mapping the same pool at different addresses: two copies
//! mapped at once, and a reopen forced to a new address.

use pmem_core::{PPtr, Pool, PoolOptions};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy)]
#[repr(C)]
struct Node {
    value: u64,
    next: PPtr<Node>,
}

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
struct Root {
    head: PPtr<Node>,
    len: u64,
}

impl pmem_core::RootType for Root {
    const ROOT_ID: &'static str = "relocation-test/root";
    const LAYOUT_VERSION: u32 = 1;
}

const N: u64 = 200;

/// Builds a list whose nodes are scattered (every third slot, in reverse order) so
/// following it exercises arbitrary offsets.
fn build(path: &std::path::Path) {
    let mut pool =
        Pool::create(path, &PoolOptions::new("reloc", 1 << 20).root::<Root>()).expect("create");
    let root = pool.root::<Root>().expect("root");
    let base = pool.heap().start;
    let mut head = PPtr::<Node>::null();
    for i in 0..N {
        let at = PPtr::<Node>::from_offset(base + ((N - 1 - i) * 3 % (N * 2)) * 16 + 64);
        pool.write(
            at,
            &Node {
                value: i * i,
                next: head,
            },
        )
        .expect("write node");
        head = at;
    }
    pool.write(root, &Root { head, len: N })
        .expect("write root");
    pool.persist(0, pool.len()).expect("persist");
}

fn walk(pool: &Pool) -> Vec<u64> {
    let root = pool
        .get(pool.root::<Root>().expect("root"))
        .expect("get root");
    let mut out = Vec::new();
    let mut p = root.head;
    while !p.is_null() {
        assert!(out.len() as u64 <= root.len, "cycle");
        let n = pool.get(p).expect("node in bounds");
        out.push(n.value);
        p = n.next;
    }
    out
}

#[test]
fn two_copies_mapped_at_once_follow_the_same_pointers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = dir.path().join("a.pool");
    let b = dir.path().join("b.pool");
    build(&a);
    std::fs::copy(&a, &b).expect("copy");
    let pa = Pool::open(&a, "reloc").expect("open a");
    let pb = Pool::open(&b, "reloc").expect("open b");
    assert_ne!(
        pa.base_ptr(),
        pb.base_ptr(),
        "two live mappings cannot share an address"
    );
    let va = walk(&pa);
    assert_eq!(va.len() as u64, N);
    assert_eq!(va, walk(&pb));
    assert_eq!(
        va.iter().rev().take(3).copied().collect::<Vec<_>>(),
        vec![0, 1, 4]
    );
}

#[test]
fn reopen_at_a_different_address() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = dir.path().join("a.pool");
    build(&a);
    let (first_base, first) = {
        let p = Pool::open(&a, "reloc").expect("open");
        (p.base_ptr() as usize, walk(&p))
    };
    // Occupy the address the pool was mapped at, so the next mapping must move.
    let len = 1usize << 20;
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; the range is
    // free (the pool above was unmapped when dropped). We unmap it below.
    let blocker = unsafe {
        libc::mmap(
            first_base as *mut libc::c_void,
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    assert_ne!(
        blocker,
        libc::MAP_FAILED,
        "could not reserve the old address"
    );
    let p = Pool::open(&a, "reloc").expect("reopen");
    assert_ne!(p.base_ptr() as usize, first_base, "pool moved");
    assert_eq!(walk(&p), first);
    drop(p);
    // SAFETY: unmapping exactly the reservation made above, referenced by nothing.
    unsafe { libc::munmap(blocker, len) };
}

#[test]
fn offset_of_maps_addresses_back() {
    let pool = Pool::anonymous(&PoolOptions::new("reloc", 1 << 16).root::<Root>()).expect("anon");
    let root = pool.root::<Root>().expect("root");
    let r: *const Root = pool.get(root).expect("get");
    assert_eq!(pool.offset_of(r), Some(root.offset()));
    let outside = 0u64;
    assert_eq!(pool.offset_of(&outside), None);
}
