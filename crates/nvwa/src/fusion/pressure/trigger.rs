//! [`PsiTrigger`]: a kernel PSI trigger on memory pressure, the event that wakes
//! the daemon between its periods.
//!
//! Linux (4.20+, `CONFIG_PSI`) lets a program ask to be told when tasks stall on
//! memory for more than a threshold within a window: it writes
//! `some <stall µs> <window µs>` to `/proc/pressure/memory` (or a cgroup v2
//! `memory.pressure`) on a descriptor it keeps open, and `poll(2)` reports
//! `POLLPRI` on that descriptor each time the threshold is crossed
//! (`Documentation/accounting/psi.rst`). This is the kernel's own pressure event,
//! the nearest thing user space has to the paper's kpmemd being woken from the
//! allocator's slow path. The window must be between 500 ms and 10 s (2 s at
//! least for unprivileged users), and the stall at most the window.
//!
//! Where PSI is absent (`psi=0`, an old kernel, no such file) [`PsiTrigger::new`]
//! fails with the reason and the daemon runs on its period alone.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::PressureError;

/// The system-wide memory PSI file.
pub const PROC_PRESSURE_MEMORY: &str = "/proc/pressure/memory";

/// An armed PSI trigger. See the module docs.
#[derive(Debug)]
pub struct PsiTrigger {
    file: File,
    path: PathBuf,
}

impl PsiTrigger {
    /// Arms a trigger on `path` (`/proc/pressure/memory` or a cgroup's
    /// `memory.pressure`): an event each time some task stalls on memory for
    /// more than `stall` within `window`.
    pub fn new(
        path: impl AsRef<Path>,
        stall: Duration,
        window: Duration,
    ) -> Result<PsiTrigger, PressureError> {
        let path = path.as_ref();
        let io_err = |source| PressureError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(io_err)?;
        let spec = format!("some {} {}\0", stall.as_micros(), window.as_micros());
        // The kernel reads the whole trigger from one write, NUL included.
        file.write_all(spec.as_bytes()).map_err(io_err)?;
        Ok(PsiTrigger {
            file,
            path: path.to_path_buf(),
        })
    }

    /// The system-wide trigger: 100 ms of stall in a 1 s window.
    pub fn system() -> Result<PsiTrigger, PressureError> {
        PsiTrigger::new(
            PROC_PRESSURE_MEMORY,
            Duration::from_millis(100),
            Duration::from_secs(1),
        )
    }

    /// The file it is armed on.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits up to `timeout` for an event: `Ok(true)` if the threshold was
    /// crossed, `Ok(false)` on timeout (or an interrupted wait).
    pub fn wait(&self, timeout: Duration) -> io::Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.file.as_raw_fd(),
            events: libc::POLLPRI,
            revents: 0,
        };
        let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: one valid pollfd on the stack for the call's duration; the
        // descriptor is ours and open.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            };
        }
        if pfd.revents & (libc::POLLERR | libc::POLLNVAL) != 0 {
            return Err(io::Error::other("the PSI trigger's file went away"));
        }
        Ok(n > 0 && pfd.revents & libc::POLLPRI != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_trigger_is_refused_with_the_file_named() {
        // A window below the kernel's 500 ms minimum, or no PSI at all: either
        // way an error that names the file, never a panic.
        match PsiTrigger::new(
            PROC_PRESSURE_MEMORY,
            Duration::from_millis(1),
            Duration::from_millis(2),
        ) {
            Err(e) => assert!(e.to_string().contains("pressure/memory"), "{e}"),
            Ok(_) => panic!("a 2 ms window is below the kernel's minimum"),
        }
        let missing = PsiTrigger::new(
            "/nonexistent/memory.pressure",
            Duration::from_millis(100),
            Duration::from_secs(1),
        );
        assert!(matches!(missing, Err(PressureError::Io { .. })));
    }

    #[test]
    fn an_idle_trigger_times_out() {
        // Where PSI is on (as on this project's machines), an armed trigger on an
        // idle system waits out its timeout; elsewhere there is nothing to test.
        let Ok(t) = PsiTrigger::system() else {
            return;
        };
        assert_eq!(t.path(), Path::new(PROC_PRESSURE_MEMORY));
        // A wait on an armed trigger is a clean poll: no error, no POLLERR (an
        // event is possible if the machine really stalls, so its value is not
        // asserted).
        assert!(t.wait(Duration::from_millis(50)).is_ok());
    }
}
