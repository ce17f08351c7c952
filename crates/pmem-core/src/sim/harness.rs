//! The crash-test harness: run a workload on a simulated pool, crash it at every
//! crash point, materialise the crash images, run the caller's recovery on each,
//! then the caller's checker, and — for a sample of images — crash the recovery
//! itself and recover again (recovery must be idempotent).
//!
//! ```
//! use pmem_core::sim::{CrashTest, CrashInfo};
//! use pmem_core::{PPtr, Pool, PoolOptions};
//!
//! // A counter that is incremented and persisted three times.
//! let test = CrashTest::new(PoolOptions::new("counter", 16 * 1024).root::<u64>());
//! let report = test
//!     .run(
//!         |_pool| Ok(()),
//!         |mut pool, sim| {
//!             let root = pool.root::<u64>().map_err(|e| e.to_string())?;
//!             for n in 0..3u32 {
//!                 sim.op(n, || -> Result<(), String> {
//!                     let v = pool.read(root).map_err(|e| e.to_string())?;
//!                     pool.write(root, &(v + 1)).map_err(|e| e.to_string())?;
//!                     pool.persist_ptr(root).map_err(|e| e.to_string())
//!                 })?;
//!             }
//!             Ok(())
//!         },
//!         |pool| pool.read(pool.root::<u64>().map_err(|e| e.to_string())?).map_err(|e| e.to_string()),
//!         |value: &u64, crash: &CrashInfo| crash.expect_model(value, |ops| ops as u64),
//!     )
//!     .expect("the counter survives every crash");
//! assert!(report.images_checked > 0);
//! ```

use std::collections::HashSet;
use std::fmt;
use std::hash::{Hash, Hasher};

use super::domain::SimDomain;
use super::event::EventKind;
use super::image::{ImageBase, Lines};
use super::lint::{lint_model, Lint};
use super::model::{CrashState, Cut, Model};
use super::select::Budget;
use super::trace::{CrashPoints, Trace};
use crate::pool::{DomainSource, PersistenceDomain};
use crate::{Pool, PoolOptions};

/// What the checker is told about the crash it is looking at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrashInfo {
    /// Index of the crash point among the trace's crash points.
    pub point_index: usize,
    /// Number of crash points.
    pub points: usize,
    /// Events that happened before the crash.
    pub events_before: usize,
    /// Number of operations that completed (ended) before the crash.
    pub completed_ops: u32,
    /// The operations that completed, in the order they ended.
    pub completed: Vec<u32>,
    /// The operations begun and not ended, in the order they began (several when
    /// threads overlap their operations).
    pub in_flight: Vec<u32>,
    /// Whether this image comes from a second crash, during recovery.
    pub second_crash: bool,
}

impl CrashInfo {
    /// The crash before the `pi`-th of `points` in `trace` (a first crash).
    fn at(trace: &Trace, points: &[usize], pi: usize) -> CrashInfo {
        let ops = trace.ops_at(points[pi]);
        CrashInfo {
            point_index: pi,
            points: points.len(),
            events_before: points[pi],
            completed_ops: ops.completed.len() as u32,
            completed: ops.completed,
            in_flight: ops.in_flight,
            second_crash: false,
        }
    }

    /// The model oracle for operations numbered `0, 1, 2, ...` and run one at a
    /// time: `observed` must equal the model after the completed operations, or —
    /// if an operation was in flight — after it too.
    pub fn expect_model<M: PartialEq + fmt::Debug>(
        &self,
        observed: &M,
        model_after: impl Fn(u32) -> M,
    ) -> Result<(), String> {
        let before = model_after(self.completed_ops);
        if *observed == before {
            return Ok(());
        }
        if !self.in_flight.is_empty() {
            let after = model_after(self.completed_ops + 1);
            if *observed == after {
                return Ok(());
            }
            return Err(format!(
                "recovered {observed:?}; expected {before:?} (before the in-flight op) or {after:?} (after it)"
            ));
        }
        Err(format!("recovered {observed:?}; expected {before:?}"))
    }

