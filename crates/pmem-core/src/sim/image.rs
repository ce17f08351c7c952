//! Crash images that cost what they change, not the pool's size.
//!
//! A trace's durable base is an [`Image`]: owned bytes, or a private copy-on-write
//! mapping of a memfd. A crash image differs from the base only in the lines its
//! trace touched, so the harness writes the base once into a memfd
//! ([`ImageBase`]) and builds each image as a fresh private mapping of it with those
//! lines written over: pages the image and its recovery never touch are shared with
//! the base and cost nothing. Where `memfd_create` is unavailable, images fall back
//! to whole copies.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::sync::Arc;

use crate::pool::mapping::Mapping;

const LINE: usize = 64;

/// A read-only view of a private mapping, shareable between threads.
struct Frozen(Mapping);

// SAFETY: the mapping is private to this process, and once frozen nothing writes it
// (the only `&mut` access, `Image::make_mut`, requires the sole owner of the Arc).
unsafe impl Send for Frozen {}
// SAFETY: as above.
unsafe impl Sync for Frozen {}

#[derive(Clone)]
enum Repr {
    Owned(Vec<u8>),
    Mapped(Arc<Frozen>),
}

/// The bytes of a whole pool: a trace's durable base.
#[derive(Clone)]
pub struct Image(Repr);

impl Image {
    /// The bytes, writable: a shared mapped image is copied first.
    pub(crate) fn make_mut(&mut self) -> &mut [u8] {
        if let Repr::Mapped(m) = &mut self.0 {
            if Arc::get_mut(m).is_none() {
                let owned = self.to_vec();
                self.0 = Repr::Owned(owned);
            }
        }
        match &mut self.0 {
            Repr::Owned(v) => v,
            Repr::Mapped(m) => {
                let m = &Arc::get_mut(m).expect("sole owner checked above").0;
                // SAFETY: the mapping is live while `m` is, and we are its sole
                // owner (`get_mut` succeeded), so no other reference to it exists.
                unsafe { std::slice::from_raw_parts_mut(m.base().as_ptr(), m.len()) }
            }
        }
    }
}

impl std::ops::Deref for Image {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Repr::Owned(v) => v,
            // SAFETY: the mapping is live while the Arc is, and frozen (nothing
            // writes it while shared).
            Repr::Mapped(m) => unsafe {
                std::slice::from_raw_parts(m.0.base().as_ptr(), m.0.len())
            },
        }
    }
}

impl From<Vec<u8>> for Image {
    fn from(v: Vec<u8>) -> Image {
        Image(Repr::Owned(v))
    }
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.0 {
            Repr::Owned(_) => "owned",
            Repr::Mapped(_) => "mapped",
        };
        write!(f, "Image({} bytes, {kind})", self.len())
    }
}

/// A pool's bytes written once into a memfd, from which images are mapped.
pub(crate) struct ImageBase<'b> {
    bytes: &'b [u8],
    file: Option<File>,
}

impl<'b> ImageBase<'b> {
    /// Writes `bytes` into a fresh memfd (or remembers them for whole copies where
    /// that fails).
    pub(crate) fn new(bytes: &'b [u8]) -> ImageBase<'b> {
        let file = memfd(bytes).map_err(|e| {
            tracing::debug!(error = %e, "memfd unavailable: crash images are whole copies");
        });
        ImageBase {
            bytes,
            file: file.ok(),
        }
    }

    /// A new private mapping of the base with `lines` written over it.
    pub(crate) fn map(&self, lines: &BTreeMap<usize, [u8; LINE]>) -> std::io::Result<Mapping> {
        let map = match &self.file {
            Some(f) => Mapping::private_copy(f, self.bytes.len())?,
            None => {
                let m = Mapping::anonymous(self.bytes.len())?;
                // SAFETY: a fresh private mapping of exactly `bytes.len()` bytes;
                // nothing references it yet.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        self.bytes.as_ptr(),
                        m.base().as_ptr(),
                        self.bytes.len(),
                    )
                };
                m
            }
        };
        for (&line, bytes) in lines {
            if (line + 1) * LINE <= map.len() {
                // SAFETY: inside the fresh mapping (checked), which nothing else
                // references yet.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        bytes.as_ptr(),
                        map.base().as_ptr().add(line * LINE),
                        LINE,
                    )
                };
            }
        }
        Ok(map)
    }

    /// An [`Image`] of the base with `lines` written over it, frozen.
    pub(crate) fn image(&self, lines: &BTreeMap<usize, [u8; LINE]>) -> std::io::Result<Image> {
        Ok(Image(Repr::Mapped(Arc::new(Frozen(self.map(lines)?)))))
    }
}

fn memfd(bytes: &[u8]) -> std::io::Result<File> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::FromRawFd;
        // SAFETY: a NUL-terminated name; memfd_create has no other preconditions.
        let fd = unsafe { libc::memfd_create(c"pmkit-sim-image".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let mut file = unsafe { File::from_raw_fd(fd) };
        file.write_all(bytes)?;
        Ok(file)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = bytes;
        Err(std::io::Error::other("no memfd on this platform"))
    }
}
