//! The section space: a PM file cut into fixed-size sections inside one reserved
//! address range, each section hidden or integrated (§3.2, §4.2–4.3).
//!
//! # What a section is
//!
//! The paper's kernel splits hidden PM into the sparse memory model's sections and
//! integrates them one at a time; a section is the unit AMF adds to `ZONE_NORMAL`
//! and removes again (§4.2, §4.3.2). On x86-64 a section is 128 MiB
//! (`SECTION_SIZE_BITS` = 27), our default [`SECTION_BYTES`]. Here the PM is a file —
//! on a DAX file system when there is one, otherwise any file (tmpfs or disk) — of
//! `sections × section_bytes` bytes, created sparse with `ftruncate`: nothing is
//! written to it, so a hidden section takes no blocks on the media.
//!
//! # One reservation, three states
//!
//! [`SectionSpace`] reserves one virtual range for the whole file when it is built:
//! `mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE)`. The
//! reservation commits no memory and holds no page, it only keeps other mappings
//! out, so section `i` always sits at `base + i × section_bytes` and an address
//! names its section by arithmetic ([`SectionSpace::contains`], which the heap will
//! use to route frees). Each section is in one [`SectionState`]:
//!
//! * **Hidden** (where every section starts): covered by the reservation only. It
//!   has no mapping of the file, no page, no page-table entry and no allocator
//!   metadata; all it costs is its one-byte state entry.
//! * **Integrated**: [`SectionSpace::integrate`] maps the file's section over its
//!   part of the reservation, `mmap(base + i × section_bytes, section_bytes,
//!   PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, i × section_bytes)`.
//!   `MAP_FIXED` is sound here because the range is inside our own reservation: it
//!   replaces our `PROT_NONE` pages and nothing else of the process. The allocator
//!   metadata the issue speaks of ("integrating it maps it and builds its allocator
//!   metadata") belongs to the heap built on top of this space, the next slice; this
//!   module hands that heap the [`SectionRange`] to carve.
//! * **Lost**: a `MAP_FIXED` call over the section failed. Linux does not promise
//!   that a failed `MAP_FIXED` leaves the old mapping in place — kernels before the
//!   6.12 rework could unmap it first — so the range may now be a gap another
//!   mapping of the process can land in. The space never maps or unmaps a lost
//!   section again, not even on drop: its addresses are leaked rather than risk
//!   unmapping memory that is no longer ours. It is an error path; nothing else
//!   leads there.
//!
//! [`SectionSpace::reclaim`] takes an integrated section back: it maps the range
//! back to the reservation's `PROT_NONE | MAP_PRIVATE | MAP_ANONYMOUS |
//! MAP_NORESERVE` (with `MAP_FIXED`), which drops the file's pages from the address
//! space, then punches the file's hole (`fallocate(FALLOC_FL_PUNCH_HOLE |
//! FALLOC_FL_KEEP_SIZE)`) so that the media — or, on tmpfs, the DRAM — behind it
//! is freed, dirty pages are dropped without being written back, and the section
//! reads as zeros when it is integrated again. A file system without hole punching
//! is reported in the [`Reclaimed`] result ([`HolePunch::Unsupported`]), not as an
//! error: the section is hidden all the same, but its blocks and its old bytes stay
//! in the file.
//!
//! Section sizes need only be a positive multiple of the base page (4096 B on
//! x86-64; the system page size where it is larger). We neither ask for nor rule
//! out 2 MiB pages: nothing here aligns the reservation or the sections for them,
//! though a kernel may still back a suitably aligned range of a DAX file, or of a
//! tmpfs mounted with `huge=`, with PMD mappings on its own.
//!
//! # Why reclaim is safe and takes `&mut self`
//!
//! The space hands out addresses, never pointers or references: a [`SectionRange`]
//! is two integers, and nothing in this module reads or writes section memory.
//! Turning an address into a reference takes `unsafe` code, and that code — the
//! heap — is what must guarantee that no live block is in a section it reclaims.
//! It can, because it owns the space (a private field, behind its lock) and is the
//! only caller of [`SectionSpace::reclaim`]; `&mut self` makes the calls exclusive.
//! This is `Vec::as_ptr` followed by `Vec::clear`: the safe method cannot cause
//! undefined behaviour by itself, and the user of the raw address carries the
//! obligation. A `unsafe fn reclaim` would move the same promise to every caller
//! without making anything sounder. Should a stale address be used anyway, the
//! range is `PROT_NONE` after reclaim and stays reserved until the space drops, so
//! the access faults instead of reading another section or another mapping.
//!
//! The heap builds its pointers with [`std::ptr::with_exposed_provenance_mut`]: the
//! reservation's base address is exposed when it is taken.
//!
//! # Backing: where the "PM" really is
//!
//! [`Backing`] says what the file is, found once when the space is built: DAX if
//! the kernel accepts a one-page `MAP_SHARED_VALIDATE | MAP_SYNC` mapping of it,
//! tmpfs if `fstatfs` says `TMPFS_MAGIC`, and otherwise a disk file behind the page
//! cache. Only DAX is real PM. On tmpfs the "PM" is DRAM — integrating it relieves
//! no memory pressure at all, it exercises the mechanism only — and on disk the
//! page cache stands in for it, so every such space is [`Backing::emulated`] and
//! its description ([`Backing::describe`], [`SpaceReport`]) says so, as pmem-core's
//! forced DAX mode does. Integrated sections are mapped `MAP_SHARED` without
//! `MAP_SYNC` even on DAX: the capacity heap is volatile and needs no durability.
//!
//! # Metadata: ours beside the paper's
//!
//! The paper's kernel spends a 56-byte page descriptor on every 4 KiB page of an
//! integrated section (§2; 1.75 MiB per 128 MiB section), which is why hiding
//! sections and reclaiming them lazily pays (§4.3.2). [`paper_descriptor_bytes`]
//! gives that figure; [`SectionSpace::metadata_bytes`] gives the DRAM this space
//! really spends: its own struct, its state vector (one byte per section, hidden or
//! not, counted by the vector's capacity) and its path. A hidden section costs its
//! state byte and nothing else. The count is of our user-space memory only: the
//! kernel's side — the reservation's VMAs (an integrated section splits it), page
//! tables for touched pages (8 B per 4 KiB page), and, off DAX, the page
//! descriptors of the page-cache pages that emulate the PM — is not in it.
//!
//! # The file
//!
//! [`SectionSpace::create`] makes a new file (mode `0600`) or takes an existing
//! empty one, and refuses an existing non-empty file with
//! [`SectionError::FileNotEmpty`] without touching it: a section space never
//! overwrites data it did not write. [`SectionSpace::from_file`] takes any open
//! read-write file under the same rule. Both hold an exclusive `flock` on the file
//! while the space lives, so a second space (or a pmem-core pool) on it fails with
//! [`SectionError::Locked`]. As for pmem-core's pools, the lock is advisory: a
//! program that does not ask for it can still write or truncate the file, and
//! truncation makes later accesses to the lost pages raise `SIGBUS`; protect the
//! file with its permissions. On drop the space unmaps its reservation; the file
//! stays unless [`SectionSpace::remove_on_drop`] was asked for.
//!
//! ```
//! use nvwa::fusion::{SectionSpace, SectionState};
//!
//! let path = std::env::temp_dir().join(format!("nvwa-section-doc-{}", std::process::id()));
//! let mut space = SectionSpace::create(&path, 4, 1 << 20)?.remove_on_drop();
//! assert_eq!(space.hidden_count(), 4);
//! let r = space.integrate(2)?;
//! assert_eq!(space.contains(r.start + 100), Some(2));
//! assert_eq!(space.state(2), Some(SectionState::Integrated));
//! let reclaimed = space.reclaim(2)?;
//! assert_eq!(space.state(2), Some(SectionState::Hidden));
//! println!("{} (hole punched: {})", space.report(), reclaimed.hole.is_punched());
//! # Ok::<(), nvwa::fusion::SectionError>(())
//! ```

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::policy::{DEFAULT_SECTION_BYTES, PAPER_DESCRIPTOR_BYTES, PAPER_PAGE_BYTES};

