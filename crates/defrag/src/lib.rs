//! # defrag — concurrent crash-consistent compaction (ISCA'22 FFCCD)
//!
//! **Status: not implemented yet.** This crate is a placeholder so the workspace
//! layout is visible; it exports nothing.
//!
//! It will hold a typed persistent object heap (objects carry a type id whose
//! layout names their persistent pointers; named roots), a mark and summary phase
//! that computes a persistent, deterministic forwarding table, and concurrent
//! compaction whose dereference path is the read barrier: the Espresso-style,
//! SFCCD and FFCCD protocols, with recovery that finishes or undoes each move.
