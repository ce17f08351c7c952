//! The crash simulator (cargo feature `sim`): a simulated persistence domain that
//! follows the x86 persistency model, so any structure built on [`crate::Pool`] can be
//! crash-tested.
//!
//! * [`Pool::simulated`](crate::Pool::simulated) gives a pool whose stores (through the
//!   write API at store granularity; through references at the granularity of
//!   persistence events), flushes and fences a [`SimDomain`] records, each with the
//!   caller's source location.
//! * [`CrashState`] holds what may survive a crash at one point under a [`Model`]
//!   (line, word or eADR), counts the crash images exactly, and materialises them;
//!   [`Budget`] chooses them: exhaustive under the budget, otherwise k-bounded and
//!   seeded-random samples that always include "nothing more persisted" and
//!   "everything persisted".
//! * [`CrashTest`] runs a workload, crashes it at every [`CrashPoints`], recovers
//!   each image with the caller's recovery, checks it with the caller's checker (or
//!   the model oracle [`CrashInfo::expect_model`]), and crashes the recovery again.
//! * [`lint`] finds missing flushes and fences, ranges not durable at the end of an
//!   operation, redundant flushes and empty fences, in one pass.
//! * Under [`Model::Eadr`] the harness's pools are in the
//!   [`crate::PersistenceDomain::CpuCache`] domain: the code under test elides its
//!   flushes exactly as it would on an eADR machine (none is recorded), the images
//!   are prefixes of the store order, and [`lint_model`] asks for fences, not
//!   flushes. Passing there is the proof that eliding flushes is correct on eADR.
//! * [`strategy`] has the proptest strategies for crash points and cuts.
//! * [`Reached`] emulates the FFCCD paper's reached bitmap from a cut, for code
//!   that relocates data without flushing ([`crate::Pool::relocate_bytes_shared`]).
//!
//! Without the feature none of this is compiled and pools carry no hook.

mod domain;
mod event;
mod harness;
mod image;
mod lint;
mod model;
mod pools;
mod reached;
mod select;
pub mod selftest;
pub mod strategy;
mod trace;

pub(crate) use domain::domain_at;
pub use domain::{SimDomain, DEFAULT_MAX_EVENTS};
pub use event::{Event, EventKind, FlushOp, Loc};
pub use harness::{CrashFailure, CrashInfo, CrashTest, Report};
pub use image::Image;
pub use lint::{lint, lint_model, Lint, LintKind};
pub use model::{CrashState, Cut, InFlight, Model, ModelMutant, MAX_GROUP};
pub use reached::Reached;
pub use select::{Budget, Selection};
pub use trace::{CrashPoints, OpsAt, Trace};