/// The default section: 128 MiB, the x86-64 sparse-memory section
/// (`SECTION_SIZE_BITS` = 27), as in [`super::policy::DEFAULT_SECTION_BYTES`].
pub const SECTION_BYTES: u64 = DEFAULT_SECTION_BYTES;

/// The smallest page a section size must be a multiple of, whatever the system
/// page is: the 4 KiB page the paper's descriptors describe.
pub const MIN_PAGE_BYTES: u64 = PAPER_PAGE_BYTES;

/// `statfs`'s `f_type` for tmpfs (`TMPFS_MAGIC` in `linux/magic.h`).
const TMPFS_MAGIC: u64 = 0x0102_1994;

/// How many times an interrupted `fallocate` is retried before it is reported.
const PUNCH_RETRIES: usize = 8;

const _: () = assert!(SECTION_BYTES == 128 << 20);
const _: () = assert!(SECTION_BYTES.is_multiple_of(MIN_PAGE_BYTES));
const _: () = assert!(size_of::<SectionState>() == 1);

/// The DRAM the paper's kernel spends on page descriptors for one integrated
/// section of `section_bytes`: 56 B per 4 KiB page (§2, Linux 4.5 on x86-64), the
/// saving lazy reclamation weighs (§4.3.2). 1 835 008 B (1.75 MiB) for 128 MiB.
pub const fn paper_descriptor_bytes(section_bytes: u64) -> u64 {
    section_bytes / PAPER_PAGE_BYTES * PAPER_DESCRIPTOR_BYTES
}

/// The state of one section.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SectionState {
    /// Reserved address space only: no mapping of the file, no page, no metadata.
    Hidden,
    /// The file's section is mapped read-write over the section's addresses.
    Integrated,
    /// A `MAP_FIXED` over the section failed and its mapping is unknown; the space
    /// never touches its addresses again (see the module docs).
    Lost,
}

impl SectionState {
    /// Lower-case name: `hidden`, `integrated`, `lost`.
    pub fn name(self) -> &'static str {
        match self {
            SectionState::Hidden => "hidden",
            SectionState::Integrated => "integrated",
            SectionState::Lost => "lost",
        }
    }
}

impl fmt::Display for SectionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The addresses of one section: `len` bytes from `start`. Plain integers; see the
/// module docs for how the heap turns them into pointers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SectionRange {
    /// The section's index in its space.
    pub index: usize,
    /// Its first address.
    pub start: usize,
    /// Its length in bytes: the space's section size.
    pub len: usize,
}

impl SectionRange {
    /// One past its last address.
    pub fn end(&self) -> usize {
        self.start + self.len
    }

    /// Whether `addr` is inside it.
    pub fn contains(&self, addr: usize) -> bool {
        addr >= self.start && addr - self.start < self.len
    }
}

/// What file system holds the section file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackingKind {
    /// A DAX file system: the kernel accepted a `MAP_SYNC` mapping. Real PM.
    Dax,
    /// tmpfs (for example `/dev/shm`): the "PM" is DRAM.
    Tmpfs,
    /// Any other file: the page cache, written back to its device, stands in for PM.
    Disk,
}

impl BackingKind {
    /// Lower-case name: `dax`, `tmpfs`, `disk`.
    pub fn name(self) -> &'static str {
        match self {
            BackingKind::Dax => "dax",
            BackingKind::Tmpfs => "tmpfs",
            BackingKind::Disk => "disk",
        }
    }

    /// A one-line honest description.
    pub fn describe(self) -> &'static str {
        match self {
            BackingKind::Dax => "DAX: real PM",
            BackingKind::Tmpfs => "tmpfs: PM capacity emulated in DRAM",
            BackingKind::Disk => "disk file: PM capacity emulated by the page cache",
        }
    }
}

/// Where a space's sections really live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backing {
    /// The file system's kind.
    pub kind: BackingKind,
    /// Whether the PM capacity is emulated: every kind but [`BackingKind::Dax`].
    pub emulated: bool,
    /// The file's path, when the space was created from one
    /// ([`SectionSpace::create`]); `None` for [`SectionSpace::from_file`].
    pub path: Option<PathBuf>,
}

impl Backing {
    /// One line: the path (when known) and [`BackingKind::describe`].
    pub fn describe(&self) -> String {
        match &self.path {
            Some(path) => format!("{}: {}", path.display(), self.kind.describe()),
            None => format!("(open file): {}", self.kind.describe()),
        }
    }
}

/// Whether [`SectionSpace::reclaim`] gave the section's blocks back to the file
/// system.
#[derive(Debug)]
pub enum HolePunch {
    /// The hole is punched: the blocks (or tmpfs pages) are freed and the section
    /// reads as zeros when integrated again.
    Punched,
    /// The file system does not punch holes (`EOPNOTSUPP`): the section is hidden,
    /// but its blocks and its old bytes stay in the file.
    Unsupported,
    /// `fallocate` failed otherwise; the section is hidden all the same, with its
    /// blocks and bytes still in the file.
    Failed(io::Error),
}

impl HolePunch {
    /// Whether the hole was punched.
    pub fn is_punched(&self) -> bool {
        matches!(self, HolePunch::Punched)
    }
}

/// The outcome of a successful [`SectionSpace::reclaim`]: the section is hidden.
#[derive(Debug)]
pub struct Reclaimed {
    /// The section.
    pub index: usize,
    /// Whether its blocks were given back.
    pub hole: HolePunch,
}

