//! Creating, opening and closing pools.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use zerocopy::IntoBytes;

use super::domain;
use super::env_choices::EnvChoices;
use super::header::{Header, HEADER_LEN};
use super::mapping::Mapping;
#[cfg(feature = "sim")]
use super::mode::{DomainSource, PersistenceDomain};
use super::mode::{DurabilityMode, ModeSource};
use super::options::{OpenOptions, PoolOptions};
use super::Pool;
use crate::PoolError;

/// Largest pool this build maps (128 TiB): beyond it sizes are surely a mistake.
pub const MAX_POOL_SIZE: u64 = 1 << 47;

impl Pool {
    /// Creates a new pool file at `path` (which must not exist), `0600` by default.
    ///
    /// The header is written last and made durable, then the file and its directory
    /// are fsynced; a crash before that leaves a file that [`Pool::open`] rejects with
    /// a typed error. On any error the half-made file is removed.
    pub fn create(path: impl AsRef<Path>, opts: &PoolOptions) -> Result<Pool, PoolError> {
        let path = path.as_ref();
        let header = new_header(opts)?;
        // Read before the file exists, so an invalid value leaves nothing behind.
        let env = EnvChoices::read(path)?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(opts.permissions)
            .open(path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => PoolError::AlreadyExists { path: path.into() },
                _ => PoolError::io("create", path, e),
            })?;
        match Self::format_file(file, path, header, opts, env) {
            Ok(pool) => Ok(pool),
            Err(e) => {
                // We created the file a moment ago, so removing it loses nothing.
                let _ = std::fs::remove_file(path);
                Err(e)
            }
        }
    }

    fn format_file(
        file: File,
        path: &Path,
        header: Header,
        opts: &PoolOptions,
        env: EnvChoices,
    ) -> Result<Pool, PoolError> {
        lock(&file, path, false)?;
        reserve_space(&file, path, header.pool_size)?;
        let len = map_len(header.pool_size)?;
        let pool = Pool::format_mapped(file, path, header, len, false, opts, env)?;
        if let Some(f) = &pool.file {
            f.sync_all().map_err(|e| PoolError::io("fsync", path, e))?;
        }
        sync_parent_dir(path)?;
        tracing::info!(
            path = %path.display(),
            size = pool.header.pool_size,
            mode = %pool.mode,
            domain = %pool.domain,
            domain_source = pool.domain_source.name(),
            "pool created"
        );
        Ok(pool)
    }

    /// The part of a create that a file and a device-DAX device share: the locked
    /// and sized `file` is checked against the platform (bad blocks refuse it),
    /// mapped, given its persistence domain, and formatted (header persisted, the
    /// shutdown record opened).
    pub(super) fn format_mapped(
        file: File,
        path: &Path,
        header: Header,
        len: usize,
        is_devdax: bool,
        opts: &PoolOptions,
        env: EnvChoices,
    ) -> Result<Pool, PoolError> {
        // After the file is sized: its extents exist, so bad blocks can be mapped.
        let platform = super::platform_check::detect(&file, path, header.pool_size, false)?;
        let (map, mode, source) = Mapping::file(&file, len, true, is_devdax, opts.mode)
            .map_err(|e| PoolError::io("mmap", path, e))?;
        let mut pool = Pool::assemble(
            map,
            Some(file),
            path.to_path_buf(),
            header,
            mode,
            source,
            false,
        );
        pool.platform = Box::new(platform);
        // Before the header's persist: on eADR even that one elides its flush.
        let (d, dsource) =
            domain::decide(env.domain, opts.domain, || domain::detect(&pool.platform));
        pool.set_domain(d, dsource);
        pool.set_drain_policy(env.drain, None);
        pool.write_header();
        pool.persist(0, HEADER_LEN as u64)?;
        pool.open_shutdown_record(false)?;
        Ok(pool)
    }

    /// An anonymous, [`DurabilityMode::Volatile`] pool in memory, with the same header
    /// and layout as a file pool (for tests and benchmarks that isolate compute).
    pub fn anonymous(opts: &PoolOptions) -> Result<Pool, PoolError> {
        let header = new_header(opts)?;
        let env = EnvChoices::read(Path::new(""))?;
        let len = map_len(header.pool_size)?;
        let map = Mapping::anonymous(len).map_err(|e| PoolError::io("mmap", "", e))?;
        let mut pool = Pool::assemble(
            map,
            None,
            PathBuf::new(),
            header,
            DurabilityMode::Volatile,
            ModeSource::Anonymous,
            false,
        );
        // Volatile: the domain is only recorded (memory has no platform to detect).
        let (d, dsource) = domain::decide(env.domain, opts.domain, || None);
        pool.set_domain(d, dsource);
        pool.write_header();
        Ok(pool)
    }

    /// An anonymous pool holding a copy of `image` (a whole pool's bytes, header
    /// first), validated like a file. The crash simulator materialises crash images
    /// this way; `mode` and `source` say how the copy behaves.
    #[cfg(feature = "sim")]
    pub(crate) fn from_image_with(
        image: &[u8],
        mode: DurabilityMode,
        source: ModeSource,
    ) -> Result<Pool, PoolError> {
        let header = Header::parse(image, image.len() as u64, true)?;
        let len = map_len(header.pool_size)?;
        let map = Mapping::anonymous(len).map_err(|e| PoolError::io("mmap", "", e))?;
        let mut pool = Pool::assemble(map, None, PathBuf::new(), header, mode, source, false);
        // The simulator (its harness) sets the domain its model wants afterwards.
        pool.set_domain(PersistenceDomain::MemoryController, DomainSource::Simulated);
        // SAFETY: a fresh private mapping of exactly `image.len()` bytes (the header
        // parse checked the length); nothing references it yet.
        unsafe { std::ptr::copy_nonoverlapping(image.as_ptr(), pool.addr(0), image.len()) };
        Ok(pool)
    }

    /// A pool over a fresh private mapping that already holds a whole pool image
    /// (the crash simulator's copy-on-write images), validated like a file.
    #[cfg(feature = "sim")]
    pub(crate) fn from_mapping(
        map: Mapping,
        mode: DurabilityMode,
        source: ModeSource,
    ) -> Result<Pool, PoolError> {
        // SAFETY: the mapping is live and nothing else references it yet; the slice
        // is dropped before the Pool takes the mapping over.
        let bytes = unsafe { std::slice::from_raw_parts(map.base().as_ptr(), map.len()) };
        let header = Header::parse(bytes, bytes.len() as u64, true)?;
        let mut pool = Pool::assemble(map, None, PathBuf::new(), header, mode, source, false);
        pool.set_domain(PersistenceDomain::MemoryController, DomainSource::Simulated);
        Ok(pool)
    }

    /// Opens an existing pool read-write, requiring layout `layout`.
    pub fn open(path: impl AsRef<Path>, layout: &str) -> Result<Pool, PoolError> {
        Self::open_with(path, &OpenOptions::new().layout(layout))
    }

    /// Opens an existing pool with options. A refused or read-only open never writes
    /// to the file; a read-write open of a version-3 pool writes only its
    /// shutdown-state record (see [`super::shutdown_record`]).
    pub fn open_with(path: impl AsRef<Path>, opts: &OpenOptions) -> Result<Pool, PoolError> {
        let path = path.as_ref();
        let env = EnvChoices::read(path)?;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(!opts.read_only)
            // A FIFO would block the open until a writer appears; with O_NONBLOCK it
            // opens at once and the type check below rejects it. No effect on files.
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| PoolError::io("open", path, e))?;
        let meta = file
            .metadata()
            .map_err(|e| PoolError::io("stat", path, e))?;
        let is_devdax = check_file_type(&meta, path)?;
        lock(&file, path, opts.read_only)?;
        let file_len = if is_devdax {
            devdax_size(&meta, path)?
        } else {
            meta.len()
        };
        let prefix = read_prefix(&mut file, path, file_len)?;
        let header = Header::parse(&prefix, file_len, !is_devdax)?;
        if let Some(expected) = &opts.layout {
            if header.layout_name() != expected {
                return Err(PoolError::LayoutMismatch {
                    expected: expected.clone(),
                    found: header.layout_name().to_owned(),
                });
            }
        }
        let platform =
            super::platform_check::detect(&file, path, header.pool_size, opts.read_only)?;
        let len = map_len(header.pool_size)?;
        let (map, mode, source) = Mapping::file(&file, len, !opts.read_only, is_devdax, opts.mode)
            .map_err(|e| PoolError::io("mmap", path, e))?;
        let mut pool = Pool::assemble(
            map,
            Some(file),
            path.to_path_buf(),
            header,
            mode,
            source,
            opts.read_only,
        );
        pool.platform = Box::new(platform);
        let (d, dsource) =
            domain::decide(env.domain, opts.domain, || domain::detect(&pool.platform));
        pool.set_domain(d, dsource);
        pool.set_drain_policy(env.drain, opts.drain);
        tracing::debug!(
            path = %path.display(),
            %mode,
            ?source,
            domain = %pool.domain,
            domain_source = pool.domain_source.name(),
            "pool opened"
        );
        pool.open_shutdown_record(opts.accept_unsafe_shutdown)?;
        Ok(pool)
    }

    /// Makes pending flushes durable, marks a version-3 pool closed cleanly (its
    /// shutdown-state record), then unmaps and unlocks. Dropping a pool does the
    /// same but can only log a failure; `close` reports it.
    #[track_caller]
    pub fn close(mut self) -> Result<(), PoolError> {
        self.drain_result()?;
        self.close_shutdown_record()?;
        // Marked clean: the drop that follows has nothing more to record.
        self.shutdown_recorded = false;
        Ok(())
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // A simulated pool stops recording before it is unmapped; its drop fence is
        // not part of the workload (an explicit `close` is).
        #[cfg(feature = "sim")]
        if let Some(sim) = self.sim.take() {
            sim.detach();
        }
        match self.drain_result() {
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "drain on drop failed")
            }
            // Only a fully drained pool is marked clean.
            Ok(()) => {
                if let Err(e) = self.close_shutdown_record() {
                    tracing::warn!(path = %self.path.display(), error = %e, "marking the pool closed cleanly failed");
                }
            }
        }
        // Unlock explicitly rather than by closing: a child forked meanwhile by another
        // thread holds a copy of the descriptor until it execs, and closing ours alone
        // would leave the pool locked until then. Nothing writes through our mapping
        // after this point.
        if let Some(f) = &self.file {
            let _ = f.unlock();
        }
    }
}

