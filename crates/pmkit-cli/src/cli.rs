//! The command line, declared with clap's derive API.
//!
//! ```text
//! pmkit pool create FILE --size SIZE --layout NAME
//! pmkit pool info FILE [--json]
//! pmkit pool check FILE
//! pmkit pool grow FILE --size SIZE
//! ```

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Tools for pmkit persistent-memory pools (after PMDK's pmempool).
#[derive(Debug, Parser)]
#[command(name = "pmkit", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The top-level command groups.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create, inspect and check pool files.
    #[command(subcommand)]
    Pool(PoolCommand),
}

/// `pmkit pool ...`.
#[derive(Debug, Subcommand)]
pub enum PoolCommand {
    /// Create a pool file and format its heap with a page allocator.
    Create {
        /// The new pool file (must not exist), or a device-DAX device (`/dev/daxX.Y`,
        /// formatted over whatever it holds; size and alignment come from sysfs).
        file: PathBuf,
        /// Pool size: bytes, or a number with K, M, G or T (also KiB, MiB, GiB, TiB;
        /// binary multiples, case-insensitive). A multiple of 4096, at least 8K.
        /// Required for a file; on device DAX the whole device by default.
        #[arg(long, short = 's', value_name = "SIZE")]
        size: Option<String>,
        /// Layout name (1 to 63 bytes) that programs check when they open the pool.
        #[arg(long, short = 'l', value_name = "NAME")]
        layout: String,
    },
    /// Print a pool's header, durability mode and usage: for a heap pmkit writes
    /// (tx, nvwa, defrag, WAFA, raft-nvm list) its objects, fill, log state and
    /// fragmentation (opens read-only).
    Info {
        /// The pool file.
        file: PathBuf,
        /// Print one line of JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Check a pool: its header, its heap's structures as the heap's own recovery
    /// checks them (checksums, block maps, logs), the platform; exit 0 if it is
    /// sound, 1 with a one-line reason if not (opens read-only, writes nothing).
    Check {
        /// The pool file.
        file: PathBuf,
    },
    /// Upgrade a pool's format in place to the current version (version 2 -> 3:
    /// adds the shutdown-state record); a current pool is left unchanged.
    Upgrade {
        /// The pool file.
        file: PathBuf,
    },
    /// Grow a raft-nvm list store's pool, offline (stop its node first): a grown
    /// copy is built beside it and renamed over it, so a failure changes nothing.
    Grow {
        /// The pool file.
        file: PathBuf,
        /// The new size, larger than the pool's (same units as `create`).
        #[arg(long, short = 's', value_name = "SIZE")]
        size: String,
    },
}
