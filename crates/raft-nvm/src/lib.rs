//! # raft-nvm — Raft over a persistent append-only list
//!
//! **Status: not implemented yet.** This crate is a placeholder so the workspace
//! layout is visible; it exports nothing.
//!
//! It will hold the replicated key-value service of the MSc thesis
//! (seed `raft-on-nvm-thesis-ru.txt`): the Raft log and the state machine as one
//! persistent append-only list of records in ~1 KiB pages indexed by a DRAM
//! `BTreeMap<(key, ts), offset>`, group durability, background compaction,
//! snapshots streamed from the list, a deterministic consensus core driven by
//! tokio, a write-ahead-log baseline engine, and a RESP front end.
