//! Each node's store on a simulated pool: the [`StoreProvider`] that opens it from a
//! crash image and replaces it by an installed snapshot, and the crash images
//! themselves.
//!
//! * **Open.** The first open formats a fresh simulated pool; every later open
//!   recovers the crash image the harness left in the node's [`Slot`], on a new
//!   simulated pool whose recorder starts from that image (so each incarnation's
//!   trace starts at its own recovery).
//! * **Install** formats a fresh simulated pool beside the current one and installs
//!   the snapshot into it chunk by chunk (on the library's installer thread, as the
//!   file provider does); the last chunk carries the hard state over and swaps the
//!   slot's current pool for it: the file rename as one atomic pointer swap. An injected crash
//!   *before* the swap discards the fresh pool (the node restarts from the old one);
//!   one right *after* it crashes the new pool at its end (everything the install made
//!   durable must be there).
//! * **Crash images** come from the recorder's trace at a crash point (the end of the
//!   trace, or a fence inside the node's last `process` or compaction) under the line
//!   model of Px86: each in-flight cache line keeps a prefix of its stores, chosen by the
//!   seed's generator — the minimal or maximal cut sometimes, usually a random cut per
//!   line or a "moment in time" cut with a few lines deviating.
//! * **Bounded traces.** A trace restarts from each recovery. A long-lived
//!   incarnation's trace is rebased at a quiescent point: after a step in which the
//!   store synced everything (durable index = last index), once the trace is past
//!   [`REBASE_EVENTS`], if the crash state at its end has no in-flight line at all,
//!   every crash image there is the current contents, so making them the durable base
//!   ([`SimDomain::mark_durable`]) loses no crash image.

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use pmem_core::sim::{CrashPoints, CrashState, Cut, Model, SimDomain};
use pmem_core::Pool;
use raft_nvm::replica::{SnapshotInstall, StagedStore, StoreProvider, ThreadedInstall};
use raft_nvm::{HardState, ListOptions, ListStore, SnapshotMeta, Store, StoreError};

use super::rng::Rng;

/// Past this many recorded events, a trace is rebased at the next quiescent point.
pub const REBASE_EVENTS: usize = 3000;

/// The pool geometry of every store of a run.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Pool bytes.
    pub size: u64,
    /// Page size and group durability.
    pub opts: ListOptions,
}

/// An injected crash around a snapshot's installation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstallCrash {
    /// After the fresh pool is installed, before the swap.
    BeforeSwap,
    /// Right after the swap.
    AfterSwap,
}

/// What the harness and a node's provider share.
#[derive(Default)]
pub struct Slot {
    /// The recorder of the current store's pool.
    pub domain: Option<Arc<SimDomain>>,
    /// The crash image the next open recovers (`None` at the first open: format).
    pub image: Option<Vec<u8>>,
    /// The current store, for page accounting (the replica owns it).
    pub store: Weak<ListStore>,
    /// Crash the node around the next installation.
    pub arm: Option<InstallCrash>,
    /// The armed crash happened: the harness must crash the node now.
    pub fired: Option<InstallCrash>,
    /// Snapshots installed (swaps).
    pub installs: u64,
}

/// Locks a slot (a poisoned lock only means a seed already failed).
pub fn lock(slot: &Mutex<Slot>) -> MutexGuard<'_, Slot> {
    slot.lock().unwrap_or_else(|p| p.into_inner())
}

/// The [`StoreProvider`] of one node: list stores on simulated pools.
pub struct SimProvider {
    cfg: PoolConfig,
    slot: Arc<Mutex<Slot>>,
}

impl SimProvider {
    /// A provider over `slot`.
    pub fn new(cfg: PoolConfig, slot: Arc<Mutex<Slot>>) -> SimProvider {
        SimProvider { cfg, slot }
    }
}

/// A freshly formatted store on a new simulated pool.
fn fresh_pool(cfg: &PoolConfig) -> raft_nvm::Result<(ListStore, Arc<SimDomain>)> {
    let (pool, domain) = Pool::simulated(&ListStore::pool_options(cfg.size, &cfg.opts))?;
    Ok((ListStore::format(pool, &cfg.opts)?, domain))
}

impl StoreProvider for SimProvider {
    fn open(&mut self) -> raft_nvm::Result<Arc<dyn Store>> {
        let image = lock(&self.slot).image.take();
        let (store, domain) = match image {
            Some(image) => {
                let (pool, domain) = Pool::simulated_from_image(&image)?;
                (ListStore::recover(pool, &self.cfg.opts)?, domain)
            }
            None => fresh_pool(&self.cfg)?,
        };
        let store = Arc::new(store);
        let mut slot = lock(&self.slot);
        slot.domain = Some(domain);
        slot.store = Arc::downgrade(&store);
        Ok(store)
    }