/// Why a section space could not be built, or a section could not change state.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SectionError {
    /// A space needs at least one section.
    #[error("a section space needs at least one section")]
    NoSections,
    /// The section size is zero or not a multiple of the page.
    #[error(
        "section size {section_bytes} B is not a positive multiple of the {page_bytes} B page"
    )]
    SectionSize {
        /// The size asked for.
        section_bytes: u64,
        /// The page it must be a multiple of.
        page_bytes: u64,
    },
    /// The whole space does not fit in a file offset or in the address space.
    #[error(
        "{sections} sections of {section_bytes} B do not fit in a file offset or the address space"
    )]
    TooLarge {
        /// The sections asked for.
        sections: usize,
        /// The section size asked for.
        section_bytes: u64,
    },
    /// The file already holds data: the space refuses to overwrite it and leaves
    /// it as it was.
    #[error(
        "{file} already holds {len} B; a section space starts from an empty file and \
         never overwrites one (remove it or pick another path)"
    )]
    FileNotEmpty {
        /// The file.
        file: String,
        /// Its length.
        len: u64,
    },
    /// Another section space, or a pmem-core pool, holds the file's lock.
    #[error("{file} is locked by another section space or pool")]
    Locked {
        /// The file.
        file: String,
    },
    /// A system call on the file, or the reservation, failed.
    #[error("{op} on {file}: {source}")]
    Io {
        /// The operation (`open`, `flock`, `ftruncate`, `fstatfs`, `mmap` …).
        op: &'static str,
        /// The file.
        file: String,
        /// What the system said.
        #[source]
        source: io::Error,
    },
    /// The index is not a section of the space.
    #[error("section {index} is out of range: the space has {sections} sections")]
    OutOfRange {
        /// The index asked for.
        index: usize,
        /// How many sections the space has.
        sections: usize,
    },
    /// [`SectionSpace::integrate`] of a section already integrated.
    #[error("section {index} is already integrated")]
    AlreadyIntegrated {
        /// The section.
        index: usize,
    },
    /// [`SectionSpace::reclaim`] of a section that is not integrated.
    #[error("section {index} is {state}, not integrated: there is nothing to reclaim")]
    NotIntegrated {
        /// The section.
        index: usize,
        /// Its state.
        state: SectionState,
    },
    /// The section was lost by an earlier failed mapping and cannot be used.
    #[error("section {index} was lost by an earlier failed mapping and is never touched again")]
    Lost {
        /// The section.
        index: usize,
    },
    /// The `mmap` that integrates or reclaims a section failed; the section is now
    /// [`SectionState::Lost`].
    #[error("mmap to {op} section {index} failed, the section is lost: {source}")]
    Map {
        /// `integrate` or `reclaim`.
        op: &'static str,
        /// The section.
        index: usize,
        /// What the system said.
        #[source]
        source: io::Error,
    },
}

/// A PM file cut into sections inside one reserved address range. See the module
/// docs.
///
/// `Send` and `Sync`: it holds addresses as integers and changes state only
/// through `&mut self`; the daemon owns it, and the heap will keep it behind a
/// lock.
#[derive(Debug)]
pub struct SectionSpace {
    /// The section file, opened read-write and `flock`ed while the space lives.
    file: File,
    /// The file's name in errors and reports.
    label: String,
    /// What holds the file.
    backing: Backing,
    /// The reservation's first address (its provenance exposed).
    base: usize,
    /// The bytes of one section; a multiple of the page, and
    /// `states.len() × section_bytes` fits in `isize` and `off_t`.
    section_bytes: usize,
    /// One entry per section.
    states: Vec<SectionState>,
    /// Remove the file (at `backing.path`) on drop.
    remove_on_drop: bool,
}

impl SectionSpace {
    /// Creates the file at `path` (mode `0600`; an existing empty file is taken,
    /// an existing non-empty one refused with [`SectionError::FileNotEmpty`] and
    /// left as it is), makes it `sections × section_bytes` long without writing
    /// to it, and reserves the address range; every section starts hidden.
    ///
    /// `section_bytes` must be a positive multiple of the page ([`SECTION_BYTES`]
    /// is the default). If building fails after the file was created, the file is
    /// removed again; an existing empty file is truncated back to empty.
    pub fn create(
        path: impl AsRef<Path>,
        sections: usize,
        section_bytes: u64,
    ) -> Result<SectionSpace, SectionError> {
        let path = path.as_ref();
        let geometry = Geometry::new(sections, section_bytes)?;
        let label = path.display().to_string();
        let (file, created) = open_or_create(path, &label)?;
        let built = SectionSpace::build(file, label, Some(path.to_path_buf()), geometry);
        if built.is_err() && created {
            // Best effort: we made the file, so we take it away again.
            let _ = std::fs::remove_file(path);
        }
        built
    }

    /// As [`SectionSpace::create`], on a file already open for reading and
    /// writing: any descriptor (an unlinked temporary file, a file on a DAX mount
    /// opened elsewhere). It must be empty. [`Backing::path`] is `None`.
    pub fn from_file(
        file: File,
        sections: usize,
        section_bytes: u64,
    ) -> Result<SectionSpace, SectionError> {
        let geometry = Geometry::new(sections, section_bytes)?;
        let label = fd_label(&file);
        SectionSpace::build(file, label, None, geometry)
    }

