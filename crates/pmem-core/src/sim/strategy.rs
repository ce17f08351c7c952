//! proptest strategies for crash injection.
//!
//! A test generates its operations with its own strategy, records them with
//! [`super::CrashTest::record`], and lets these strategies pick the crash for
//! [`super::CrashTest::check_case`]. The selectors are plain indices counted from the
//! start of the trace, so they keep their meaning when proptest removes a later
//! operation. Put them before the operations in the strategy tuple: proptest then
//! shrinks the crash point (toward the first), the deviations (toward the fewest
//! lost units) and then the operations, so a failing case ends as a small witness.

use proptest::collection::vec;
use proptest::prelude::*;

/// Upper bound of the selectors (crash points and units beyond it are reached by
/// clamping and wrapping).
pub const SELECTOR_MAX: usize = 256;

/// Picks a crash point: its index among the trace's crash points, clamped.
pub fn crash_point() -> impl Strategy<Value = usize> {
    0..SELECTOR_MAX
}

/// Picks up to `max` in-flight units (index, wrapped), each with how many of its
/// non-durable stores it keeps (clamped so it loses at least one; shrinks toward
/// keeping none).
pub fn deviations(max: usize) -> impl Strategy<Value = Vec<(usize, usize)>> {
    vec((0..SELECTOR_MAX, 0..SELECTOR_MAX), 0..=max)
}
