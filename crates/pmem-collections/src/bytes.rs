//! [`PBytes`] and [`PString`]: growable persistent byte strings, and the element
//! types through which containers hold byte strings.

#![allow(dead_code)] // filled in by the vector and strings work

use crate::heap::Claim;

/// A persistent, growable byte string. As a container's element type
/// (`PHashMap<PBytes, PBytes>`), a byte string the container owns: inserted as
/// `&[u8]`, read as `Vec<u8>`.
pub struct PBytes {
    claim: Claim,
}

/// A persistent, growable UTF-8 string. As a container's element type
/// (`PHashMap<PString, PString>`), a string the container owns: inserted as
/// `&str`, read as `String`.
pub struct PString {
    claim: Claim,
}