    /// The model oracle for concurrent operations: `observed` must equal
    /// `model_of(ops)` where `ops` lists the completed operations (in the order they
    /// ended) followed by some subset of the in-flight ones (in the order they
    /// began): each in-flight operation applied whole or not at all. At most
    /// [`CrashInfo::MAX_IN_FLIGHT`] operations may be in flight.
    pub fn expect_model_ops<M: PartialEq + fmt::Debug>(
        &self,
        observed: &M,
        model_of: impl Fn(&[u32]) -> M,
    ) -> Result<(), String> {
        let k = self.in_flight.len();
        if k > Self::MAX_IN_FLIGHT {
            return Err(format!(
                "{k} operations in flight; the oracle enumerates at most {}",
                Self::MAX_IN_FLIGHT
            ));
        }
        let mut ops = self.completed.clone();
        for mask in 0u32..(1 << k) {
            ops.truncate(self.completed.len());
            ops.extend(
                self.in_flight
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mask & (1 << i) != 0)
                    .map(|(_, &n)| n),
            );
            if model_of(&ops) == *observed {
                return Ok(());
            }
        }
        Err(format!(
            "recovered {observed:?}; expected the model after ops {:?} plus a subset of {:?}, e.g. {:?}",
            self.completed,
            self.in_flight,
            model_of(&self.completed)
        ))
    }

    /// Most in-flight operations [`CrashInfo::expect_model_ops`] enumerates.
    pub const MAX_IN_FLIGHT: usize = 12;
}

/// A failed crash test: what the checker (or recovery, or a lint) said, and the
/// witness that reproduces it.
#[derive(Clone, Debug)]
pub struct CrashFailure {
    /// The checker's or recovery's message.
    pub message: String,
    /// Crash point, operations, kept and lost stores, recent events.
    pub witness: String,
}

impl fmt::Display for CrashFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "crash test failed: {}\n{}", self.message, self.witness)
    }
}

impl std::error::Error for CrashFailure {}

/// What a passing run covered.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Events recorded by the workload.
    pub events: usize,
    /// Crash points visited.
    pub crash_points: usize,
    /// Crash points whose images were enumerated exhaustively.
    pub exhaustive_points: usize,
    /// Distinct images recovered and checked (first crashes).
    pub images_checked: u64,
    /// Distinct images recovered and checked after a second crash in recovery.
    pub second_crash_images: u64,
    /// Sum over crash points of the exact number of cuts (saturating).
    pub cuts_total: u128,
    /// Lints of the workload's trace.
    pub lints: Vec<Lint>,
}

/// A crash test: the pool, the model, where to crash and how many images to check.
#[derive(Clone, Debug)]
pub struct CrashTest {
    opts: PoolOptions,
    model: Model,
    points: CrashPoints,
    budget: Budget,
    recovery_budget: Budget,
    idempotence_every: usize,
    deny_lints: bool,
}

type Recover<'a, T> = &'a dyn Fn(Pool) -> Result<T, String>;
type Check<'a, T> = &'a dyn Fn(&T, &CrashInfo) -> Result<(), String>;

impl CrashTest {
    /// A crash test of a pool created with `opts`. Defaults: line model, a crash
    /// wherever the durable set can change ([`CrashPoints::Durable`]), [`Budget::from_env`], idempotence checked on every 8th
    /// image, correctness lints fail the test.
    pub fn new(opts: PoolOptions) -> CrashTest {
        CrashTest {
            opts,
            model: Model::Line,
            points: CrashPoints::Durable,
            budget: Budget::from_env(),
            recovery_budget: Budget {
                exhaustive_up_to: 16,
                k: 1,
                random: 4,
                seed: 7,
            },
            idempotence_every: 8,
            deny_lints: true,
        }
    }

    /// The persistency model. It also chooses the simulated pools' persistence
    /// domain, unless the pool options request one: [`Model::Eadr`] gives
    /// [`PersistenceDomain::CpuCache`], so the code under test (and its recovery)
    /// elides its flushes and the crash images prove it correct without them; the
    /// line and word models give [`PersistenceDomain::MemoryController`].
    pub fn model(mut self, model: Model) -> Self {
        self.model = model;
        self
    }

    /// Where to crash.
    pub fn crash_points(mut self, points: CrashPoints) -> Self {
        self.points = points;
        self
    }

    /// Images per crash point.
    pub fn budget(mut self, budget: Budget) -> Self {
        self.budget = budget;
        self
    }

    /// Images per crash point of a recovery (second crash).
    pub fn recovery_budget(mut self, budget: Budget) -> Self {
        self.recovery_budget = budget;
        self
    }

    /// Check idempotence (crash during recovery, recover again) on every `n`-th
    /// image of each crash point; 0 turns it off.
    pub fn idempotence_every(mut self, n: usize) -> Self {
        self.idempotence_every = n;
        self
    }

