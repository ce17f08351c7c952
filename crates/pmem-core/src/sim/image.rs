//! Crash images that cost what they change, not the pool's size.
//!
//! A simulated pool lives in a private copy-on-write mapping of a memfd that holds
//! its starting bytes; the trace's durable base ([`Image`]) is that same memfd plus
//! the lines that differ from it (an *overlay*), with a frozen mapping to read
//! through. A crash image differs from the base only in the lines its trace
//! touched, so the harness builds each image ([`ImageBase`]) as a fresh private
//! mapping of the memfd with the base's overlay and the image's lines written over
//! it: pages the image and its recovery never touch are shared and cost nothing, and
//! no step copies the whole pool. Where `memfd_create` is unavailable, images fall
//! back to whole copies.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::sync::Arc;

use crate::pool::mapping::Mapping;

const LINE: usize = 64;

/// Lines by index, each 64 bytes.
pub(crate) type Lines = BTreeMap<usize, [u8; LINE]>;

/// A read-only view of a private mapping, shareable between threads.
struct Frozen(Mapping);

// SAFETY: the mapping is private to this process, and once frozen nothing writes it
// except `Image::write_lines`, which requires the sole owner of the Arc.
unsafe impl Send for Frozen {}
// SAFETY: as above.
unsafe impl Sync for Frozen {}

/// A memfd's pristine bytes plus the lines that differ from them.
struct Layered {
    file: Arc<File>,
    len: usize,
    overlay: Lines,
    view: Frozen,
}

#[derive(Clone)]
enum Repr {
    Owned(Vec<u8>),
    Layered(Arc<Layered>),
}

/// The bytes of a whole pool: a trace's durable base.
#[derive(Clone)]
pub struct Image(Repr);

impl Image {
    /// Writes whole lines into the image (a shared layered image is re-layered
    /// first, which costs its overlay, not the pool).
    pub(crate) fn write_lines(&mut self, lines: impl IntoIterator<Item = (usize, [u8; LINE])>) {
        match &mut self.0 {
            Repr::Owned(v) => {
                for (line, bytes) in lines {
                    if let Some(dst) = v.get_mut(line * LINE..line * LINE + LINE) {
                        dst.copy_from_slice(&bytes);
                    }
                }
            }
            Repr::Layered(l) => {
                let mut new: Lines = lines.into_iter().collect();
                if let Some(unique) = Arc::get_mut(l) {
                    write_into(&unique.view.0, &new);
                    unique.overlay.append(&mut new);
                    return;
                }
                let mut overlay = l.overlay.clone();
                overlay.append(&mut new);
                match layered(&l.file, l.len, overlay) {
                    Ok(fresh) => *l = Arc::new(fresh),
                    Err(e) => {
                        // Fall back to an owned copy rather than lose the write.
                        tracing::debug!(error = %e, "re-layering an image failed; copying it");
                        let m = &l.view.0;
                        // SAFETY: the mapping is live while `l` is; only read here.
                        let mut v =
                            unsafe { std::slice::from_raw_parts(m.base().as_ptr(), m.len()) }
                                .to_vec();
                        for (line, bytes) in &new {
                            if let Some(dst) = v.get_mut(line * LINE..line * LINE + LINE) {
                                dst.copy_from_slice(bytes);
                            }
                        }
                        self.0 = Repr::Owned(v);
                    }
                }
            }
        }
    }
}

impl std::ops::Deref for Image {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Repr::Owned(v) => v,
            Repr::Layered(l) => {
                let m = &l.view.0;
                // SAFETY: the mapping is live while the Arc is, and only its sole
                // owner writes it (`write_lines`), which cannot coexist with this
                // shared borrow.
                unsafe { std::slice::from_raw_parts(m.base().as_ptr(), m.len()) }
            }
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
        match &self.0 {
            Repr::Owned(v) => write!(f, "Image({} bytes, owned)", v.len()),
            Repr::Layered(l) => write!(
                f,
                "Image({} bytes, memfd + {} lines)",
                l.len,
                l.overlay.len()
            ),
        }
    }
}

