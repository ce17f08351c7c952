//! Each node's store on a simulated pool: the [`StoreProvider`] that opens it from a
//! crash image and replaces it by an installed snapshot, and the crash images
//! themselves.
//!
//! * **Open.** The first open formats a fresh simulated pool; every later open
//!   recovers the crash image the harness left in the node's [`Slot`], on a new
//!   simulated pool whose recorder starts from that image (so each incarnation's
//!   trace starts at its own recovery).
//! * **Replace** formats a fresh simulated pool beside the current one, installs the
//!   snapshot into it and carries the hard state over, then swaps the slot's current
//!   pool for it: the file rename as one atomic pointer swap. An injected crash
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
use raft_nvm::replica::StoreProvider;
use raft_nvm::{ListOptions, ListStore, SnapshotItem, SnapshotMeta, Store, StoreError};

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

    fn fresh(&self) -> raft_nvm::Result<(ListStore, Arc<SimDomain>)> {
        let (pool, domain) =
            Pool::simulated(&ListStore::pool_options(self.cfg.size, &self.cfg.opts))?;
        Ok((ListStore::format(pool, &self.cfg.opts)?, domain))
    }
}

impl StoreProvider for SimProvider {
    fn open(&mut self) -> raft_nvm::Result<Arc<dyn Store>> {
        let image = lock(&self.slot).image.take();
        let (store, domain) = match image {
            Some(image) => {
                let (pool, domain) = Pool::simulated_from_image(&image)?;
                (ListStore::recover(pool, &self.cfg.opts)?, domain)
            }
            None => self.fresh()?,
        };
        let store = Arc::new(store);
        let mut slot = lock(&self.slot);
        slot.domain = Some(domain);
        slot.store = Arc::downgrade(&store);
        Ok(store)
    }

    fn replace(
        &mut self,
        current: &dyn Store,
        meta: SnapshotMeta,
        items: &mut dyn Iterator<Item = SnapshotItem>,
    ) -> raft_nvm::Result<Arc<dyn Store>> {
        let hard_state = current.hard_state();
        let (fresh, domain) = self.fresh()?;
        fresh.install_snapshot(meta, items)?;
        fresh.set_hard_state(hard_state)?;
        let mut slot = lock(&self.slot);
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