    /// As [`SectionSpace::create`], on a new unnamed file in directory `dir`
    /// (`O_TMPFILE`): nothing is left behind when the space drops or the process
    /// dies, whatever kills it. [`Backing::path`] is `None`. The file system must
    /// support `O_TMPFILE` (ext4, xfs, btrfs and tmpfs do).
    pub fn create_unlinked(
        dir: impl AsRef<Path>,
        sections: usize,
        section_bytes: u64,
    ) -> Result<SectionSpace, SectionError> {
        let dir = dir.as_ref();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_TMPFILE)
            .open(dir)
            .map_err(|e| io_error("open O_TMPFILE", &dir.display().to_string(), e))?;
        SectionSpace::from_file(file, sections, section_bytes)
    }

    /// Removes the file when the space drops (tests and benchmarks use it). Has no
    /// effect on a space built by [`SectionSpace::from_file`].
    pub fn remove_on_drop(mut self) -> SectionSpace {
        self.remove_on_drop = true;
        self
    }

    /// Locks, checks empty, sizes, detects the backing and reserves; undoes the
    /// sizing if a later step fails.
    fn build(
        file: File,
        label: String,
        path: Option<PathBuf>,
        geometry: Geometry,
    ) -> Result<SectionSpace, SectionError> {
        lock(&file, &label)?;
        let len = file
            .metadata()
            .map_err(|e| io_error("fstat", &label, e))?
            .len();
        if len != 0 {
            return Err(SectionError::FileNotEmpty { file: label, len });
        }
        file.set_len(geometry.total_bytes)
            .map_err(|e| io_error("ftruncate", &label, e))?;
        let rest = detect_backing(&file, &label, path).and_then(|backing| {
            let base =
                reserve(geometry.total_len).map_err(|e| io_error("mmap reservation", &label, e))?;
            Ok((backing, base))
        });
        let (backing, base) = match rest {
            Ok(parts) => parts,
            Err(e) => {
                // Best effort: leave the file empty, as we found it.
                let _ = file.set_len(0);
                return Err(e);
            }
        };
        tracing::debug!(
            file = %label,
            sections = geometry.sections,
            section_bytes = geometry.section_bytes,
            backing = backing.kind.name(),
            "section space reserved"
        );
        Ok(SectionSpace {
            file,
            label,
            backing,
            base,
            section_bytes: geometry.section_len,
            states: vec![SectionState::Hidden; geometry.sections],
            remove_on_drop: false,
        })
    }

    /// Maps section `index` of the file over its addresses, read-write and shared,
    /// and returns its range. The bytes are the file's: zeros in a fresh file or
    /// after a punched hole ([`HolePunch::Punched`]), the old bytes after a reclaim
    /// that could not punch one.
    ///
    /// Errors: [`SectionError::OutOfRange`], [`SectionError::AlreadyIntegrated`],
    /// [`SectionError::Lost`], and [`SectionError::Map`] if `mmap` fails (the
    /// section is then lost).
    pub fn integrate(&mut self, index: usize) -> Result<SectionRange, SectionError> {
        let range = self.checked_range(index)?;
        match self.states[index] {
            SectionState::Hidden => {}
            SectionState::Integrated => return Err(SectionError::AlreadyIntegrated { index }),
            SectionState::Lost => return Err(SectionError::Lost { index }),
        }
        let offset = self.file_offset(index)?;
        // SAFETY: `range` lies inside the reservation this space made and never
        // released (index < len, and the geometry was checked when it was built),
        // and the section is hidden, so the range is our PROT_NONE reservation:
        // MAP_FIXED replaces exactly those pages and no other mapping of the
        // process, and no Rust object lives there. The descriptor is open for the
        // call; the mapping keeps its own reference to the file.
        let addr = unsafe {
            libc::mmap(
                std::ptr::with_exposed_provenance_mut(range.start),
                range.len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                self.file.as_raw_fd(),
                offset,
            )
        };
        self.settle(index, addr, range, "integrate", SectionState::Integrated)?;
        tracing::debug!(index, start = range.start, "section integrated");
        Ok(range)
    }

    /// Takes integrated section `index` back: maps its addresses back to the
    /// `PROT_NONE` reservation (dropping the file's pages from the address space),
    /// then punches the file's hole; the section is hidden. A file system that
    /// cannot punch is reported in [`Reclaimed::hole`], not as an error.
    ///
    /// The caller — the heap — must hold no live block in the section: afterwards
    /// any access to its addresses faults. Why this is a safe method is in the
    /// module docs.
    ///
    /// Errors: [`SectionError::OutOfRange`], [`SectionError::NotIntegrated`] (a
    /// hidden or lost section), and [`SectionError::Map`] if `mmap` fails (the
    /// section is then lost).
    pub fn reclaim(&mut self, index: usize) -> Result<Reclaimed, SectionError> {
        let range = self.checked_range(index)?;
        let state = self.states[index];
        if state != SectionState::Integrated {
            return Err(SectionError::NotIntegrated { index, state });
        }
        let offset = self.file_offset(index)?;
        let len = libc::off_t::try_from(range.len).map_err(|_| self.too_large())?;
        // SAFETY: `range` lies inside our own reservation and holds this space's
        // mapping of the file (the section is integrated), so MAP_FIXED replaces
        // only that mapping with a fresh PROT_NONE anonymous one. This space never
        // created a reference into the range; the heap that made pointers from its
        // addresses promised, by calling reclaim, that none is live (module docs).
        let addr = unsafe {
            libc::mmap(
                std::ptr::with_exposed_provenance_mut(range.start),
                range.len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        self.settle(index, addr, range, "reclaim", SectionState::Hidden)?;
        let hole = punch_hole(&self.file, offset, len);
        match &hole {
            HolePunch::Punched => tracing::debug!(index, "section reclaimed, hole punched"),
            HolePunch::Unsupported => {
                tracing::debug!(
                    index,
                    "section reclaimed; the file system cannot punch holes"
                )
            }
            HolePunch::Failed(e) => {
                tracing::warn!(
                    index,
                    error = %e,
                    file = %self.label,
                    "section reclaimed; punching its hole failed"
                )
            }
        }
        Ok(Reclaimed { index, hole })
    }

    /// After a `MAP_FIXED` over section `index`: the new state if the kernel put
    /// the mapping where asked, [`SectionState::Lost`] and an error otherwise.
    fn settle(
        &mut self,
        index: usize,
        addr: *mut libc::c_void,
        range: SectionRange,
        op: &'static str,
        state: SectionState,
    ) -> Result<(), SectionError> {
        if addr == libc::MAP_FAILED {
            let source = io::Error::last_os_error();
            self.states[index] = SectionState::Lost;
            tracing::warn!(index, op, error = %source, "section lost: MAP_FIXED failed");
            return Err(SectionError::Map { op, index, source });
        }
        if addr.addr() != range.start {
            // MAP_FIXED never places a mapping elsewhere; if a kernel did, the
            // mapping is not ours to reason about and the section is lost.
            self.states[index] = SectionState::Lost;
            let source = io::Error::other(format!(
                "MAP_FIXED returned {:#x}, not {:#x}",
                addr.addr(),
                range.start
            ));
            return Err(SectionError::Map { op, index, source });
        }
        self.states[index] = state;
        Ok(())
    }

    /// The state of section `index`; `None` out of range.
    pub fn state(&self, index: usize) -> Option<SectionState> {
        self.states.get(index).copied()
    }

    /// The addresses of section `index`, whatever its state; `None` out of range.
    pub fn range(&self, index: usize) -> Option<SectionRange> {
        (index < self.states.len()).then(|| SectionRange {
            index,
            start: self.base + index * self.section_bytes,
            len: self.section_bytes,
        })
    }

    /// Which section `addr` is in, whatever its state; `None` outside the
    /// reservation. The heap routes frees by it.
    pub fn contains(&self, addr: usize) -> Option<usize> {
        let offset = addr.checked_sub(self.base)?;
        let index = offset / self.section_bytes;
        (index < self.states.len()).then_some(index)
    }

    /// How many sections are integrated.
    pub fn integrated_count(&self) -> usize {
        self.count(SectionState::Integrated)
    }

    /// How many sections are hidden.
    pub fn hidden_count(&self) -> usize {
        self.count(SectionState::Hidden)
    }

    /// How many sections are lost (zero unless a mapping failed).
    pub fn lost_count(&self) -> usize {
        self.count(SectionState::Lost)
    }

    fn count(&self, state: SectionState) -> usize {
        self.states.iter().filter(|&&s| s == state).count()
    }

    /// How many sections the space has.
    pub fn len(&self) -> usize {
        self.states.len()
    }

    /// Always `false`: a space has at least one section.
    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    /// The bytes of one section.
    pub fn section_bytes(&self) -> u64 {
        self.section_bytes as u64
    }

    /// What holds the file.
    pub fn backing(&self) -> &Backing {
        &self.backing
    }

    /// The DRAM this space really spends, in bytes: its struct, the heap
    /// allocations of its state vector (one byte per section, by capacity), its
    /// label and its path. Hidden sections cost their state byte and nothing else.
    /// The kernel's side (VMAs, page tables, page-cache descriptors) is not
    /// counted; see the module docs.
    pub fn metadata_bytes(&self) -> usize {
        let path = self.backing.path.as_ref().map_or(0, PathBuf::capacity);
        size_of::<SectionSpace>()
            + self.states.capacity() * size_of::<SectionState>()
            + self.label.capacity()
            + path
    }

    /// What the paper's kernel would spend on page descriptors for the sections
    /// integrated now: [`paper_descriptor_bytes`] of each.
    pub fn paper_metadata_bytes(&self) -> u64 {
        self.integrated_count() as u64 * paper_descriptor_bytes(self.section_bytes())
    }

    /// The space's figures in one value, printable as one honest line.
    pub fn report(&self) -> SpaceReport {
        SpaceReport {
            sections: self.len(),
            section_bytes: self.section_bytes(),
            integrated: self.integrated_count(),
            hidden: self.hidden_count(),
            lost: self.lost_count(),
            metadata_bytes: self.metadata_bytes(),
            paper_metadata_bytes: self.paper_metadata_bytes(),
            backing: self.backing.clone(),
        }
    }

    fn checked_range(&self, index: usize) -> Result<SectionRange, SectionError> {
        self.range(index).ok_or(SectionError::OutOfRange {
            index,
            sections: self.states.len(),
        })
    }

    /// Section `index`'s offset in the file (it fits: checked when built).
    fn file_offset(&self, index: usize) -> Result<libc::off_t, SectionError> {
        index
            .checked_mul(self.section_bytes)
            .and_then(|o| libc::off_t::try_from(o).ok())
            .ok_or_else(|| self.too_large())
    }

    fn too_large(&self) -> SectionError {
        SectionError::TooLarge {
            sections: self.states.len(),
            section_bytes: self.section_bytes(),
        }
    }
}

impl Drop for SectionSpace {
    fn drop(&mut self) {
        // Unmap each run of sections that are not lost (one run, the whole
        // reservation, unless a mapping failed).
        let mut index = 0;
        while index < self.states.len() {
            if self.states[index] == SectionState::Lost {
                index += 1;
                continue;
            }
            let first = index;
            while index < self.states.len() && self.states[index] != SectionState::Lost {
                index += 1;
            }
            let start = self.base + first * self.section_bytes;
            let len = (index - first) * self.section_bytes;
            // SAFETY: [start, start + len) is inside our reservation and holds
            // only our reservation or our mappings of the file (no section in the
            // run is lost). The space is being dropped, so it hands out no more
            // addresses; the heap that owned it has no live block left.
            let r = unsafe { libc::munmap(std::ptr::with_exposed_provenance_mut(start), len) };
            if r != 0 {
                let e = io::Error::last_os_error();
                tracing::warn!(
                    file = %self.label,
                    error = %e,
                    "munmap of the section space failed"
                );
            }
        }
        if self.remove_on_drop {
            if let Some(path) = &self.backing.path {
                if let Err(e) = std::fs::remove_file(path) {
                    tracing::warn!(
                        file = %self.label,
                        error = %e,
                        "could not remove the section file"
                    );
                }
            }
        }
    }
}

/// A space's figures ([`SectionSpace::report`]); its `Display` is one line that
/// says whether the PM is real.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpaceReport {
    /// Sections in the space.
    pub sections: usize,
    /// Bytes per section.
    pub section_bytes: u64,
    /// Integrated sections.
    pub integrated: usize,
    /// Hidden sections.
    pub hidden: usize,
    /// Lost sections.
    pub lost: usize,
    /// [`SectionSpace::metadata_bytes`].
    pub metadata_bytes: usize,
    /// [`SectionSpace::paper_metadata_bytes`].
    pub paper_metadata_bytes: u64,
    /// Where the sections live.
    pub backing: Backing,
}

