//! Mapping a pool into memory, and the mode that mapping gives.
//!
//! memmap2 covers ordinary shared and anonymous mappings; a `MAP_SYNC` mapping needs
//! `MAP_SHARED_VALIDATE | MAP_SYNC`, which memmap2 does not expose, so that one case
//! calls `mmap` directly and unmaps on drop.

use std::fs::File;
use std::ptr::NonNull;

use super::mode::{DurabilityMode, ModeRequest, ModeSource};
use crate::flush::env_flag;

/// One mapping of a pool; unmapped on drop.
pub(crate) struct Mapping {
    base: NonNull<u8>,
    len: usize,
    _owner: Owner,
}

// The variants are held only to be dropped (unmapping) with the Mapping.
#[allow(dead_code)]
enum Owner {
    Memmap(memmap2::MmapRaw),
    Anon(memmap2::MmapMut),
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    Sync(SyncMap),
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
struct SyncMap {
    addr: *mut libc::c_void,
    len: usize,
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
impl Drop for SyncMap {
    fn drop(&mut self) {
        // SAFETY: `addr..addr+len` is exactly a mapping this struct created with mmap
        // and nothing else unmaps it; the owning Mapping is being dropped, so no
        // reference into it outlives this call (they borrow the Pool).
        unsafe { libc::munmap(self.addr, self.len) };
    }
}

impl Mapping {
    pub(crate) fn base(&self) -> NonNull<u8> {
        self.base
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// An anonymous private mapping of `len` zero bytes.
    pub(crate) fn anonymous(len: usize) -> std::io::Result<Mapping> {
        Self::private(memmap2::MmapOptions::new().len(len).map_anon()?, len)
    }

    /// Takes over a private mapping of `len` bytes.
    fn private(mut m: memmap2::MmapMut, len: usize) -> std::io::Result<Mapping> {
        let base =
            NonNull::new(m.as_mut_ptr()).ok_or_else(|| std::io::Error::other("null mapping"))?;
        Ok(Mapping {
            base,
            len,
            _owner: Owner::Anon(m),
        })
    }

    /// A private copy-on-write mapping of the first `len` bytes of `file`: writes
    /// stay in this process and never reach the file, and only the pages written are
    /// copied (the crash simulator's images share one base this way).
    #[cfg(feature = "sim")]
    pub(crate) fn private_copy(file: &File, len: usize) -> std::io::Result<Mapping> {
        // SAFETY: a private mapping: later changes to the file by others would show
        // through unwritten pages, but the file is the simulator's own memfd, which
        // nothing writes after it was filled.
        let m = unsafe { memmap2::MmapOptions::new().len(len).map_copy(file)? };
        Self::private(m, len)
    }

    /// Maps `len` bytes of `file` shared, choosing the mode per `req`.
    pub(crate) fn file(
        file: &File,
        len: usize,
        writable: bool,
        is_devdax: bool,
        req: ModeRequest,
    ) -> std::io::Result<(Mapping, DurabilityMode, ModeSource)> {
        if req == ModeRequest::Volatile {
            let m = Self::plain(file, len, writable)?;
            return Ok((m, DurabilityMode::Volatile, ModeSource::Requested));
        }
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        if let Some(m) = Self::map_sync(file, len, writable)? {
            let source = if is_devdax {
                ModeSource::DevDax
            } else {
                ModeSource::MapSync
            };
            return Ok((m, DurabilityMode::Dax, source));
        }
        let m = Self::plain(file, len, writable)?;
        if is_devdax && cfg!(target_arch = "x86_64") {
            return Ok((m, DurabilityMode::Dax, ModeSource::DevDax));
        }
        let forced = req == ModeRequest::ForceDax || env_flag("PMKIT_FORCE_DAX");
        if forced && cfg!(target_arch = "x86_64") {
            Ok((m, DurabilityMode::Dax, ModeSource::Forced))
        } else {
            Ok((m, DurabilityMode::Msync, ModeSource::PageCache))
        }
    }

    fn plain(file: &File, len: usize, writable: bool) -> std::io::Result<Mapping> {
        let mut opts = memmap2::MmapOptions::new();
        opts.len(len);
        let raw = if writable {
            opts.map_raw(file)?
        } else {
            opts.map_raw_read_only(file)?
        };
        let base =
            NonNull::new(raw.as_mut_ptr()).ok_or_else(|| std::io::Error::other("null mapping"))?;
        Ok(Mapping {
            base,
            len,
            _owner: Owner::Memmap(raw),
        })
    }

    /// Tries a `MAP_SYNC` mapping; `Ok(None)` when the file system does not offer it.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    fn map_sync(file: &File, len: usize, writable: bool) -> std::io::Result<Option<Mapping>> {
        use std::os::fd::AsRawFd;
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a fresh mapping at a kernel-chosen address; no existing memory is
        // affected. The fd stays valid for the call; the mapping outlives it safely.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
                file.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            let err = std::io::Error::last_os_error();
            return match err.raw_os_error() {
                // Not a DAX file system (or a kernel without MAP_SYNC): fall back.
                Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) | Some(libc::ENODEV) => Ok(None),
                _ => Err(err),
            };
        }
        let owner = SyncMap { addr, len };
        let base =
            NonNull::new(addr.cast::<u8>()).ok_or_else(|| std::io::Error::other("null mapping"))?;
        tracing::debug!(len, "MAP_SYNC mapping accepted");
        Ok(Some(Mapping {
            base,
            len,
            _owner: Owner::Sync(owner),
        }))
    }
}
