//! A deterministic simulation of whole Raft key-value clusters: three (sometimes
//! five) real [`raft_nvm::replica::Replica`]s, each on a list store in a simulated
//! persistent-memory pool or on a WAL store in a directory of its own, in one
//! process, driven by one seed (some seeds run on the list alone, some on the WAL
//! alone, some mix them: [`params`]).
//!
//! Per seed, with its parameters drawn from it ([`params`]; the run is [`cluster`]):
//! the nodes talk through a faulty network (loss, duplication, reordering, delays,
//! symmetric and one-way partitions, healing; [`net`]); nodes crash — alone (the
//! leader half the time), all at once (a power failure), inside `process` or a
//! compaction, around a snapshot installation — and restart from crash images that
//! the crash simulator's line model allows, with a random cut of the lines in flight
//! ([`pmem`]) — a WAL node from the files its calls left, cut inside its last call
//! under a file-level model (fsynced bytes stay, a prefix of later writes may, renames
//! may be lost until the directory is fsynced: [`wal`]); clients issue get / set / compare-and-set / delete to whichever node
//! they believe leads, follow redirections and time out ([`clients`]), and their
//! requests and replies are lost on the way now and then. Leaders are asked for
//! leadership transfers; about a quarter of the seeds serve lease reads; in half of
//! them two spare nodes wait beside the founders and the leader is asked, at random
//! steps, to add a learner, promote one (through a joint configuration), remove a
//! follower, the leader itself or a learner ([`reconfig`]; a node whose removal
//! committed is retired for good). In about a fifth of them forged peers inject
//! messages no correct node sends ([`forge`]: huge terms and indexes, garbage
//! configuration entries, oversized keys, bogus snapshot metadata, strangers'
//! messages, answers about what never was); the invalid ones must fail
//! validation and, handed to a replica all the same, change nothing. After every
//! step [`checks`] verifies election safety, log matching, state-machine safety,
//! leader completeness and the durable hard state. At the end the network heals, the
//! cluster settles, every key is read once more through the leader, every replica
//! must hold the same state (the replay of the committed log), and the whole client
//! history must be linearizable ([`raft_nvm::linearizability`]). A failing seed's
//! report ends with its recent events ([`events`]); [`stats`] counts what happened,
//! and a run of 50 seeds or more fails unless the replay check ran in most seeds
//! with list nodes and in most with WAL nodes, and every kind of fault (list crash,
//! WAL crash, torn WAL write, snapshot installation on either engine, full pool,
//! completed transfer, lease read, and each kind of membership change committed)
//! happened in at least one seed in fifty (forgery too, with some invalid
//! messages past the simulated transport and some strangers'); the replay check (which then covers the
//! stored configuration too) must have run in most seeds with membership changes.
//!
//! Environment:
//! * `CLUSTER_SEEDS=N` runs seeds `0..N` (default [`DEFAULT_SEEDS`]; `CLUSTER_FIRST_SEED`
//!   moves the start), on `CLUSTER_THREADS` threads (default: all cores).
//! * `CLUSTER_SEED=S` runs only seed `S`; `CLUSTER_TRACE=1` prints every event live.
//! * `CLUSTER_KEEP_GOING=1` runs every seed instead of stopping at the first failure,
//!   and lists the failing ones (to measure how often a bug is caught).
//!
//! A failing seed prints `CLUSTER_SEED=<seed>`, its parameters and its last events, and
//! reproduces exactly with `CLUSTER_SEED=<seed> cargo test -p raft-nvm --test cluster_sim`
//! (a seed's run depends on nothing but the seed: [`a_seed_replays_exactly`]).
//!
//! Cost: the default [`DEFAULT_SEEDS`] take about 10 s on two cores in a debug build;
//! CI runs 3000 more in release (`.ci/run`: about 100 s on two cores).

#[path = "cluster_sim/checks.rs"]
mod checks;
#[path = "cluster_sim/clients.rs"]
mod clients;
#[path = "cluster_sim/cluster.rs"]
mod cluster;
#[path = "cluster_sim/events.rs"]
mod events;
#[path = "cluster_sim/forge.rs"]
mod forge;
#[path = "cluster_sim/net.rs"]
mod net;
#[path = "cluster_sim/params.rs"]
mod params;
#[path = "cluster_sim/pmem.rs"]
mod pmem;
#[path = "cluster_sim/reconfig.rs"]
mod reconfig;
#[path = "common/rng.rs"]
mod rng;
#[path = "cluster_sim/stats.rs"]
mod stats;
#[path = "cluster_sim/wal.rs"]
mod wal;

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use cluster::Cluster;
use stats::Stats;

/// Seeds run by a plain `cargo test` (debug build).
const DEFAULT_SEEDS: u64 = 400;

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v}: not a number"))
    })
}