impl fmt::Display for SpaceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} sections of {} B on {}; {} integrated, {} hidden",
            self.sections,
            self.section_bytes,
            self.backing.describe(),
            self.integrated,
            self.hidden,
        )?;
        if self.lost > 0 {
            write!(f, ", {} lost", self.lost)?;
        }
        write!(
            f,
            "; section metadata {} B (the paper's page descriptors for the integrated \
             sections: {} B)",
            self.metadata_bytes, self.paper_metadata_bytes
        )
    }
}

/// A checked shape: at least one section, a positive multiple of the page, and a
/// total that fits in `isize` (an address range) and `off_t` (a file offset).
#[derive(Clone, Copy, Debug)]
struct Geometry {
    sections: usize,
    section_bytes: u64,
    section_len: usize,
    total_bytes: u64,
    total_len: usize,
}

impl Geometry {
    fn new(sections: usize, section_bytes: u64) -> Result<Geometry, SectionError> {
        if sections == 0 {
            return Err(SectionError::NoSections);
        }
        let page_bytes = page_bytes();
        if section_bytes == 0 || !section_bytes.is_multiple_of(page_bytes) {
            return Err(SectionError::SectionSize {
                section_bytes,
                page_bytes,
            });
        }
        let too_large = SectionError::TooLarge {
            sections,
            section_bytes,
        };
        let Some(total_bytes) = u64::try_from(sections)
            .ok()
            .and_then(|n| n.checked_mul(section_bytes))
        else {
            return Err(too_large);
        };
        let fits_offset = libc::off_t::try_from(total_bytes).is_ok();
        let total_len = usize::try_from(total_bytes)
            .ok()
            .filter(|&len| isize::try_from(len).is_ok());
        let section_len = usize::try_from(section_bytes).ok();
        match (fits_offset, total_len, section_len) {
            (true, Some(total_len), Some(section_len)) => Ok(Geometry {
                sections,
                section_bytes,
                section_len,
                total_bytes,
                total_len,
            }),
            _ => Err(too_large),
        }
    }
}

