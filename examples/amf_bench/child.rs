//! Running a workload in a child process under a memory limit the kernel
//! enforces: this executable again ([`std::env::current_exe`]), placed in a fresh
//! memory cgroup named `pmkit-amf-<pid>-<n>`.
//!
//! * **cgroup v2** when `/sys/fs/cgroup/unified` or `/sys/fs/cgroup` is a
//!   `cgroup2` mount whose `cgroup.subtree_control` enables `memory` and where a
//!   cgroup can be made: `memory.max` = the limit, and `memory.swap.max` = 0 when
//!   present (so swap cannot rescue a run);
//! * else **cgroup v1** at the `memory` hierarchy's mount
//!   (`/sys/fs/cgroup/memory`): `memory.limit_in_bytes` = the limit, and
//!   `memory.memsw.limit_in_bytes` the same when writable (memory + swap: no
//!   swap either).
//!
//! The cgroup is made at the hierarchy's root (not under this process's own
//! cgroup, which belongs to whoever started us). The child joins it before it
//! runs any of its own code: `pre_exec` writes `0` (the writer itself) to the
//! cgroup's `cgroup.procs` between `fork` and `exec`, so no allocation of the
//! child escapes the limit. The cgroup is removed afterwards (`rmdir`, retried
//! briefly while it still has tasks), after its counters are read: the peak
//! (`memory.max_usage_in_bytes` / `memory.peak`), the limit hits
//! (`memory.failcnt` / `memory.events` `max`) and the OOM kills
//! (`memory.oom_control` / `memory.events` `oom_kill`).
//!
//! When no cgroup can be made (not root, read-only, no memory controller) the
//! error is [`ChildError::NoCgroup`]; [`cgroup_available`] says so up front, so the
//! caller can fall back to a limit the heap enforces itself.

use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use thiserror::Error;

/// [`ChildOutcome::limit_source`] of a cgroup v2 limit.
pub const CGROUP_V2: &str = "cgroup-v2";
/// [`ChildOutcome::limit_source`] of a cgroup v1 limit.
pub const CGROUP_V1: &str = "cgroup-v1";
/// Bytes of the child's stderr kept in [`ChildOutcome::stderr_tail`].
const STDERR_TAIL: usize = 4096;
/// Where cgroup v2 may be mounted, in order of preference.
const V2_MOUNTS: [&str; 2] = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"];
/// Where the cgroup v1 memory hierarchy is normally mounted.
const V1_MOUNT: &str = "/sys/fs/cgroup/memory";
/// `rmdir` attempts while the cgroup still has tasks, and the pause between them.
const RMDIR_TRIES: u32 = 100;
/// See [`RMDIR_TRIES`].
const RMDIR_PAUSE: Duration = Duration::from_millis(10);

/// Numbers the cgroups of this process.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// Why a limited child could not be run.
#[derive(Debug, Error)]
pub enum ChildError {
    /// No memory cgroup could be made or limited; the reason of each version.
    #[error("no memory cgroup: {0}")]
    NoCgroup(String),
    /// This executable's path is unknown.
    #[error("current executable: {0}")]
    CurrentExe(#[source] io::Error),
    /// The child could not be started (or could not join the cgroup) or its
    /// output could not be read.
    #[error("spawning the child: {0}")]
    Spawn(#[source] io::Error),
}

/// How a limited child ended.
#[derive(Debug, Clone)]
pub struct ChildOutcome {
    /// It exited with status 0.
    pub completed: bool,
    /// Its exit status, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// Killed by `SIGKILL`, or the cgroup's OOM-kill count rose.
    pub oom_killed: bool,
    /// The cgroup's OOM kills (`memory.oom_control` `oom_kill` on v1,
    /// `memory.events` `oom_kill` on v2), when readable.
    pub oom_kills: Option<u64>,
    /// Times usage hit the limit (`memory.failcnt` on v1, `memory.events` `max`
    /// on v2): reclaim, not necessarily a kill.
    pub limit_hits: Option<u64>,
    /// Its whole stdout (lossy UTF-8).
    pub stdout: String,
    /// The last 4 KiB of its stderr (lossy UTF-8).
    pub stderr_tail: String,
    /// [`CGROUP_V2`] or [`CGROUP_V1`].
    pub limit_source: &'static str,
    /// Swap was excluded too (`memory.swap.max` = 0 or the memsw limit set).
    pub swap_limited: bool,
    /// The cgroup's peak usage (`memory.max_usage_in_bytes` on v1,
    /// `memory.peak` on v2), when readable; it counts page cache too.
    pub peak_bytes: Option<u64>,
    /// The cgroup was removed afterwards.
    pub cgroup_removed: bool,
}

/// Which cgroup interface a [`Cgroup`] uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Version {
    /// The unified hierarchy.
    V2,
    /// The v1 memory hierarchy.
    V1,
}

/// A memory cgroup made by this process; removed on drop if not before.
#[derive(Debug)]
struct Cgroup {
    /// Its directory.
    dir: PathBuf,
    /// Its interface.
    version: Version,
    /// Swap is excluded.
    swap_limited: bool,
    /// Already removed (or being given up).
    removed: bool,
}

/// The counters of a cgroup after its child ended.
struct Counters {
    /// OOM kills.
    oom_kills: Option<u64>,
    /// Limit hits.
    limit_hits: Option<u64>,
    /// Peak usage.
    peak: Option<u64>,
}

/// The file system type and super options of the mount at `mount_point`, from
/// `/proc/self/mountinfo` (the last such mount wins, as it hides the others).
fn mount_of(mount_point: &str) -> Option<(String, String)> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut found = None;
    for line in info.lines() {
        let mut fields = line.split(' ');
        if fields.nth(4) != Some(mount_point) {
            continue;
        }
        let mut rest = line.split(" - ").nth(1)?.split(' ');
        let fstype = rest.next()?.to_owned();
        let opts = rest.nth(1).unwrap_or("").to_owned();
        found = Some((fstype, opts));
    }
    found
}