impl Pool {
    /// Copies the pool's header (`self.header`) to offset 0 of the mapping: the one
    /// write into the header area, made while creating a pool, before anything else
    /// can reference it. The write API refuses the header area
    /// ([`PoolError::HeaderOverlap`]).
    pub(super) fn write_header(&mut self) {
        let bytes = self.header.as_bytes();
        // SAFETY: the mapping is at least a header area long (the header was
        // validated against the pool size) and writable (just created, not read-only);
        // `&mut self` means no reference into it is live; the source is the header
        // copy held outside the mapping.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.addr(0), bytes.len()) };
        crate::counters::add_bytes_written(bytes.len() as u64);
    }
}

pub(crate) fn new_header(opts: &PoolOptions) -> Result<Header, PoolError> {
    if opts.size > MAX_POOL_SIZE {
        return Err(PoolError::InvalidSize {
            size: opts.size,
            reason: "larger than 128 TiB",
        });
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Header::new(
        &opts.layout,
        opts.size,
        opts.root.as_ref(),
        *uuid::Uuid::new_v4().as_bytes(),
        now,
    )
}

/// Gives the file its size with its blocks allocated, so running out of disk is an
/// error here rather than a SIGBUS on some later store into the mapping. File
/// systems without `fallocate` get a sparse file (and the SIGBUS risk PMDK also has).
/// The raw `fallocate` syscall, not `posix_fallocate`, whose glibc emulation would
/// write every block on such file systems.
pub(super) fn reserve_space(file: &File, path: &Path, size: u64) -> Result<(), PoolError> {
    use std::os::fd::AsRawFd;
    let len = libc::off_t::try_from(size).map_err(|_| PoolError::InvalidSize {
        size,
        reason: "does not fit in a file offset",
    })?;
    // SAFETY: plain syscall on an fd we own; it only allocates blocks of that file.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) };
    let errno = match rc {
        0 => 0,
        _ => std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO),
    };
    match errno {
        0 => Ok(()),
        libc::EOPNOTSUPP | libc::EINVAL => file
            .set_len(size)
            .map_err(|e| PoolError::io("set_len", path, e)),
        libc::ENOSPC | libc::EFBIG => Err(PoolError::InvalidSize {
            size,
            reason: "no room for it on this file system",
        }),
        errno => Err(PoolError::io(
            "fallocate",
            path,
            std::io::Error::from_raw_os_error(errno),
        )),
    }
}