/// Runs seed `seed` to the end; panics on a violation. Returns the counts and a
/// digest of the client history.
fn run_seed(seed: u64) -> (Stats, u64) {
    events::clear();
    let mut c = Cluster::new(seed);
    events::record(0, events::Ev::Phase("faults"));
    let steps = c.params().steps;
    for _ in 0..steps {
        c.step(true);
    }
    c.settle();
    c.finish();
    (c.stats, c.fingerprint())
}

/// A failure: the seed, what failed, the parameters and the recent events.
struct Failure {
    seed: u64,
    report: String,
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(non-string panic)".into())
}

fn run_guarded(seed: u64) -> Result<Stats, Failure> {
    std::panic::catch_unwind(AssertUnwindSafe(|| run_seed(seed).0)).map_err(|p| {
        let params = {
            let mut rng = rng::seeded(seed);
            format!("{:?}", params::Params::for_seed(seed, &mut rng))
        };
        Failure {
            seed,
            report: format!(
                "CLUSTER_SEED={seed}\n{}\nparameters: {params}\nlast events:\n{}",
                panic_message(&*p),
                events::recent()
            ),
        }
    })
}

#[test]
fn clusters_stay_safe_and_linearizable_under_faults() {
    let started = Instant::now();
    if let Some(seed) = env("CLUSTER_SEED") {
        match run_guarded(seed) {
            Ok(s) => eprintln!("seed {seed} passed in {:?}: {s:?}", started.elapsed()),
            Err(f) => {
                eprintln!("{}", f.report);
                panic!("CLUSTER_SEED={seed} failed");
            }
        }
        return;
    }
    let seeds = env("CLUSTER_SEEDS").unwrap_or(DEFAULT_SEEDS);
    let keep_going = env("CLUSTER_KEEP_GOING").is_some_and(|k| k != 0);
    let first = env("CLUSTER_FIRST_SEED").unwrap_or(0);
    let threads = env("CLUSTER_THREADS")
        .map(|t| t as usize)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
        .max(1);
    let next = AtomicU64::new(first);
    let stop = AtomicBool::new(false);
    let total = Mutex::new((Stats::default(), 0u64));
    let slowest: Mutex<Vec<(std::time::Duration, u64)>> = Mutex::new(Vec::new());
    let failures: Mutex<Vec<Failure>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= first + seeds {
                    return;
                }
                let t = Instant::now();
                let result = run_guarded(seed);
                {
                    let mut s = slowest.lock().unwrap_or_else(|p| p.into_inner());
                    s.push((t.elapsed(), seed));
                    s.sort_by(|a, b| b.cmp(a));
                    s.truncate(3);
                }
                match result {
                    Ok(st) => {
                        let mut t = total.lock().unwrap_or_else(|p| p.into_inner());
                        t.0.add(&st);
                        t.1 += 1;
                    }
                    Err(f) => {
                        stop.store(!keep_going, Ordering::Relaxed);
                        failures.lock().unwrap_or_else(|p| p.into_inner()).push(f);
                    }
                }
            });
        }
    });
    let (stats, passed) = total.into_inner().unwrap_or_else(|p| p.into_inner());
    let mut failures = failures.into_inner().unwrap_or_else(|p| p.into_inner());
    let slowest = slowest.into_inner().unwrap_or_else(|p| p.into_inner());
    eprintln!(
        "cluster_sim: {passed} seeds passed in {:.1?} on {threads} threads \
         (slowest: {slowest:.1?}): {stats:?}",
        started.elapsed()
    );
    eprintln!(
        "cluster_sim coverage: {} seeds; replay check ran in {} of {} with list nodes, \
         {} of {} with WAL nodes; seeds with a list crash {}, a WAL crash {} (torn {}), \
         a list install {}, a WAL install {}, a full pool {}, a completed leadership \
         transfer {} ({} of {} transfers asked completed), leases on {} (lease reads served \
         in {}: {})",
        stats.seeds,
        stats.replay_list,
        stats.seeds_list,
        stats.replay_wal,
        stats.seeds_wal,
        stats.seeds_list_crash,
        stats.seeds_wal_crash,
        stats.seeds_wal_torn,
        stats.seeds_list_install,
        stats.seeds_wal_install,
        stats.seeds_pool_full,
        stats.seeds_transfer,
        stats.transfers_done,
        stats.transfers_asked,
        stats.seeds_lease,
        stats.seeds_lease_served,
        stats.lease_reads
    );
    eprintln!(
        "cluster_sim membership: changes on in {} seeds (replay check ran in {}); {} asked, \
         {} refused at once; committed: {} learners added ({} seeds), {} promotions ({}), \
         {} voters removed ({}), {} leaders removed ({}), {} learners removed; {} reads \
         served by learners ({} seeds)",
        stats.seeds_reconfig,
        stats.replay_reconfig,
        stats.membership_asked,
        stats.membership_refused,
        stats.learners_added,
        stats.seeds_learner_added,
        stats.promotions,
        stats.seeds_promoted,
        stats.voters_removed,
        stats.seeds_voter_removed,
        stats.leaders_removed,
        stats.seeds_leader_removed,
        stats.learners_removed,
        stats.learner_reads,
        stats.seeds_learner_read
    );
    eprintln!(
        "cluster_sim forged peers: on in {} seeds; {} messages forged, {} invalid (all \
         refused by validation, {} of them handed to a replica all the same), {} from \
         strangers",
        stats.seeds_forged,
        stats.forged,
        stats.forged_invalid,
        stats.forged_past_transport,
        stats.forged_strangers
    );
    failures.sort_by_key(|f| f.seed);
    if failures.len() > 1 {
        let seeds: Vec<u64> = failures.iter().map(|f| f.seed).collect();
        eprintln!("{} failing seeds: {seeds:?}", seeds.len());
    }
    if let Some(f) = failures.first() {
        eprintln!("{}", f.report);
        panic!(
            "CLUSTER_SEED={} failed (rerun: CLUSTER_SEED={} cargo test -p raft-nvm --test cluster_sim)",
            f.seed, f.seed
        );
    }
    if seeds >= 50 {
        assert!(stats.crashes > 0 && stats.power_failures > 0, "crashes ran");
        assert!(stats.snapshots_installed > 0, "some snapshot was installed");
        assert!(
            stats.entries_from_store > 0,
            "some follower was fed from a leader's store"
        );
        assert!(
            stats.deferred_log_reads > 0,
            "some leader spread its log reads over several processes"
        );
        assert!(stats.mid_process_crashes > 0 && stats.install_crashes > 0);
        assert!(
            stats.deferred_syncs > 0 && stats.mid_sync_crashes > 0,
            "replicas left syncs to the driver, and some node crashed inside one"
        );
        assert!(stats.ops_ok > 0 && stats.ops_unknown > 0, "clients ran");
        assert!(
            stats.ops_via_machine * 5 > stats.ops_ok,
            "the state machine path served too few requests: {} of {} answered",
            stats.ops_via_machine,
            stats.ops_ok
        );
        assert!(
            stats.client_requests_lost > 0 && stats.client_replies_lost > 0,
            "client links lost requests and replies"
        );
        assert!(stats.compactions > 0 && stats.rebases > 0);
        assert!(
            stats.forged_invalid > 0 && stats.forged_past_transport > 0 && stats.forged_strangers > 0,
            "forged peers: invalid messages refused by the transport and by the core, and strangers'"
        );
        // The end-of-run check that the state is the replay of the committed log
        // only means something where it ran: in most seeds, on either engine.
        assert!(
            stats.replay_list * 2 > stats.seeds_list,
            "the replay check ran in only {} of {} seeds with list nodes",
            stats.replay_list,
            stats.seeds_list
        );
        assert!(
            stats.replay_wal * 2 > stats.seeds_wal,
            "the replay check ran in only {} of {} seeds with WAL nodes",
            stats.replay_wal,
            stats.seeds_wal
        );
        assert!(
            stats.replay_reconfig * 2 > stats.seeds_reconfig,
            "the replay check ran in only {} of {} seeds with membership changes",
            stats.replay_reconfig,
            stats.seeds_reconfig
        );
        // Every kind of fault happened in a fair share of the seeds.
        let share = (stats.seeds / 50).max(1);
        for (what, n) in [
            ("a list node crashed", stats.seeds_list_crash),
            ("a WAL node crashed", stats.seeds_wal_crash),
            ("a WAL crash image was torn mid-write", stats.seeds_wal_torn),
            ("a list node installed a snapshot", stats.seeds_list_install),
            ("a WAL node installed a snapshot", stats.seeds_wal_install),
            ("a pool was full", stats.seeds_pool_full),
            ("a leadership transfer completed", stats.seeds_transfer),
            (
                "a read was served from a leader lease",
                stats.seeds_lease_served,
            ),
            ("a learner was added", stats.seeds_learner_added),
            ("a learner was promoted", stats.seeds_promoted),
            ("a follower was removed", stats.seeds_voter_removed),
            ("the leader was removed", stats.seeds_leader_removed),
            ("a learner served a read", stats.seeds_learner_read),
            ("forged peers sent messages", stats.seeds_forged),
        ] {
            assert!(
                n >= share,
                "coverage: {what} in only {n} of {} seeds",
                stats.seeds
            );
        }
    }
}

#[test]
fn a_seed_replays_exactly() {
    for seed in [3, 11] {
        let a = run_seed(seed);
        let b = std::thread::spawn(move || run_seed(seed))
            .join()
            .expect("the seed passes");
        assert_eq!(
            format!("{a:?}"),
            format!("{b:?}"),
            "seed {seed} ran differently the second time (on another thread)"
        );
    }
}
