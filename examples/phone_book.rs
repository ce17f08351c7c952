//! `phone_book`: a persistent phone book shared by two threads, which survives
//! `kill -9`.
//!
//! ```text
//! cargo run --release --example phone_book -- [--dir DIR] [--entries N]
//! ```
//!
//! The example starts itself again as a child process. The child opens the book
//! (a `PConcurrentHashMap<PString, PString>` named "phone book" in
//! `DIR/phone_book.pool`, an ordinary file: every operation is durable when it
//! returns, by `msync`) and adds entries from two threads, printing each entry as
//! soon as its `insert` has returned. After `N` printed entries (default 200) the
//! parent kills the child with SIGKILL, in the middle of its writes, reopens the
//! book and looks up every entry the child printed. Exit status 0 when none is
//! missing, 1 when one is (with its name), 2 on any other error.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use clap::Parser;
use pmem_collections::{PConcurrentHashMap, PHeap, PString};
use pmem_core::Pool;

/// The pool's layout name.
const LAYOUT: &str = "phone-book";
/// The root the book lives under.
const BOOK: &str = "phone book";

type Book = PConcurrentHashMap<PString, PString>;

/// A persistent phone book written by two threads of a child process, which is
/// killed with SIGKILL mid-write; every entry it acknowledged must be found again.
#[derive(Parser, Debug)]
#[command(name = "phone_book")]
struct Args {
    /// Where the book's pool goes (./target, else ., when not given).
    #[arg(long, value_name = "DIR", default_value_os_t = default_dir())]
    dir: PathBuf,
    /// Entries to see acknowledged before the kill.
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..))]
    entries: u64,
    /// Internal: run as the writer child on this pool (the parent starts it).
    #[arg(long, value_name = "POOL", hide = true)]
    child: Option<PathBuf>,
}

/// `./target` when it exists (a cargo checkout), else the working directory.
fn default_dir() -> PathBuf {
    if Path::new("target").is_dir() {
        PathBuf::from("target")
    } else {
        PathBuf::from(".")
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(path) = &args.child {
        return match child(path) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("phone_book child: {e}");
                ExitCode::from(2)
            }
        };
    }
    match parent(
        &args.dir,
        usize::try_from(args.entries).unwrap_or(usize::MAX),
    ) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("phone_book: {e}");
            ExitCode::from(2)
        }
    }
}

/// Adds entries from two threads until killed, printing each after its insert
/// returned.
fn child(path: &Path) -> Result<(), String> {
    let pool =
        Pool::create(path, &PHeap::pool_options(LAYOUT, 64 << 20)).map_err(|e| e.to_string())?;
    let heap = PHeap::create(pool).map_err(|e| e.to_string())?;
    let book: Book = heap.root(BOOK).map_err(|e| e.to_string())?;
    let out = std::sync::Mutex::new(std::io::stdout());
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|t| {
                let (heap, book, out) = (&heap, &book, &out);
                s.spawn(move || -> Result<(), String> {
                    for i in 0..1_000_000u32 {
                        let (name, number) = entry(t, i);
                        book.insert(heap, &name, &number)
                            .map_err(|e| e.to_string())?;
                        // Durable now: acknowledge it.
                        let mut o = out.lock().map_err(|_| "stdout lock poisoned")?;
                        writeln!(o, "{name}\t{number}").map_err(|e| e.to_string())?;
                        o.flush().map_err(|e| e.to_string())?;
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().map_err(|_| "a writer panicked".to_string())?)
    })
}

fn entry(thread: u32, i: u32) -> (String, String) {
    (
        format!("person {thread}-{i:06}"),
        format!("+1 555 {thread}{i:06}"),
    )
}

/// Runs the child, kills it after `n` acknowledgements, and checks the book.
fn parent(dir: &Path, n: usize) -> Result<bool, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join("phone_book.pool");
    if path.exists() {
        std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .arg("--child")
        .arg(&path)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting the child: {e}"))?;
    let stdout = child.stdout.take().ok_or("the child has no stdout")?;
    let mut acked = Vec::with_capacity(n);
    for line in BufReader::new(stdout).lines() {
        let line = line.map_err(|e| e.to_string())?;
        let (name, number) = line
            .split_once('\t')
            .ok_or_else(|| format!("the child printed {line:?}"))?;
        acked.push((name.to_string(), number.to_string()));
        if acked.len() >= n {
            break;
        }
    }
    // SIGKILL, in the middle of the child's next inserts.
    child.kill().map_err(|e| format!("kill: {e}"))?;
    let status = child.wait().map_err(|e| e.to_string())?;
    if acked.len() < n {
        return Err(format!(
            "the child stopped ({status}) after {} entries",
            acked.len()
        ));
    }

    let heap = PHeap::open(Pool::open(&path, LAYOUT).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let book: Book = heap.root(BOOK).map_err(|e| e.to_string())?;
    let mut missing = Vec::new();
    for (name, number) in &acked {
        match book.get(&heap, name).map_err(|e| e.to_string())? {
            Some(found) if &found == number => {}
            other => missing.push(format!("{name}: {other:?}, acknowledged {number:?}")),
        }
    }
    let total = book.len(&heap).map_err(|e| e.to_string())?;
    println!("phone book after kill -9 ({}, {})", path.display(), status);
    println!("| acknowledged | found again | missing | entries in the book |");
    println!("| ---: | ---: | ---: | ---: |");
    println!(
        "| {} | {} | {} | {} |",
        acked.len(),
        acked.len() - missing.len(),
        missing.len(),
        total
    );
    println!(
        "(entries beyond the acknowledged ones were inserted after the parent stopped \
         reading, or in flight at the kill and committed whole)"
    );
    for m in &missing {
        println!("MISSING {m}");
    }
    Ok(missing.is_empty())
}
