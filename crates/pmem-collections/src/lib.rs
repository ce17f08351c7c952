//! Typed, crash-atomic persistent containers on [`pmem_core::tx`].
//!
//! A [`PHeap`] is a pool with a transaction log, an allocator and a directory of
//! named roots. From it a program opens typed structures by name:
//!
//! | structure | what it is |
//! | --- | --- |
//! | [`PBox<T>`] | one owned value |
//! | [`PVec<T>`] | a growable array |
//! | [`PBytes`], [`PString`] | growable byte and UTF-8 strings |
//! | [`PHashMap<K, V>`] | a hash map |
//! | [`PBTreeMap<K, V>`] | an ordered map with range scans |
//! | [`PMutex<T>`] | any of them behind a lock, for sharing between threads |
//! | [`PConcurrentHashMap<K, V>`] | a hash map many threads update at once |
//!
//! Element types are any [`PType`] (a zerocopy type with a stable id: the integers,
//! floats, arrays of them and your own `#[repr(C)]` structs) and the byte strings
//! [`PBytes`] / [`PString`]. Every operation that changes a structure is one
//! transaction: after a crash at any point, reopening the heap finds it either
//! before the operation or after it, never between, and nothing leaked. Reads need
//! no transaction.
//!
//! **Safety without `unsafe`.** Each structure has one live handle at a time (a
//! second opening fails with [`Error::AlreadyOpen`]); reads borrow the handle,
//! writes borrow it mutably, so concurrent transactions on different structures
//! are safe by construction. A handle used with another heap fails with
//! [`Error::WrongHeap`] (we chose a typed error over a branded lifetime: see
//! [`heap`]). A structure opened as another type fails with
//! [`Error::TypeMismatch`], naming both.

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod btree;
pub mod bytes;
pub mod cmap;
pub mod element;
mod error;
#[cfg(feature = "sim")]
#[doc(hidden)] // The fuzz targets' bodies: not an API promise.
pub mod fuzzing;
pub mod hash;
pub mod hashmap;
pub mod heap;
pub mod mutex;
pub mod pbox;
pub mod ptype;
mod raw;
pub mod roots;
mod tag;
pub mod vec;

pub use btree::PBTreeMap;
pub use bytes::{PBytes, PString};
pub use cmap::PConcurrentHashMap;
pub use element::{Element, Media, OrdElement};
pub use error::{Error, Result};
pub use hashmap::PHashMap;
pub use heap::{HeapOptions, PHeap};
pub use mutex::{PMutex, PMutexGuard};
pub use pbox::{PBox, PTx};
pub use ptype::{PType, TypeKey};
pub use roots::{Container, Roots};
pub use vec::PVec;

/// The crate README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
