//! Progress of an example's long run, on stderr: a bar per section of the run,
//! with the step running now and the time the section has taken.
//!
//! indicatif draws to stderr, and only when stderr is a terminal (its stderr target
//! hides itself otherwise), so a run sent to a file or a pipe writes nothing more
//! and stdout never carries a bar: `--json`'s last line stays one clean line.
//!
//! stdout and stderr share the terminal in an interactive run, so a line printed to
//! stdout while a bar is drawn would land inside the bar's line: such prints go
//! through [`suspend`], which takes the bar off the screen for them. The bar of the
//! running section is kept in a global, so that code deep in a section can print
//! ([`suspend`], [`outln!`]) or start a step ([`step`]) without being handed it.

use std::fmt::Display;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// The bar of the section running now, if any, with the section's number.
static CURRENT: Mutex<Option<(u64, ProgressBar)>> = Mutex::new(None);

/// The number of the next section (tells a section's own bar from a later one's).
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// How often a visible bar is redrawn while nothing else moves it: often enough that
/// the elapsed time shows the run is alive, seldom enough to cost nothing.
const TICK: Duration = Duration::from_millis(500);

/// One section of a run: a bar of `steps` steps, cleared when dropped.
pub struct Section {
    id: u64,
    bar: ProgressBar,
}

impl Section {
    /// Starts section `name` of `steps` steps, replacing the bar of the section before it. The bar is redrawn every half second
    /// (its elapsed time moving) by indicatif's ticker thread.
    pub fn new(name: &str, steps: u64) -> Section {
        Section::start(name, steps, true)
    }

    /// As [`Section::new`], but drawn only when a step starts: no ticker thread,
    /// which allocates as it draws, for runs that measure the process allocator
    /// (`wafa_wear` replays its traces through glibc's).
    pub fn without_ticker(name: &str, steps: u64) -> Section {
        Section::start(name, steps, false)
    }

    fn start(name: &str, steps: u64, tick: bool) -> Section {
        let bar = ProgressBar::new(steps);
        // The template is a constant: were it bad (this file's bug, seen on the first
        // run), the default style would still show progress.
        if let Ok(style) = ProgressStyle::with_template(
            "{spinner} {prefix} {bar:20} {pos}/{len} [{elapsed}] {msg}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(name.to_owned());
        // A hidden bar (stderr not a terminal) needs no ticker thread.
        if tick && !bar.is_hidden() {
            bar.enable_steady_tick(TICK);
        }
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut current) = CURRENT.lock() {
            if let Some((_, old)) = current.replace((id, bar.clone())) {
                old.finish_and_clear();
            }
        }
        Section { id, bar }
    }

    /// Starts the next step, `what`: the step before it counts as done.
    pub fn step(&self, what: impl Display) {
        next_step(&self.bar, what);
    }
}

impl Drop for Section {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
        if let Ok(mut current) = CURRENT.lock() {
            // Only this section's own bar: a later section may have replaced it.
            if current.as_ref().is_some_and(|(id, _)| *id == self.id) {
                *current = None;
            }
        }
    }
}

/// Starts the next step of the running section, `what` (as [`Section::step`], for
/// code deep in a section); nothing when no section runs.
pub fn step(what: impl Display) {
    if let Ok(current) = CURRENT.lock() {
        if let Some((_, bar)) = current.as_ref() {
            next_step(bar, what);
        }
    }
}

/// Counts the step `bar` shows as done, if it shows one (a section's bar has no
/// message until its first step), and shows `what`.
fn next_step(bar: &ProgressBar, what: impl Display) {
    if !bar.message().is_empty() {
        bar.inc(1);
    }
    bar.set_message(what.to_string());
}

/// Runs `f` (which prints to stdout) with the running section's bar off the screen.
pub fn suspend<R>(f: impl FnOnce() -> R) -> R {
    let bar = CURRENT
        .lock()
        .ok()
        .and_then(|c| c.as_ref().map(|(_, b)| b.clone()));
    match bar {
        Some(bar) => bar.suspend(f),
        None => f(),
    }
}

/// `println!` with the running section's bar off the screen (see [`suspend`]): the
/// same bytes on stdout, and no bar text among them on a terminal.
#[allow(unused_macros)]
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::progress::suspend(|| println!($($arg)*))
    };
}
#[allow(unused_imports)]
pub(crate) use outln;