/// The mount point of the cgroup v1 hierarchy holding the memory controller.
fn v1_memory_mount() -> Option<PathBuf> {
    let has_memory = |opts: &str| opts.split(',').any(|o| o == "memory");
    if let Some((fstype, opts)) = mount_of(V1_MOUNT) {
        if fstype == "cgroup" && has_memory(&opts) {
            return Some(PathBuf::from(V1_MOUNT));
        }
    }
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|line| {
        let point = line.split(' ').nth(4)?;
        let mut rest = line.split(" - ").nth(1)?.split(' ');
        let fstype = rest.next()?;
        let opts = rest.nth(1).unwrap_or("");
        (fstype == "cgroup" && has_memory(opts)).then(|| PathBuf::from(point))
    })
}

/// Writes `value` to the control file `name` of `dir`.
fn write_control(dir: &Path, name: &str, value: &str) -> Result<(), String> {
    let path = dir.join(name);
    std::fs::write(&path, value).map_err(|e| format!("writing {value} to {}: {e}", path.display()))
}

/// Reads the control file `name` of `dir` as one number.
fn read_number(dir: &Path, name: &str) -> Option<u64> {
    std::fs::read_to_string(dir.join(name))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Reads the `key value` line `key` of the control file `name` of `dir`.
fn read_keyed(dir: &Path, name: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(dir.join(name)).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

impl Cgroup {
    /// A fresh cgroup limited to `limit` bytes: v2 if possible, else v1.
    ///
    /// # Errors
    ///
    /// Why neither version could be made, one reason per version.
    fn create(limit: u64) -> Result<Cgroup, String> {
        let name = format!(
            "pmkit-amf-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let v2 = match Self::v2_root() {
            Ok(root) => match Self::create_in(&root, &name, Version::V2, limit) {
                Ok(cg) => return Ok(cg),
                Err(e) => e,
            },
            Err(e) => e,
        };
        let v1 = match v1_memory_mount() {
            Some(root) => match Self::create_in(&root, &name, Version::V1, limit) {
                Ok(cg) => return Ok(cg),
                Err(e) => e,
            },
            None => "no cgroup v1 mount with the memory controller".to_owned(),
        };
        Err(format!("cgroup v2: {v2}; cgroup v1: {v1}"))
    }

    /// The first cgroup2 mount whose subtree control enables `memory`.
    fn v2_root() -> Result<PathBuf, String> {
        let mut why = Vec::new();
        for point in V2_MOUNTS {
            match mount_of(point) {
                Some((fstype, _)) if fstype == "cgroup2" => {
                    let control = Path::new(point).join("cgroup.subtree_control");
                    match std::fs::read_to_string(&control) {
                        Ok(s) if s.split_whitespace().any(|c| c == "memory") => {
                            return Ok(PathBuf::from(point));
                        }
                        Ok(_) => why.push(format!("{point}: memory not in cgroup.subtree_control")),
                        Err(e) => why.push(format!("{}: {e}", control.display())),
                    }
                }
                Some((fstype, _)) => why.push(format!("{point} is {fstype}")),
                None => why.push(format!("{point} not mounted")),
            }
        }
        Err(why.join(", "))
    }

    /// Makes the cgroup `name` under `root` and limits it.
    fn create_in(root: &Path, name: &str, version: Version, limit: u64) -> Result<Cgroup, String> {
        let dir = root.join(name);
        std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        // Removed on drop from here on, also when a limit cannot be set.
        let mut cg = Cgroup {
            dir,
            version,
            swap_limited: false,
            removed: false,
        };
        let value = limit.to_string();
        match version {
            Version::V2 => {
                write_control(&cg.dir, "memory.max", &value)?;
                if cg.dir.join("memory.swap.max").exists() {
                    write_control(&cg.dir, "memory.swap.max", "0")?;
                    cg.swap_limited = true;
                }
            }
            Version::V1 => {
                write_control(&cg.dir, "memory.limit_in_bytes", &value)?;
                // Must not be below the memory limit, which it now equals.
                cg.swap_limited =
                    write_control(&cg.dir, "memory.memsw.limit_in_bytes", &value).is_ok();
            }
        }
        Ok(cg)
    }

    /// [`CGROUP_V2`] or [`CGROUP_V1`].
    fn source(&self) -> &'static str {
        match self.version {
            Version::V2 => CGROUP_V2,
            Version::V1 => CGROUP_V1,
        }
    }

    /// The counters, read after the child ended.
    fn counters(&self) -> Counters {
        let d = &self.dir;
        match self.version {
            Version::V2 => Counters {
                oom_kills: read_keyed(d, "memory.events", "oom_kill"),
                limit_hits: read_keyed(d, "memory.events", "max"),
                peak: read_number(d, "memory.peak"),
            },
            Version::V1 => Counters {
                oom_kills: read_keyed(d, "memory.oom_control", "oom_kill"),
                limit_hits: read_number(d, "memory.failcnt"),
                peak: read_number(d, "memory.max_usage_in_bytes"),
            },
        }
    }

    /// Removes the cgroup, retrying briefly while it still has tasks (`EBUSY`);
    /// whether it is gone.
    fn remove(&mut self) -> bool {
        if self.removed {
            return true;
        }
        for _ in 0..RMDIR_TRIES {
            match std::fs::remove_dir(&self.dir) {
                Ok(()) => {
                    self.removed = true;
                    return true;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    self.removed = true;
                    return true;
                }
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => std::thread::sleep(RMDIR_PAUSE),
                Err(_) => break,
            }
        }
        // Given up: do not try again on drop.
        self.removed = true;
        false
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Whether a limited child can be run, and with which limit: makes and removes
/// a probe cgroup.
///
/// # Errors
///
/// Why no cgroup could be made (each version's reason).
pub fn cgroup_probe() -> Result<&'static str, String> {
    let mut cg = Cgroup::create(64 << 20)?;
    let source = cg.source();
    if !cg.remove() {
        return Err(format!(
            "could not remove the probe cgroup {}",
            cg.dir.display()
        ));
    }
    Ok(source)
}

/// [`CGROUP_V2`] or [`CGROUP_V1`] when [`run_limited`] can limit a child, `None`
/// when it would return [`ChildError::NoCgroup`] ([`cgroup_probe`] says why).
pub fn cgroup_available() -> Option<&'static str> {
    cgroup_probe().ok()
}

/// Joins the cgroup whose `cgroup.procs` is `procs`: writes `0` (the writer) to
/// it. Runs in the child between `fork` and `exec`, so it only makes
/// async-signal-safe calls (`open`, `write`, `close`) and allocates nothing
/// (`io::Error::last_os_error` is an errno value, not an allocation).
fn join_cgroup(procs: &CStr) -> io::Result<()> {
    // SAFETY: `procs` is a valid NUL-terminated string that outlives the call;
    // open(2) is async-signal-safe.
    let fd = unsafe { libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is the descriptor just opened; the buffer is a 1-byte static;
    // write(2) is async-signal-safe.
    let n = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
    let err = (n != 1).then(io::Error::last_os_error);
    // SAFETY: `fd` is ours and closed once; close(2) is async-signal-safe.
    unsafe { libc::close(fd) };
    err.map_or(Ok(()), Err)
}

/// The last [`STDERR_TAIL`] bytes of `bytes`, as lossy UTF-8.
fn tail(bytes: &[u8]) -> String {
    let from = bytes.len().saturating_sub(STDERR_TAIL);
    String::from_utf8_lossy(&bytes[from..]).into_owned()
}

/// Runs this executable with `args` in a fresh memory cgroup limited to
/// `limit_bytes` (see the module doc), waits for it, and reports how it ended,
/// with its stdout and the tail of its stderr. stdin is `/dev/null`.
///
/// # Errors
///
/// [`ChildError::NoCgroup`] when no cgroup can be made (fall back to another
/// limit), [`ChildError::CurrentExe`] or [`ChildError::Spawn`] when the child
/// cannot be started or joined to the cgroup.
pub fn run_limited(args: &[String], limit_bytes: u64) -> Result<ChildOutcome, ChildError> {
    run_limited_with(args, limit_bytes, None)
}

/// The line a fusion child prints when its section file exists, before it uses
/// it; it then waits for one line on stdin.
pub const SECTIONS_READY: &str = "sections-ready";

/// As [`run_limited`]; with `precharge`, the child's section file is read
/// through once by this process (outside the child's cgroup) when the child
/// says [`SECTIONS_READY`], before the child is told to go on. Reading a sparse
/// file's holes fills the page cache, and pages are charged to the cgroup of
/// whoever first faults them in: so the section's pages are charged to this
/// process's cgroup, not to the child's limit — as real PM is not DRAM and is
/// not charged to a memory cgroup. Without it the page cache that stands in for
/// PM competes with the child's DRAM under the one limit.
pub fn run_limited_with(
    args: &[String],
    limit_bytes: u64,
    precharge: Option<&Path>,
) -> Result<ChildOutcome, ChildError> {
    let exe = std::env::current_exe().map_err(ChildError::CurrentExe)?;
    let mut cg = Cgroup::create(limit_bytes).map_err(ChildError::NoCgroup)?;
    // Made before the fork: the child must not allocate.
    let procs = CString::new(cg.dir.join("cgroup.procs").as_os_str().as_bytes())
        .map_err(|e| ChildError::NoCgroup(format!("cgroup path: {e}")))?;
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .stdin(if precharge.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: the closure runs in the forked child before exec. It only calls
    // `join_cgroup`, which makes async-signal-safe system calls (open, write,
    // close) on a path allocated here, before the fork, and allocates nothing;
    // it touches no lock another thread of the parent could have held.
    unsafe {
        cmd.pre_exec(move || join_cgroup(&procs));
    }
    let out = match precharge {
        None => cmd.output().map_err(ChildError::Spawn)?,
        Some(path) => converse(cmd, path).map_err(ChildError::Spawn)?,
    };
    let c = cg.counters();
    let removed = cg.remove();
    let signal = out.status.signal();
    let oom_killed = signal == Some(libc::SIGKILL) || c.oom_kills.is_some_and(|n| n > 0);
    Ok(ChildOutcome {
        completed: out.status.success(),
        exit_code: out.status.code(),
        signal,
        oom_killed,
        oom_kills: c.oom_kills,
        limit_hits: c.limit_hits,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr_tail: tail(&out.stderr),
        limit_source: cg.source(),
        swap_limited: cg.swap_limited,
        peak_bytes: c.peak,
        cgroup_removed: removed,
    })
}

/// Runs the child, answering its [`SECTIONS_READY`] line by reading `path`
/// through and writing `go`; collects its output as `Command::output` does.
fn converse(mut cmd: Command, path: &Path) -> io::Result<std::process::Output> {
    use std::io::{BufRead, Read, Write};
    let mut child = cmd.spawn()?;
    let stderr = child.stderr.take();
    let errs = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut e) = stderr {
            let _ = e.read_to_end(&mut buf);
        }
        buf
    });
    let mut stdin = child.stdin.take();
    let mut stdout = Vec::new();
    if let Some(out) = child.stdout.take() {
        let mut lines = io::BufReader::new(out);
        let mut line = String::new();
        while lines.read_line(&mut line)? > 0 {
            if line.trim_end() == SECTIONS_READY {
                if let Some(mut input) = stdin.take() {
                    read_through(path)?;
                    input.write_all(b"go\n")?;
                }
            }
            stdout.extend_from_slice(line.as_bytes());
            line.clear();
        }
    }
    drop(stdin);
    let status = child.wait()?;
    let stderr = errs.join().unwrap_or_default();
    Ok(std::process::Output {
        status,
        stdout,
        stderr,
    })
}

/// Reads `path` to its end in 1 MiB pieces, discarding the bytes.
fn read_through(path: &Path) -> io::Result<()> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    while f.read(&mut buf)? > 0 {}
    Ok(())
}

/// Runs this executable with `args` without a cgroup (no limit, or a limit the
/// child's heap enforces itself: `limit_source` says which), waits for it, and
/// reports how it ended, as [`run_limited`] does.
///
/// # Errors
///
/// [`ChildError::CurrentExe`] or [`ChildError::Spawn`] when the child cannot be
/// started.
pub fn run_plain(args: &[String], limit_source: &'static str) -> Result<ChildOutcome, ChildError> {
    let exe = std::env::current_exe().map_err(ChildError::CurrentExe)?;
    let out = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(ChildError::Spawn)?;
    let signal = out.status.signal();
    Ok(ChildOutcome {
        completed: out.status.success(),
        exit_code: out.status.code(),
        signal,
        oom_killed: signal == Some(libc::SIGKILL),
        oom_kills: None,
        limit_hits: None,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr_tail: tail(&out.stderr),
        limit_source,
        swap_limited: false,
        peak_bytes: None,
        cgroup_removed: true,
    })
}
