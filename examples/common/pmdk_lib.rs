//! Loading libpmemobj (PMDK 1.12, Debian's `libpmemobj-dev`) at run time, shared by
//! the examples that measure PMDK beside pmkit (`tx_bench`, `defrag_repro`): with
//! `dlopen`, the examples build and run without it and say so in one line.

use std::ffi::CString;
use std::path::Path;

use libloading::Library;

/// The library file looked for.
pub const LIBRARY: &str = "libpmemobj.so.1";

/// PMDK's persistent object id (`PMEMoid`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PmemOid {
    /// The pool's UUID, low half.
    pub pool_uuid_lo: u64,
    /// Offset from the pool's base (0: null).
    pub off: u64,
}

/// Opens the library. `Err` says why it is unavailable (one line).
pub fn open() -> Result<Library, String> {
    // SAFETY: loading libpmemobj runs its constructors, which only initialise the
    // library (read environment variables, set up logging).
    unsafe { Library::new(LIBRARY) }.map_err(|e| format!("{LIBRARY}: {e}"))
}

/// A symbol lookup's error, as one line.
pub fn sym(e: libloading::Error) -> String {
    format!("{LIBRARY}: {e}")
}

/// `path` as a C string for `pmemobj_create`.
pub fn c_path(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{}: path contains NUL", path.display()))
}