pub(super) fn map_len(size: u64) -> Result<usize, PoolError> {
    usize::try_from(size).map_err(|_| PoolError::InvalidSize {
        size,
        reason: "does not fit in this platform's address space",
    })
}

pub(super) fn lock(file: &File, path: &Path, shared: bool) -> Result<(), PoolError> {
    let r = if shared {
        file.try_lock_shared()
    } else {
        file.try_lock()
    };
    r.map_err(|e| match e {
        std::fs::TryLockError::WouldBlock => PoolError::Locked { path: path.into() },
        std::fs::TryLockError::Error(e) => PoolError::io("flock", path, e),
    })
}

/// Reads the first `HEADER_LEN` bytes (fewer if the file is shorter).
fn read_prefix(file: &mut File, path: &Path, file_len: u64) -> Result<Vec<u8>, PoolError> {
    let want = file_len.min(HEADER_LEN as u64) as usize;
    let mut buf = vec![0u8; want];
    file.read_exact(&mut buf).map_err(|e| match e.kind() {
        // The file shrank under us: report it as what it now is.
        std::io::ErrorKind::UnexpectedEof => PoolError::Truncated {
            actual: 0,
            expected: HEADER_LEN as u64,
        },
        _ => PoolError::io("read", path, e),
    })?;
    Ok(buf)
}