/// The system page, at least [`MIN_PAGE_BYTES`].
fn page_bytes() -> u64 {
    // SAFETY: sysconf reads a system constant; it has no memory-safety
    // preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(page).map_or(MIN_PAGE_BYTES, |p| p.max(MIN_PAGE_BYTES))
}

fn io_error(op: &'static str, file: &str, source: io::Error) -> SectionError {
    SectionError::Io {
        op,
        file: file.to_owned(),
        source,
    }
}

/// Opens `path` read-write, creating it (`0600`) if absent; whether we created it.
fn open_or_create(path: &Path, label: &str) -> Result<(File, bool), SectionError> {
    let created = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
    match created {
        Ok(file) => Ok((file, true)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map(|file| (file, false))
            .map_err(|e| io_error("open", label, e)),
        Err(e) => Err(io_error("create", label, e)),
    }
}

/// A name for an open file: its `/proc/self/fd` link, or its descriptor number.
fn fd_label(file: &File) -> String {
    let fd = file.as_raw_fd();
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .map_or_else(|_| format!("fd {fd}"), |p| p.display().to_string())
}

fn lock(file: &File, label: &str) -> Result<(), SectionError> {
    file.try_lock().map_err(|e| match e {
        std::fs::TryLockError::WouldBlock => SectionError::Locked {
            file: label.to_owned(),
        },
        std::fs::TryLockError::Error(e) => io_error("flock", label, e),
    })
}

/// Reserves `len` bytes of address space that hold nothing and commit nothing;
/// returns the base with its provenance exposed.
fn reserve(len: usize) -> io::Result<usize> {
    // SAFETY: a fresh anonymous mapping at an address the kernel chooses: it
    // replaces nothing, and no memory is read or written.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(addr.expose_provenance())
}

/// DAX if the kernel accepts a one-page `MAP_SYNC` mapping, else tmpfs or disk by
/// `fstatfs`. The file is at least one page long.
fn detect_backing(
    file: &File,
    label: &str,
    path: Option<PathBuf>,
) -> Result<Backing, SectionError> {
    let kind = if probe_map_sync(file).map_err(|e| io_error("mmap MAP_SYNC probe", label, e))? {
        BackingKind::Dax
    } else if is_tmpfs(file).map_err(|e| io_error("fstatfs", label, e))? {
        BackingKind::Tmpfs
    } else {
        BackingKind::Disk
    };
    Ok(Backing {
        kind,
        emulated: kind != BackingKind::Dax,
        path,
    })
}

fn probe_map_sync(file: &File) -> io::Result<bool> {
    let len = usize::try_from(MIN_PAGE_BYTES).map_err(io::Error::other)?;
    // SAFETY: a fresh mapping of the file's first page at an address the kernel
    // chooses: it replaces nothing, and nothing reads or writes it before it is
    // unmapped below. The descriptor is open for the call.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
            file.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        let err = io::Error::last_os_error();
        return match err.raw_os_error() {
            // Not a DAX file system, or a kernel without MAP_SYNC (EINVAL).
            Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) | Some(libc::ENODEV) => Ok(false),
            _ => Err(err),
        };
    }
    // SAFETY: `addr` is the page mapped just above, used by nothing.
    let r = unsafe { libc::munmap(addr, len) };
    if r != 0 {
        tracing::warn!(error = %io::Error::last_os_error(), "munmap of the MAP_SYNC probe failed");
    }
    Ok(true)
}

