//! A run's configuration, drawn from its seed: cluster size, Raft tunables, store
//! geometry, fault rates, clients and length.
//!
//! Pools are small — 64 pages of 256 or 512 bytes (16 or 32 KiB), with a DRAM window
//! of 8 to 32 entries — so compaction and snapshots happen in every run, and because
//! the crash simulator's recorder compares the whole mapping with its shadow at every
//! recorded store, flush and fence: its cost grows with the pool, and pools of a few
//! hundred KiB would make a seed ten times slower.

use raft_nvm::{ListOptions, StoreOptions, WalOptions};

use super::clients::ClientConfig;
use super::net::Faults;
use super::pmem::PoolConfig;
use super::rng::{seeded, Rng};

/// Everything a run's seed decides up front.
#[derive(Clone, Debug)]
pub struct Params {
    /// Node ids `1..=n`.
    pub n: u16,
    pub pre_vote: bool,
    pub check_quorum: bool,
    pub election: (u32, u32),
    pub heartbeat: u32,
    pub window: usize,
    pub per_msg: usize,
    pub inflight: usize,
    /// Steps per tick.
    pub tick_every: u64,
    pub pool: PoolConfig,
    /// The nodes on the WAL engine (the others are on the list engine).
    pub wal_nodes: Vec<u16>,
    /// The WAL nodes' options (the group size is the pools').
    pub wal: WalOptions,
    /// Snapshot chunk payload bytes.
    pub chunk_bytes: usize,
    pub faults: Faults,
    /// Per mille per step: one node crashes.
    pub crash: u32,
    /// Per mille per step: every node crashes at once.
    pub power: u32,
    /// Per mille per `process` that wrote to the pool: the node crashes inside it
    /// (four times that inside a compaction).
    pub mid_crash: u32,
    /// Per mille per step: a snapshot installation is armed to crash.
    pub install_crash: u32,
    /// Per mille per step: the network splits or cuts links.
    pub partition: u32,
    /// Most steps a partition or a crashed node lasts.
    pub outage: u64,
    /// Per mille per node and step: compaction runs.
    pub compact: u32,
    /// Whether the simulation's own compactor runs (at random steps and when a pool
    /// runs low). Without it, only the replicas' `CompactionPolicy` compacts, and
    /// pools may fill: writes are then refused and followers drop what does not fit.
    pub own_compactor: bool,
    pub clients: ClientConfig,
    /// Steps of the faulty phase.
    pub steps: u64,
}

impl Params {
    /// The parameters of seed `seed`, drawn from `rng` (seeded with it). One seed in
    /// four leaves compaction to the replicas' policy alone, and half of those run
    /// on pools of 12 KiB (half of it pages after the header), which fill between
    /// compactions: writes are refused and
    /// followers drop appends. Which seeds, is taken from the seed rather than the
    /// generator, so the other seeds' schedules stay.
    ///
    /// The engines, likewise from the seed: of every eight seeds, two run on the
    /// WAL engine alone (`seed % 8` in {0, 4}), three mix the engines ({1, 3, 5}:
    /// one or two WAL nodes) and three run on the list alone ({2, 6, 7}: 7 is the
    /// small-pool one). The WAL's own options come from a generator of their own.
    pub fn for_seed(seed: u64, rng: &mut Rng) -> Params {
        let mut p = Params::draw(rng);
        p.own_compactor = seed % 4 != 3;
        if seed % 8 == 7 {
            p.pool.size = 12 << 10;
        }
        p.wal_nodes = match seed % 8 {
            0 | 4 => (1..=p.n).collect(),
            1 | 3 | 5 => (1..=p.n)
                .filter(|id| (seed / 8 + u64::from(*id)).is_multiple_of(2))
                .collect(),
            _ => Vec::new(),
        };
        let mut wal_rng = seeded(seed ^ 0x7761_6c5f_6e6f_6465);
        p.wal = WalOptions {
            store: p.pool.opts.store.clone(),
            // Without the simulation's compactor, the WAL compacts only by its own
            // snapshot interval (its capacity is unbounded: the replicas' policy
            // leaves it alone).
            snapshot_every: if p.own_compactor {
                wal_rng.pick(&[0u64, 0, 24, 100])
            } else {
                wal_rng.pick(&[24u64, 100])
            },
        };
        p
    }

    /// The parameters of a run (with the simulation's own compactor).
    fn draw(rng: &mut Rng) -> Params {
        let n = if rng.chance(200) { 5 } else { 3 };
        let page_size = rng.pick(&[256u32, 256, 512]);
        let election_min = rng.range(8, 12) as u32;
        let keys = rng.range(1, 3) as usize;
        Params {
            n,
            pre_vote: rng.chance(700),
            check_quorum: rng.chance(700),
            election: (election_min, election_min * 2),
            heartbeat: rng.range(2, 3) as u32,
            window: rng.pick(&[8usize, 16, 32]),
            per_msg: rng.pick(&[1usize, 4, 16, 64]),
            inflight: rng.pick(&[1usize, 2, 8]),
            tick_every: 3,
            pool: PoolConfig {
                size: u64::from(page_size) * 64,
                opts: ListOptions {
                    store: StoreOptions {
                        group: rng.pick(&[1u32, 3, 8]),
                        sync_interval: None,
                    },
                    page_size,
                    ..ListOptions::default()
                },
            },
            wal_nodes: Vec::new(),
            wal: WalOptions::default(),
            chunk_bytes: rng.pick(&[64usize, 256, 4096]),
            faults: Faults {
                loss: rng.pick(&[0u32, 10, 50, 150]),
                dup: rng.pick(&[0u32, 10, 30]),
                slow: rng.pick(&[0u32, 20, 100, 300]),
                delay: rng.range(1, 4),
                long_delay: rng.range(20, 80),
            },
            crash: rng.pick(&[0u32, 2, 4, 8]),
            power: rng.pick(&[0u32, 0, 1]),
            mid_crash: rng.pick(&[0u32, 2, 6]),
            install_crash: rng.pick(&[0u32, 0, 20]),
            partition: rng.pick(&[0u32, 4, 10]),
            outage: rng.range(60, 400),
            compact: rng.pick(&[10u32, 30, 100]),
            own_compactor: true,
            clients: ClientConfig {
                clients: rng.range(2, 5),
                keys: ["a", "b", "c"][..keys]
                    .iter()
                    .map(|k| k.as_bytes().to_vec())
                    .collect(),
                timeout: rng.range(100, 250),
                think: rng.range(2, 20),
            },
            steps: rng.range(700, 1400),
        }
    }
}