    /// Whether correctness lints fail the test (default true).
    pub fn deny_correctness_lints(mut self, deny: bool) -> Self {
        self.deny_lints = deny;
        self
    }

    /// The persistence domain of the simulated pools: the options' request, or the
    /// model's.
    fn domain(&self) -> (PersistenceDomain, DomainSource) {
        match (self.opts.domain, self.model) {
            (Some(d), _) => (d, DomainSource::Requested),
            (None, Model::Eadr) => (PersistenceDomain::CpuCache, DomainSource::Simulated),
            (None, Model::Line | Model::Word) => {
                (PersistenceDomain::MemoryController, DomainSource::Simulated)
            }
        }
    }

    /// A pool of a crash image (recording or not), in this test's domain.
    fn with_domain(&self, mut pool: Pool) -> Pool {
        let (d, source) = self.domain();
        pool.set_domain(d, source);
        pool
    }

    /// Runs `setup` on a fresh simulated pool (its result is the durable base), then
    /// `workload`, and returns the trace.
    pub fn record(
        &self,
        setup: impl FnOnce(&mut Pool) -> Result<(), String>,
        workload: impl FnOnce(Pool, &SimDomain) -> Result<(), String>,
    ) -> Result<Trace, CrashFailure> {
        let fail = |message: String| CrashFailure {
            message,
            witness: String::new(),
        };
        let (pool, sim) =
            Pool::simulated(&self.opts).map_err(|e| fail(format!("simulated pool: {e}")))?;
        let mut pool = self.with_domain(pool);
        setup(&mut pool).map_err(|e| fail(format!("setup failed: {e}")))?;
        sim.mark_durable();
        workload(pool, &sim).map_err(|e| fail(format!("workload failed: {e}")))?;
        let trace = sim.trace();
        if trace.overflowed {
            return Err(fail(format!(
                "trace overflowed at {} events",
                trace.events.len()
            )));
        }
        Ok(trace)
    }

    /// Records the workload, then checks every selected crash image.
    pub fn run<T>(
        &self,
        setup: impl FnOnce(&mut Pool) -> Result<(), String>,
        workload: impl FnOnce(Pool, &SimDomain) -> Result<(), String>,
        recover: impl Fn(Pool) -> Result<T, String>,
        check: impl Fn(&T, &CrashInfo) -> Result<(), String>,
    ) -> Result<Report, CrashFailure> {
        let trace = self.record(setup, workload)?;
        self.check_trace(&trace, &recover, &check)
    }

    /// Checks the crash images of a recorded trace.
    pub fn check_trace<T>(
        &self,
        trace: &Trace,
        recover: &dyn Fn(Pool) -> Result<T, String>,
        check: &dyn Fn(&T, &CrashInfo) -> Result<(), String>,
    ) -> Result<Report, CrashFailure> {
        let lints = self.lint_gate(trace)?;
        let points = trace.crash_points(self.points);
        let mut report = Report {
            events: trace.events.len(),
            lints,
            ..Report::default()
        };
        let base = ImageBase::new(&trace.base);
        let tracks = tracks_relocation(trace);
        for (pi, &point) in points.iter().enumerate() {
            let state = CrashState::new(trace, point, self.model);
            let selection = state.select(&self.budget);
            report.crash_points += 1;
            report.cuts_total = report.cuts_total.saturating_add(selection.count);
            report.exhaustive_points += usize::from(selection.exhaustive);
            let info = CrashInfo::at(trace, &points, pi);
            let mut seen = HashSet::new();
            for (ci, cut) in selection.cuts.iter().enumerate() {
                let lines = state.image_lines(cut);
                if !seen.insert(hash_lines(&lines)) {
                    continue;
                }
                let ctx = Ctx {
                    trace,
                    tracks,
                    state: &state,
                    cut,
                    selection_len: selection.cuts.len(),
                    ci,
                    exhaustive: selection.exhaustive,
                };
                self.check_image(&base, &lines, &info, &ctx, recover, check)?;
                report.images_checked += 1;
                if self.idempotence_every > 0 && ci % self.idempotence_every == 0 {
                    report.second_crash_images +=
                        self.check_second_crash(&base, &lines, &info, &ctx, recover, check)?;
                }
            }
        }
        Ok(report)
    }