fn write_into(map: &Mapping, lines: &Lines) {
    for (&line, bytes) in lines {
        if (line + 1) * LINE <= map.len() {
            // SAFETY: inside the mapping (checked); the caller owns it exclusively
            // (fresh, or the sole owner of its Image).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    map.base().as_ptr().add(line * LINE),
                    LINE,
                )
            };
        }
    }
}

fn layered(file: &Arc<File>, len: usize, overlay: Lines) -> std::io::Result<Layered> {
    let view = Mapping::private_copy(file, len)?;
    write_into(&view, &overlay);
    Ok(Layered {
        file: Arc::clone(file),
        len,
        overlay,
        view: Frozen(view),
    })
}

/// Where images are mapped from: a memfd and an overlay, or owned bytes.
pub(crate) enum ImageBase<'b> {
    File {
        file: Arc<File>,
        len: usize,
        overlay: Lines,
    },
    Bytes(&'b [u8]),
}

impl<'b> ImageBase<'b> {
    /// The base of `image`: its memfd and overlay (no copy), or, for owned bytes, a
    /// new memfd holding them (one copy), or the bytes themselves where that fails.
    pub(crate) fn new(image: &'b Image) -> ImageBase<'b> {
        match &image.0 {
            Repr::Layered(l) => ImageBase::File {
                file: Arc::clone(&l.file),
                len: l.len,
                overlay: l.overlay.clone(),
            },
            Repr::Owned(v) => match memfd(v, v.len()) {
                Ok(file) => ImageBase::File {
                    file: Arc::new(file),
                    len: v.len(),
                    overlay: Lines::new(),
                },
                Err(e) => {
                    tracing::debug!(error = %e, "memfd unavailable: crash images are whole copies");
                    ImageBase::Bytes(v)
                }
            },
        }
    }

    /// A base of `len` bytes whose first bytes are `prefix` and the rest zero: a
    /// sparse memfd, so a large fresh pool costs its header, not its size.
    pub(crate) fn fresh(prefix: &[u8], len: usize) -> std::io::Result<ImageBase<'static>> {
        Ok(ImageBase::File {
            file: Arc::new(memfd(prefix, len)?),
            len,
            overlay: Lines::new(),
        })
    }

    /// A new private mapping of the base with `lines` written over it.
    pub(crate) fn map(&self, lines: &Lines) -> std::io::Result<Mapping> {
        let map = match self {
            ImageBase::File { file, len, overlay } => {
                let m = Mapping::private_copy(file, *len)?;
                write_into(&m, overlay);
                m
            }
            ImageBase::Bytes(bytes) => {
                let m = Mapping::anonymous(bytes.len())?;
                // SAFETY: a fresh private mapping of exactly `bytes.len()` bytes;
                // nothing references it yet.
                unsafe {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), m.base().as_ptr(), bytes.len())
                };
                m
            }
        };
        write_into(&map, lines);
        Ok(map)
    }

    /// An [`Image`] of the base with `lines` written over it, frozen.
    pub(crate) fn image(&self, lines: &Lines) -> std::io::Result<Image> {
        match self {
            ImageBase::File { file, len, overlay } => {
                let mut all = overlay.clone();
                all.extend(lines.iter().map(|(&k, v)| (k, *v)));
                Ok(Image(Repr::Layered(Arc::new(layered(file, *len, all)?))))
            }
            ImageBase::Bytes(bytes) => {
                let mut v = bytes.to_vec();
                for (&line, b) in lines {
                    if let Some(dst) = v.get_mut(line * LINE..line * LINE + LINE) {
                        dst.copy_from_slice(b);
                    }
                }
                Ok(Image(Repr::Owned(v)))
            }
        }
    }
}

/// A memfd of `len` bytes holding `prefix` then zeros (sparse).
fn memfd(prefix: &[u8], len: usize) -> std::io::Result<File> {
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
        file.set_len(len as u64)?;
        file.write_all(&prefix[..prefix.len().min(len)])?;
        Ok(file)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (prefix, len);
        Err(std::io::Error::other("no memfd on this platform"))
    }
}