/// Accepts regular files and device-DAX character devices (returns true for those),
/// and rejects everything else with [`PoolError::UnsupportedFileType`].
pub(super) fn check_file_type(meta: &std::fs::Metadata, path: &Path) -> Result<bool, PoolError> {
    use std::os::unix::fs::MetadataExt;
    let t = meta.file_type();
    let unsupported = |kind: &'static str| {
        Err(PoolError::UnsupportedFileType {
            path: path.into(),
            kind,
        })
    };
    if t.is_file() {
        return Ok(false);
    }
    if t.is_char_device() {
        let rdev = meta.rdev();
        let (major, minor) = (libc::major(rdev), libc::minor(rdev));
        let link =
            crate::platform::sysfs_root().join(format!("dev/char/{major}:{minor}/subsystem"));
        let is_dax = std::fs::read_link(&link)
            .ok()
            .and_then(|target| target.file_name().map(|n| n == "dax"))
            .unwrap_or(false);
        return if is_dax {
            Ok(true)
        } else {
            unsupported("a character device that is not device DAX")
        };
    }
    if t.is_dir() {
        unsupported("a directory")
    } else if t.is_fifo() {
        unsupported("a FIFO")
    } else if t.is_socket() {
        unsupported("a socket")
    } else if t.is_block_device() {
        unsupported("a block device")
    } else {
        unsupported("not a regular file")
    }
}

/// A device-DAX character device's size, from sysfs.
fn devdax_size(meta: &std::fs::Metadata, path: &Path) -> Result<u64, PoolError> {
    use std::os::unix::fs::MetadataExt;
    let rdev = meta.rdev();
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let sys = crate::platform::sysfs_root().join(format!("dev/char/{major}:{minor}/size"));
    let text =
        std::fs::read_to_string(&sys).map_err(|e| PoolError::io("read device size", &sys, e))?;
    text.trim().parse::<u64>().map_err(|_| PoolError::Corrupt {
        reason: format!(
            "{}: unreadable device size {text:?} in {}",
            path.display(),
            sys.display()
        ),
    })
}

pub(super) fn sync_parent_dir(path: &Path) -> Result<(), PoolError> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = File::open(parent).map_err(|e| PoolError::io("open dir", parent, e))?;
    dir.sync_all()
        .map_err(|e| PoolError::io("fsync dir", parent, e))
}
