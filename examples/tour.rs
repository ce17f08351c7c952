//! A short tour of pmem-core: the README's "run" command until the Raft cluster exists.
//!
//! ```text
//! cargo run --release --example tour [POOL_PATH]
//! ```
//!
//! Opens (or creates) a pool, by default `./target/pmkit-tour.pool`, counts this run
//! in its typed root, appends a node to a persistent linked list with the crash-safe
//! `alloc_publish`, walks the list, and prints what each step cost in flushes, fences
//! and msyncs. Run it twice: the list grows because the pool is persistent. Delete the
//! file to start over.

use std::error::Error;
use std::mem::offset_of;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use pmem_core::{
    AtomicPPtr, Counters, PPtr, PageAllocator, PersistentAllocator, Pool, PoolError, PoolOptions,
};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

const LAYOUT: &str = "pmkit-tour";
const POOL_SIZE: u64 = 8 << 20;

/// The pool's root: a run counter and the head of a list of nodes.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
struct Root {
    runs: u64,
    /// Published with `alloc_publish` as an 8-byte atomic store.
    head: PPtr<Node>,
}

/// The root's stable identity in the pool header (independent of the Rust name).
impl pmem_core::RootType for Root {
    const ROOT_ID: &'static str = "pmkit-tour/root";
    const LAYOUT_VERSION: u32 = 1;
}

/// A list node, one page from the page allocator.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
struct Node {
    run: u64,
    created_unix_s: u64,
    next: PPtr<Node>,
}

/// A short tour of pmem-core: a pool that counts its runs and grows a persistent
/// list by one node each run, with what each step cost in flushes, fences and msyncs.
#[derive(Parser, Debug)]
#[command(name = "tour")]
struct Args {
    /// The pool file, created if missing (run twice: the list grows).
    #[arg(value_name = "POOL_PATH", default_value = "target/pmkit-tour.pool")]
    path: PathBuf,
}

fn describe(c: Counters) -> String {
    format!(
        "{} lines flushed, {} fences, {} msyncs, {} bytes written",
        c.lines_flushed, c.fences, c.msyncs, c.bytes_written
    )
}

fn open_or_create(path: &PathBuf) -> Result<Pool, PoolError> {
    match Pool::open(path, LAYOUT) {
        Err(PoolError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            println!("creating {} ({} MiB)", path.display(), POOL_SIZE >> 20);
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| PoolError::Io {
                    op: "mkdir",
                    path: dir.into(),
                    source: e,
                })?;
            }
            Pool::create(path, &PoolOptions::new(LAYOUT, POOL_SIZE).root::<Root>())
        }
        other => other,
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let path = Args::parse().path;
    println!("flush instruction: {}", pmem_core::flush::kind());

    let (opened, c) = Counters::measure(|| open_or_create(&path));
    let mut pool = opened?;
    let info = pool.info();
    println!(
        "pool {}: layout {:?}, {} KiB, mode {} ({}), durable: {}",
        path.display(),
        info.layout,
        info.pool_size >> 10,
        info.mode,
        info.mode_source.describe(),
        info.durable
    );
    println!("  open/create cost: {}", describe(c));

    // 1. A typed root, updated in place and persisted.
    let root = pool.root::<Root>()?;
    let (r, c) = Counters::measure(|| -> Result<u64, PoolError> {
        let runs = pool.read(root)?.runs + 1;
        pool.write(root.cast::<u64>(), &runs)?;
        pool.persist_ptr(root.cast::<u64>())?;
        Ok(runs)
    });
    let runs = r?;
    println!("run #{runs} recorded in the root: {}", describe(c));

    // 2. The page allocator over the heap, formatted while the heap is still blank
    //    (also after a crash between creating the pool and formatting it).
    let pool = Arc::new(pool);
    let blank = pool.bytes(pool.heap().start, 64)?.iter().all(|&b| b == 0);
    // SAFETY: this program is the only user of the heap, and touches allocated nodes
    // only through the allocator's publication and shared reads below.
    let alloc = unsafe {
        if blank {
            PageAllocator::format_heap(Arc::clone(&pool))?
        } else {
            PageAllocator::open_heap(Arc::clone(&pool))?
        }
    };

    // 3. Append a node: initialise, persist, publish into root.head, crash-atomically.
    let old_head = pool.read(root)?.head;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let node = Node {
        run: runs,
        created_unix_s: now,
        next: old_head,
    };
    let slot: PPtr<AtomicPPtr<u8>> = root
        .byte_add(offset_of!(Root, head) as u64)
        .ok_or("root offset overflow")?;
    let (r, c) = Counters::measure(|| {
        // SAFETY: root.head is read only after this returns, on this thread.
        unsafe {
            alloc.alloc_publish(
                std::mem::size_of::<Node>() as u64,
                slot,
                &mut |bytes: &mut [u8]| {
                    bytes[..std::mem::size_of::<Node>()].copy_from_slice(node.as_bytes())
                },
            )
        }
    });
    let block = r?;
    println!(
        "appended node at {:?} with alloc_publish: {}",
        block,
        describe(c)
    );

    // 4. Walk the list through offset pointers.
    let mut p = pool.read(root)?.head;
    let mut walked = Vec::new();
    while !p.is_null() && walked.len() < 10_000 {
        let n = pool.read(p)?;
        walked.push(n.run);
        p = n.next;
    }
    let stats = alloc.stats();
    println!(
        "list holds {} nodes (runs {:?}{}); heap pages used {}/{}",
        walked.len(),
        &walked[..walked.len().min(8)],
        if walked.len() > 8 { ", ..." } else { "" },
        stats.pages_used,
        stats.pages_total
    );
    println!(
        "run again to see the list grow; `pmkit pool info {}` shows the pool",
        path.display()
    );
    Ok(())
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tour: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