fn is_tmpfs(file: &File) -> io::Result<bool> {
    let mut stats = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `stats` is writable memory of the type fstatfs fills; the
    // descriptor is open for the call.
    let r = unsafe { libc::fstatfs(file.as_raw_fd(), stats.as_mut_ptr()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatfs returned 0, so it filled the whole struct.
    let stats = unsafe { stats.assume_init() };
    Ok(u64::try_from(stats.f_type).ok() == Some(TMPFS_MAGIC))
}

/// Punches `[offset, offset + len)` out of the file, keeping its size.
fn punch_hole(file: &File, offset: libc::off_t, len: libc::off_t) -> HolePunch {
    let mut last = None;
    for _ in 0..PUNCH_RETRIES {
        // SAFETY: fallocate on an open descriptor; it takes no memory from us.
        let r = unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset,
                len,
            )
        };
        if r == 0 {
            return HolePunch::Punched;
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => last = Some(err),
            Some(libc::EOPNOTSUPP) => return HolePunch::Unsupported,
            _ => return HolePunch::Failed(err),
        }
    }
    HolePunch::Failed(last.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EINTR)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::fs::MetadataExt;
    use std::time::Instant;

    const MIB: u64 = 1 << 20;

    /// A place to put a test's file: the disk temp dir, and `/dev/shm` if present.
    fn dirs() -> Vec<PathBuf> {
        let mut dirs = vec![std::env::temp_dir()];
        let shm = Path::new("/dev/shm");
        if shm.is_dir() {
            dirs.push(shm.to_path_buf());
        } else {
            println!("skip /dev/shm: not present");
        }
        dirs
    }

    fn file_in(dir: &Path, name: &str) -> PathBuf {
        dir.join(format!("nvwa-section-{}-{name}", std::process::id()))
    }

    fn pattern(index: usize, offset: usize) -> u8 {
        (index.wrapping_mul(31) ^ offset.wrapping_mul(7) ^ (offset >> 12)) as u8 | 1
    }

    fn fill(r: &SectionRange) {
        // SAFETY: `r` is integrated (a shared read-write mapping of r.len bytes at
        // r.start) for the whole call, and nothing else touches it meanwhile.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(
                std::ptr::with_exposed_provenance_mut::<u8>(r.start),
                r.len,
            )
        };
        for (offset, b) in bytes.iter_mut().enumerate() {
            *b = pattern(r.index, offset);
        }
    }

    fn holds_pattern(r: &SectionRange) -> bool {
        // SAFETY: as in `fill`; read only.
        let bytes = unsafe {
            std::slice::from_raw_parts(std::ptr::with_exposed_provenance::<u8>(r.start), r.len)
        };
        bytes
            .iter()
            .enumerate()
            .all(|(offset, &b)| b == pattern(r.index, offset))
    }

    fn all_zero(r: &SectionRange) -> bool {
        // SAFETY: as in `fill`; read only.
        let bytes = unsafe {
            std::slice::from_raw_parts(std::ptr::with_exposed_provenance::<u8>(r.start), r.len)
        };
        bytes.iter().all(|&b| b == 0)
    }

    /// The permissions `/proc/self/maps` gives the mapping covering `r`; `None`
    /// if the file is absent or no single mapping covers it.
    fn maps_perms(r: &SectionRange) -> Option<String> {
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        maps.lines().find_map(|line| {
            let mut fields = line.split_whitespace();
            let (lo, hi) = fields.next()?.split_once('-')?;
            let lo = usize::from_str_radix(lo, 16).ok()?;
            let hi = usize::from_str_radix(hi, 16).ok()?;
            let perms = fields.next()?;
            (lo <= r.start && r.end() <= hi).then(|| perms.to_owned())
        })
    }

    fn rss_bytes() -> Option<u64> {
        let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
        let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
        Some(pages * page_bytes())
    }

    #[test]
    fn space_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<SectionSpace>();
    }

    #[test]
    fn integrate_write_contains() {
        for dir in dirs() {
            let path = file_in(&dir, "integrate");
            let mut space = SectionSpace::create(&path, 4, MIB)
                .expect("create")
                .remove_on_drop();
            println!("{}", space.report());
            if dir == Path::new("/dev/shm") {
                assert_eq!(space.backing().kind, BackingKind::Tmpfs);
            }
            assert_eq!(
                space.backing().emulated,
                space.backing().kind != BackingKind::Dax
            );
            assert_eq!(space.backing().path.as_deref(), Some(path.as_path()));
            assert_eq!(
                (space.len(), space.hidden_count(), space.integrated_count()),
                (4, 4, 0)
            );
            assert!(!space.is_empty());
            assert_eq!(space.section_bytes(), MIB);

            let r1 = space.integrate(1).expect("integrate");
            let r3 = space.integrate(3).expect("integrate");
            assert_eq!(r1, space.range(1).expect("range"));
            assert_eq!((r1.index, r1.len as u64), (1, MIB));
            assert_eq!(r3.start - r1.start, 2 * MIB as usize);
            assert_eq!((space.hidden_count(), space.integrated_count()), (2, 2));
            assert_eq!(space.state(1), Some(SectionState::Integrated));
            assert_eq!(space.state(0), Some(SectionState::Hidden));
            assert_eq!(space.state(4), None);
            if let Some(perms) = maps_perms(&r1) {
                assert_eq!(perms, "rw-s");
            }

            fill(&r1);
            fill(&r3);
            assert!(holds_pattern(&r1) && holds_pattern(&r3));
            // The bytes are the file's.
            let mut file = File::open(&path).expect("open");
            let mut head = vec![0u8; (2 * MIB) as usize];
            file.read_exact(&mut head).expect("read_exact");
            assert!(head[..MIB as usize].iter().all(|&b| b == 0));
            assert!(head[MIB as usize..]
                .iter()
                .enumerate()
                .all(|(o, &b)| b == pattern(1, o)));

            let r0 = space.range(0).expect("range");
            let last = space.range(3).expect("range").end() - 1;
            assert_eq!(space.contains(r0.start), Some(0));
            assert_eq!(space.contains(r1.start), Some(1));
            assert_eq!(space.contains(r1.end() - 1), Some(1));
            assert_eq!(space.contains(r1.end()), Some(2));
            assert_eq!(space.contains(last), Some(3));
            assert_eq!(space.contains(last + 1), None);
            assert_eq!(space.contains(r0.start - 1), None);
            assert_eq!(space.contains(0), None);
            assert_eq!(space.contains(usize::MAX), None);
            assert!(r1.contains(r1.start) && !r1.contains(r1.end()));
            drop(space);
            assert!(!path.exists(), "remove_on_drop");
        }
    }

    #[test]
    fn reclaim_keeps_the_other_and_punches() {
        for dir in dirs() {
            let path = file_in(&dir, "reclaim");
            let mut space = SectionSpace::create(&path, 4, MIB)
                .expect("create")
                .remove_on_drop();
            let r0 = space.integrate(0).expect("integrate");
            let r2 = space.integrate(2).expect("integrate");
            fill(&r0);
            fill(&r2);
            let blocks_before = std::fs::metadata(&path).expect("metadata").blocks();

            let reclaimed = space.reclaim(2).expect("reclaim");
            assert_eq!(reclaimed.index, 2);
            assert_eq!(space.state(2), Some(SectionState::Hidden));
            assert_eq!((space.hidden_count(), space.integrated_count()), (3, 1));
            assert!(holds_pattern(&r0), "the other section keeps its bytes");
            match maps_perms(&r2) {
                Some(perms) => assert_eq!(perms, "---p", "a reclaimed range is PROT_NONE"),
                None => println!("skip maps check: /proc/self/maps absent"),
            }

            let blocks_after = std::fs::metadata(&path).expect("metadata").blocks();
            println!(
                "{}: st_blocks {blocks_before} -> {blocks_after}, hole {:?}",
                dir.display(),
                reclaimed.hole
            );
            if reclaimed.hole.is_punched() {
                if blocks_before > 0 {
                    assert!(blocks_after < blocks_before);
                    assert!(blocks_before - blocks_after >= MIB / 512 / 2);
                } else {
                    println!("skip st_blocks check: the file system reports no blocks");
                }
            }
            assert_eq!(
                std::fs::metadata(&path).expect("metadata").len(),
                4 * MIB,
                "size kept"
            );

            let again = space.integrate(2).expect("integrate");
            assert_eq!(again, r2);
            if reclaimed.hole.is_punched() {
                assert!(all_zero(&again), "a punched section reads as zeros");
            } else {
                assert!(holds_pattern(&again), "without a hole the old bytes stay");
            }
            assert!(holds_pattern(&r0));
            space.reclaim(0).expect("reclaim");
            space.reclaim(2).expect("reclaim");
            assert_eq!(space.hidden_count(), 4);
        }
    }

    #[test]
    fn state_errors() {
        let path = file_in(&std::env::temp_dir(), "errors");
        let mut space = SectionSpace::create(&path, 4, MIB)
            .expect("create")
            .remove_on_drop();
        assert!(matches!(
            space.integrate(4),
            Err(SectionError::OutOfRange {
                index: 4,
                sections: 4
            })
        ));
        assert!(matches!(
            space.reclaim(usize::MAX),
            Err(SectionError::OutOfRange { .. })
        ));
        assert!(matches!(
            space.reclaim(1),
            Err(SectionError::NotIntegrated {
                index: 1,
                state: SectionState::Hidden
            })
        ));
        space.integrate(1).expect("integrate");
        assert!(matches!(
            space.integrate(1),
            Err(SectionError::AlreadyIntegrated { index: 1 })
        ));
        assert_eq!(space.integrated_count(), 1);
        let shown = space.reclaim(0).expect_err("must fail").to_string();
        assert!(shown.contains("section 0 is hidden"), "{shown}");
    }

    #[test]
    fn geometry_errors() {
        let path = file_in(&std::env::temp_dir(), "geometry");
        for bytes in [0, 4097, MIB + 512] {
            assert!(matches!(
                SectionSpace::create(&path, 4, bytes),
                Err(SectionError::SectionSize { section_bytes, page_bytes })
                    if section_bytes == bytes && page_bytes % 4096 == 0
            ));
        }
        assert!(matches!(
            SectionSpace::create(&path, 0, MIB),
            Err(SectionError::NoSections)
        ));
        assert!(matches!(
            SectionSpace::create(&path, usize::MAX, MIB),
            Err(SectionError::TooLarge { .. })
        ));
        assert!(matches!(
            SectionSpace::create(&path, 1 << 40, SECTION_BYTES),
            Err(SectionError::TooLarge { .. })
        ));
        assert!(!path.exists(), "a refused geometry creates no file");
    }

    #[test]
    fn refuses_non_empty_and_locked_files() {
        let path = file_in(&std::env::temp_dir(), "nonempty");
        std::fs::File::create(&path)
            .expect("create")
            .write_all(b"precious")
            .expect("write_all");
        let err = SectionSpace::create(&path, 2, MIB).expect_err("must fail");
        assert!(
            matches!(err, SectionError::FileNotEmpty { len: 8, .. }),
            "{err}"
        );
        println!("{err}");
        assert_eq!(
            std::fs::read(&path).expect("read"),
            b"precious",
            "left as it was"
        );
        std::fs::remove_file(&path).expect("remove_file");

        // An existing empty file is taken.
        let path = file_in(&std::env::temp_dir(), "locked");
        std::fs::File::create(&path).expect("create");
        let space = SectionSpace::create(&path, 2, MIB)
            .expect("create")
            .remove_on_drop();
        let err = SectionSpace::create(&path, 2, MIB).expect_err("must fail");
        assert!(matches!(err, SectionError::Locked { .. }), "{err}");
        assert_eq!(space.hidden_count(), 2);
    }

    #[test]
    fn from_an_unlinked_file() {
        let path = file_in(&std::env::temp_dir(), "unlinked");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .expect("open");
        std::fs::remove_file(&path).expect("remove_file");
        let mut space = SectionSpace::from_file(file, 3, 64 << 10).expect("from_file");
        assert_eq!(space.backing().path, None);
        println!("{}", space.report());
        let r = space.integrate(1).expect("integrate");
        fill(&r);
        assert!(holds_pattern(&r));
        space.reclaim(1).expect("reclaim");
    }

    #[test]
    fn hidden_sections_cost_no_rss() {
        let Some(before) = rss_bytes() else {
            println!("skip: /proc/self/statm absent");
            return;
        };
        let path = file_in(&std::env::temp_dir(), "rss");
        let space = SectionSpace::create(&path, 8, SECTION_BYTES)
            .expect("create")
            .remove_on_drop();
        assert_eq!(
            space.range(7).expect("range").end() - space.range(0).expect("range").start,
            1 << 30
        );
        let Some(after) = rss_bytes() else {
            println!("skip: /proc/self/statm unreadable");
            return;
        };
        let grown = after.saturating_sub(before);
        println!("1 GiB of hidden sections: RSS {before} -> {after} B (+{grown})");
        // Other tests run in parallel threads; leave them room.
        assert!(grown < 64 * MIB, "RSS grew by {grown} B");
        assert_eq!(
            std::fs::metadata(&path).expect("metadata").blocks(),
            0,
            "the file is sparse"
        );
    }

    #[test]
    fn metadata_beside_the_paper() {
        assert_eq!(paper_descriptor_bytes(SECTION_BYTES), 32_768 * 56);
        assert_eq!(paper_descriptor_bytes(SECTION_BYTES), 1_835_008);
        let path = file_in(&std::env::temp_dir(), "metadata");
        let mut space = SectionSpace::create(&path, 8, MIB)
            .expect("create")
            .remove_on_drop();
        let hidden = space.metadata_bytes();
        space.integrate(0).expect("integrate");
        space.integrate(5).expect("integrate");
        assert_eq!(
            space.metadata_bytes(),
            hidden,
            "integrating adds no metadata here"
        );
        assert_eq!(
            space.paper_metadata_bytes(),
            2 * paper_descriptor_bytes(MIB)
        );
        assert_eq!(paper_descriptor_bytes(MIB), 256 * 56);
        // The struct, 8 state bytes, the label and the path.
        let label = path.display().to_string().len();
        assert!(hidden >= size_of::<SectionSpace>() + 8 + 2 * label);
        assert!(
            hidden <= size_of::<SectionSpace>() + 8 + 2 * label + 64,
            "{hidden}"
        );
        let wider = SectionSpace::create(file_in(&std::env::temp_dir(), "metadata-w"), 1000, MIB)
            .expect("create")
            .remove_on_drop();
        let per_hidden = (wider.metadata_bytes() as f64 - hidden as f64) / 992.0;
        assert!(
            per_hidden < 1.1,
            "a hidden section costs its state byte: {per_hidden}"
        );
        let report = space.report();
        println!("{report}");
        println!(
            "metadata: {} B for {} sections (struct {} B, one state byte per section); \
             the paper's page descriptors: {} B per section, {} B for the 2 integrated",
            hidden,
            space.len(),
            size_of::<SectionSpace>(),
            paper_descriptor_bytes(MIB),
            report.paper_metadata_bytes
        );
        assert!(report.to_string().contains("emulated") || !report.backing.emulated);
    }

    /// Times one default (128 MiB) section on each backing: integrate, reclaim
    /// untouched, and reclaim with every page written (by one memset). Not an
    /// assertion; run with `cargo test -p nvwa --lib fusion::section -- --ignored --nocapture`.
    #[test]
    #[ignore = "timing: writes 128 MiB per backing"]
    fn time_one_default_section() {
        for dir in dirs() {
            let path = file_in(&dir, "timing");
            let mut space = SectionSpace::create(&path, 2, SECTION_BYTES)
                .expect("create")
                .remove_on_drop();
            let t = Instant::now();
            let r = space.integrate(1).expect("integrate");
            let integrate = t.elapsed();
            let t = Instant::now();
            let untouched = space.reclaim(1).expect("reclaim");
            let reclaim_untouched = t.elapsed();
            let r2 = space.integrate(1).expect("integrate");
            assert_eq!(r, r2);
            let t = Instant::now();
            // SAFETY: section 1 is integrated: a shared read-write mapping of
            // r2.len bytes at r2.start that nothing else touches.
            unsafe {
                std::ptr::write_bytes(
                    std::ptr::with_exposed_provenance_mut::<u8>(r2.start),
                    0xa5,
                    r2.len,
                );
            }
            let write = t.elapsed();
            let t = Instant::now();
            let touched = space.reclaim(1).expect("reclaim");
            let reclaim_touched = t.elapsed();
            println!(
                "{}: integrate {integrate:?}; reclaim untouched {reclaim_untouched:?} ({:?}); \
                 memset all 128 MiB {write:?}; reclaim written {reclaim_touched:?} ({:?})",
                space.backing().describe(),
                untouched.hole,
                touched.hole
            );
        }
    }
}