    fn begin_install(&mut self, meta: SnapshotMeta) -> raft_nvm::Result<Box<dyn SnapshotInstall>> {
        // The real providers' installer thread, fed chunk by chunk; the fresh pool
        // is formatted and filled on it, and swapped in by `StagedSim::commit`.
        let (cfg, slot) = (self.cfg.clone(), Arc::clone(&self.slot));
        let install = ThreadedInstall::spawn(meta, Arc::default(), move |meta, items| {
            let (fresh, domain) = fresh_pool(&cfg)?;
            fresh.install_snapshot(meta, items)?;
            Ok(Box::new(StagedSim {
                fresh,
                domain,
                slot,
            }) as Box<dyn StagedStore>)
        })?;
        Ok(Box::new(install))
    }
}

/// A fresh simulated pool holding an installed snapshot, not yet the node's.
struct StagedSim {
    fresh: ListStore,
    domain: Arc<SimDomain>,
    slot: Arc<Mutex<Slot>>,
}

impl StagedStore for StagedSim {
    fn commit(self: Box<Self>, hard_state: HardState) -> raft_nvm::Result<Arc<dyn Store>> {
        let StagedSim {
            fresh,
            domain,
            slot,
        } = *self;
        fresh.set_hard_state(hard_state)?;
        let mut slot = lock(&slot);
        if slot.arm == Some(InstallCrash::BeforeSwap) {
            slot.arm = None;
            slot.fired = Some(InstallCrash::BeforeSwap);
            return Err(StoreError::Invalid(
                "simulated crash before the swap".into(),
            ));
        }
        // The rename: one atomic swap of the node's current pool.
        let fresh = Arc::new(fresh);
        slot.domain = Some(domain);
        slot.store = Arc::downgrade(&fresh);
        slot.installs += 1;
        if slot.arm == Some(InstallCrash::AfterSwap) {
            slot.arm = None;
            slot.fired = Some(InstallCrash::AfterSwap);
        }
        Ok(fresh)
    }
}

/// How a crash image was chosen (for the event log).
#[derive(Clone, Debug)]
pub struct CrashImage {
    /// The image.
    pub image: Vec<u8>,
    /// The strategy and how many lines lost stores.
    pub how: String,
}

/// A crash image of `domain`'s pool: at the end of its trace, or (`within: Some(from)`)
/// before a random fence recorded from event `from` on (or at the end).
pub fn crash_image(domain: &SimDomain, within: Option<usize>, rng: &mut Rng) -> CrashImage {
    let trace = domain.trace();
    assert!(
        !trace.overflowed,
        "the recorder overflowed: trace bounding failed"
    );
    let point = match within {
        None => trace.events.len(),
        Some(from) => {
            let points: Vec<usize> = trace
                .crash_points(CrashPoints::Durable)
                .into_iter()
                .filter(|&p| p >= from)
                .collect();
            rng.pick(&points)
        }
    };
    let state = CrashState::new(&trace, point, Model::Line);
    let (cut, strategy) = choose_cut(&state, rng);
    let lost = state
        .in_flight()
        .iter()
        .zip(&cut)
        .filter(|(u, &p)| p < u.max())
        .count();
    CrashImage {
        image: state.materialize(&cut),
        how: format!(
            "at event {point}/{}: {strategy} cut, {lost} of {} in-flight lines lose stores",
            trace.events.len(),
            state.in_flight().len()
        ),
    }
}

/// A cut of the in-flight lines: never only the extremes.
fn choose_cut(state: &CrashState<'_>, rng: &mut Rng) -> (Cut, &'static str) {
    let units = state.in_flight();
    match rng.below(10) {
        0 => (state.minimal(), "minimal"),
        1 => (state.maximal(), "maximal"),
        2..=5 => (
            units
                .iter()
                .map(|u| rng.range(u.durable as u64, u.max() as u64) as usize)
                .collect(),
            "per-line random",
        ),
        _ => {
            // A moment in time: every line keeps the stores issued before it, then a
            // few lines deviate (the cache wrote some back early or late).
            let first = units
                .iter()
                .filter_map(|u| u.stores.get(u.durable).copied())
                .min()
                .unwrap_or(0);
            let moment = rng.range(first as u64, state.point() as u64) as usize;
            let cut = units
                .iter()
                .map(|u| {
                    let before = u.stores.iter().filter(|&&i| i < moment).count();
                    if rng.chance(100) {
                        rng.range(u.durable as u64, u.max() as u64) as usize
                    } else {
                        u.prefix(before)
                    }
                })
                .collect();
            (cut, "moment-in-time")
        }
    }
}

/// Rebases `domain`'s trace if it is long and nothing is in flight at its end.
/// Returns whether it did.
pub fn maybe_rebase(domain: &SimDomain) -> bool {
    if domain.event_count() < REBASE_EVENTS {
        return false;
    }
    let trace = domain.trace();
    let quiet = CrashState::new(&trace, trace.events.len(), Model::Line)
        .in_flight()
        .is_empty();
    if quiet {
        domain.mark_durable();
    }
    quiet
}