    /// Checks crashes chosen by proptest selectors ([`super::strategy`]): every
    /// crash point up to index `point` (clamped to the last), each with the cut
    /// where, for each `(unit, keep)`, in-flight unit number `unit` (wrapped) keeps
    /// only `keep` of its stores beyond its durable bound (clamped so it loses at
    /// least one); the earliest failure is reported.
    ///
    /// Checking every point up to `point` makes failure monotone in `point` and
    /// stable when a later operation is dropped, and `keep` shrinks toward zero,
    /// the most adversarial cut, so shrinking only makes a failure likelier: proptest
    /// ends at few operations, few deviating units, and a witness at the earliest
    /// failing crash point. Put the selectors *before* the operations in the strategy
    /// tuple, so they shrink first.
    pub fn check_case<T>(
        &self,
        trace: &Trace,
        point: usize,
        deviations: &[(usize, usize)],
        recover: &dyn Fn(Pool) -> Result<T, String>,
        check: &dyn Fn(&T, &CrashInfo) -> Result<(), String>,
    ) -> Result<(), CrashFailure> {
        self.lint_gate(trace)?;
        let points = trace.crash_points(self.points);
        let last = point.min(points.len() - 1);
        let base = ImageBase::new(&trace.base);
        let tracks = tracks_relocation(trace);
        for (pi, &at) in points.iter().enumerate().take(last + 1) {
            let state = CrashState::new(trace, at, self.model);
            let mut cut = state.maximal();
            let units = state.in_flight();
            if !units.is_empty() {
                for &(unit, keep) in deviations {
                    let u = unit % units.len();
                    cut[u] = units[u].durable + keep.min(units[u].choices() - 2);
                }
            }
            let info = CrashInfo::at(trace, &points, pi);
            let lines = state.image_lines(&cut);
            let ctx = Ctx {
                trace,
                tracks,
                state: &state,
                cut: &cut,
                selection_len: 1,
                ci: 0,
                exhaustive: false,
            };
            self.check_image(&base, &lines, &info, &ctx, recover, check)?;
            if self.idempotence_every > 0 {
                self.check_second_crash(&base, &lines, &info, &ctx, recover, check)?;
            }
        }
        Ok(())
    }

    /// Lints the trace; a correctness lint fails the test unless lints are allowed.
    fn lint_gate(&self, trace: &Trace) -> Result<Vec<Lint>, CrashFailure> {
        let lints = lint_model(trace, self.model);
        if self.deny_lints {
            if let Some(l) = lints.iter().find(|l| l.kind.is_correctness()) {
                return Err(CrashFailure {
                    message: format!("correctness lint: {l}"),
                    witness: recent_events(trace, trace.events.len()),
                });
            }
        }
        Ok(lints)
    }

    fn check_image<T>(
        &self,
        base: &ImageBase<'_>,
        lines: &Lines,
        info: &CrashInfo,
        ctx: &Ctx<'_>,
        recover: Recover<'_, T>,
        check: Check<'_, T>,
    ) -> Result<(), CrashFailure> {
        let mut pool = Pool::from_base_lines(base, lines)
            .map(|p| self.with_domain(p))
            .map_err(|e| ctx.failure(info, format!("crash image is not a pool: {e}"), None))?;
        if ctx.tracks {
            pool = pool.with_reached(ctx.state.reached(ctx.cut));
        }
        let recovered =
            recover(pool).map_err(|e| ctx.failure(info, format!("recovery failed: {e}"), None))?;
        check(&recovered, info).map_err(|e| ctx.failure(info, e, None))
    }

