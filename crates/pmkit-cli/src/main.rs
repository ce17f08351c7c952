//! `pmkit`: create, inspect and check persistent-memory pool files, after PMDK's
//! `pmempool`.
//!
//! ```text
//! pmkit pool create FILE --size SIZE --layout NAME   # SIZE: bytes or 8K, 64M, 1G, 2GiB ...
//! pmkit pool create /dev/daxX.Y --layout NAME        # device DAX: size and alignment from sysfs
//! pmkit pool info FILE [--json]                      # header, mode, sizes, usage
//! pmkit pool check FILE                              # a line per check; exit 0, or 1 on a problem
//! pmkit pool upgrade FILE                            # format version 2 -> 3, in place
//! pmkit pool grow FILE --size SIZE                    # a raft-nvm list store, offline
//! ```
//!
//! `info` and `check` understand every layout pmkit writes — a page allocator, a
//! transaction heap (pmem-core), an NVWA heap, a defragmenting heap, a WAFA heap and
//! a raft-nvm list store — and summarise (`info`: objects, fill, log state,
//! fragmentation) or validate (`check`: checksums, block maps, logs, as each
//! crate's recovery would) its heap; see [`heaps`]. They open the pool read-only
//! and never write to it; `grow` writes
//! a grown copy and renames it over the file only once it is complete. Every failure
//! is one line `pmkit: FILE: reason` on stderr and exit code 1 (usage errors are
//! clap's, exit code 2); a panic would be a bug, and is reported the same way
//! rather than with a backtrace.

mod check;
mod cli;
mod create;
mod failure;
mod grow;
mod heaps;
mod human;
mod info;
mod platform;
mod report;
mod size;
mod upgrade;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command, PoolCommand};
use failure::Failure;

fn main() -> ExitCode {
    let cli = Cli::parse();
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("(no message)");
        let location = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!(
            "pmkit: internal error: {}{location} (this is a bug in pmkit)",
            human::one_line(message)
        );
    }));
    let outcome = std::panic::catch_unwind(|| run(&cli));
    match outcome {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(failure)) => {
            eprintln!("pmkit: {failure}");
            ExitCode::FAILURE
        }
        // The hook has printed the one line already.
        Err(_) => ExitCode::FAILURE,
    }
}

/// Runs one command, writing its normal output to stdout.
fn run(cli: &Cli) -> Result<(), Failure> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match &cli.command {
        Command::Pool(PoolCommand::Create { file, size, layout }) => {
            create::run(file, size.as_deref(), layout, &mut out)?
        }
        Command::Pool(PoolCommand::Info { file, json }) => info::run(file, *json, &mut out)?,
        Command::Pool(PoolCommand::Check { file }) => check::run(file, &mut out)?,
        Command::Pool(PoolCommand::Upgrade { file }) => upgrade::run(file, &mut out)?,
        Command::Pool(PoolCommand::Grow { file, size }) => grow::run(file, size, &mut out)?,
    }
    failure::output(out.flush())
}
