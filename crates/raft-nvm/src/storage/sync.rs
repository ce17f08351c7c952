//! Lock shims: pmem-core's (std's locks without poisoning noise, loom's under
//! `--cfg loom` for the models).

pub(crate) use pmem_core::sync::atomic::{AtomicU64, Ordering};
pub(crate) use pmem_core::sync::{lock, read, write, Mutex, RwLock, RwLockReadGuard};