    /// Crashes the recovery of an image at its crash points and checks each second
    /// image (the base with the first image's lines, then the recovery's, over it).
    fn check_second_crash<T>(
        &self,
        base: &ImageBase<'_>,
        lines: &Lines,
        info: &CrashInfo,
        ctx: &Ctx<'_>,
        recover: Recover<'_, T>,
        check: Check<'_, T>,
    ) -> Result<u64, CrashFailure> {
        let (pool, sim) = Pool::simulated_from_base_lines(base, lines)
            .map_err(|e| ctx.failure(info, format!("crash image is not a pool: {e}"), None))?;
        let mut pool = self.with_domain(pool);
        let first = ctx.tracks.then(|| ctx.state.reached(ctx.cut));
        if let Some(r) = &first {
            pool = pool.with_reached(r.clone());
        }
        recover(pool).map_err(|e| ctx.failure(info, format!("recovery failed: {e}"), None))?;
        let rtrace = sim.trace();
        let tracks = first.is_some() || tracks_relocation(&rtrace);
        let second = CrashInfo {
            second_crash: true,
            ..info.clone()
        };
        let mut checked = 0;
        let mut seen = HashSet::new();
        for point in rtrace.crash_points(CrashPoints::Durable) {
            let rstate = CrashState::new(&rtrace, point, self.model);
            for cut in rstate.select(&self.recovery_budget).cuts {
                let mut lines2 = lines.clone();
                lines2.extend(rstate.image_lines(&cut));
                if !seen.insert(hash_lines(&lines2)) {
                    continue;
                }
                let during = || {
                    format!(
                        "second crash during recovery, before recovery event #{point} of {}; deviations:\n{}",
                        rtrace.events.len(),
                        indent(&rstate.describe(&cut))
                    )
                };
                let mut pool = Pool::from_base_lines(base, &lines2)
                    .map(|p| self.with_domain(p))
                    .map_err(|e| {
                        ctx.failure(info, format!("image is not a pool: {e}"), Some(during()))
                    })?;
                if tracks {
                    // The bitmap is persistent: the first crash's carries over.
                    let later = rstate.reached(&cut);
                    pool = pool.with_reached(match &first {
                        Some(r) => r.then(&later),
                        None => later,
                    });
                }
                let recovered = recover(pool).map_err(|e| {
                    ctx.failure(info, format!("second recovery failed: {e}"), Some(during()))
                })?;
                check(&recovered, &second).map_err(|e| ctx.failure(info, e, Some(during())))?;
                checked += 1;
            }
        }
        Ok(checked)
    }
}

/// Where a failure happened, for its witness.
struct Ctx<'a> {
    trace: &'a Trace,
    /// The trace records relocations: image pools get the reached bitmap.
    tracks: bool,
    state: &'a CrashState<'a>,
    cut: &'a Cut,
    selection_len: usize,
    ci: usize,
    exhaustive: bool,
}

impl Ctx<'_> {
    fn failure(&self, info: &CrashInfo, message: String, second: Option<String>) -> CrashFailure {
        let mut w = String::new();
        let at = match self.trace.events.get(info.events_before) {
            Some(e) => format!("before event #{} {e}", info.events_before),
            None => format!("at the end of the workload ({} events)", info.events_before),
        };
        w.push_str(&format!(
            "  crash point {} of {}: {at}\n",
            info.point_index + 1,
            info.points
        ));
        w.push_str(&format!(
            "  operations: {} completed, in flight: {}\n",
            info.completed_ops,
            if info.in_flight.is_empty() {
                "none".to_owned()
            } else {
                format!("{:?}", info.in_flight)
            }
        ));
        let deviations = self.state.describe(self.cut);
        w.push_str(&format!(
            "  image {} of {} ({}, {:?} model); {}\n",
            self.ci + 1,
            self.selection_len,
            if self.exhaustive {
                "exhaustive"
            } else {
                "sampled"
            },
            self.state.model(),
            if deviations.is_empty() {
                "everything persisted".to_owned()
            } else {
                format!(
                    "deviations from \"everything persisted\":\n{}",
                    indent(&deviations)
                )
            }
        ));
        if let Some(s) = second {
            w.push_str(&format!("  {s}\n"));
        }
        w.push_str(&recent_events(self.trace, info.events_before));
        CrashFailure {
            message,
            witness: w,
        }
    }
}

fn indent(lines: &[String]) -> String {
    lines
        .iter()
        .map(|l| format!("    - {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn recent_events(trace: &Trace, before: usize) -> String {
    let from = before.saturating_sub(8);
    let mut s = String::from("  last events before the crash:\n");
    for (i, e) in trace.events.iter().enumerate().take(before).skip(from) {
        s.push_str(&format!("    #{i} {e}\n"));
    }
    s
}

/// Whether the trace was recorded with the reached bitmap emulated (it holds a
/// relocation or a reset of the bitmap).
fn tracks_relocation(trace: &Trace) -> bool {
    trace
        .events
        .iter()
        .any(|e| matches!(e.kind, EventKind::Relocate { .. } | EventKind::ReachedReset))
}

/// A hash of an image's touched lines: at one crash point every image touches the
/// same lines, so equal hashes mean (barring collisions) equal images.
fn hash_lines(lines: &Lines) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    lines.hash(&mut h);
    h.finish()
}
