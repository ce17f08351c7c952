//! The STREAM triad (McCalpin; the AMF paper's §5 and Figure 16 run STREAM on
//! arrays from its own "mmap" interface): `a[i] = b[i] + q * c[i]` over three
//! `f64` slices, timed per repetition and counted as STREAM counts the triad,
//! 3 × 8 = 24 bytes per element (two reads, one write; write-allocate traffic not
//! counted).
//!
//! [`init`] gives the arrays STREAM-like constants (`a = 1`, `b = 2`, `c = 1`)
//! and touches every page before timing; the triad leaves `b` and `c` unchanged,
//! so after any number of repetitions `a = 2 + 3 × 1 = 5` everywhere, which
//! [`check`] verifies with STREAM's own test (average absolute error relative to
//! the expected value below `1e-13`) and element by element. STREAM's rule wants
//! each array at least four times the last-level cache.

use std::time::Instant;

use thiserror::Error;

/// STREAM's scalar `q`.
pub const SCALAR: f64 = 3.0;
/// The initial value of `a`.
const A0: f64 = 1.0;
/// The value of `b`.
const B0: f64 = 2.0;
/// The value of `c`.
const C0: f64 = 1.0;
/// STREAM's tolerance for `f64`.
const EPSILON: f64 = 1e-13;
/// Bytes the triad moves per element, as STREAM counts them.
pub const BYTES_PER_ELEMENT: u64 = 24;

/// The arrays do not hold what the triad must have left.
#[derive(Debug, Error, PartialEq)]
pub enum StreamError {
    /// The three slices differ in length.
    #[error("triad arrays differ in length: a {a}, b {b}, c {c}")]
    Length {
        /// Length of `a`.
        a: usize,
        /// Length of `b`.
        b: usize,
        /// Length of `c`.
        c: usize,
    },
    /// An array's average error exceeds STREAM's tolerance, or an element differs.
    #[error("triad array {array}: {bad} elements wrong, first at {index} ({got} for {expected}); average relative error {avg_err:e}")]
    Value {
        /// `'a'`, `'b'` or `'c'`.
        array: char,
        /// Elements outside the tolerance.
        bad: usize,
        /// The first of them (0 when only the average is off).
        index: usize,
        /// Its value.
        got: f64,
        /// The expected value.
        expected: f64,
        /// The average absolute error over the expected value.
        avg_err: f64,
    },
}

/// The triad's bandwidths over a number of repetitions.
#[derive(Clone, Copy, Debug)]
pub struct TriadStats {
    /// The best repetition's GB/s (10^9 bytes per second; STREAM reports the best).
    pub best_gbps: f64,
    /// The median repetition's GB/s.
    pub median_gbps: f64,
    /// Elements per array the triad ran over.
    pub elements: usize,
    /// Repetitions timed.
    pub reps: usize,
}

/// Sets `a = 1`, `b = 2`, `c = 1` (writing every element, so every page is
/// faulted in before timing).
pub fn init(a: &mut [f64], b: &mut [f64], c: &mut [f64]) {
    a.fill(A0);
    b.fill(B0);
    c.fill(C0);
}

/// One triad pass: `a[i] = b[i] + q * c[i]` over the shortest slice (zipped
/// iterators: no bounds checks, so the loop vectorises).
#[inline(never)]
pub fn triad(a: &mut [f64], b: &[f64], c: &[f64], q: f64) {
    for (x, (y, z)) in a.iter_mut().zip(b.iter().zip(c.iter())) {
        *x = y + q * z;
    }
}

/// Runs `reps` triad passes (at least one) and returns the best and the median
/// bandwidth. The slices should be equally long; the triad runs over the
/// shortest, and the bytes counted are 24 per element of it.
pub fn triad_stats(a: &mut [f64], b: &[f64], c: &[f64], reps: usize) -> TriadStats {
    let n = a.len().min(b.len()).min(c.len());
    let bytes = (n as u64 * BYTES_PER_ELEMENT) as f64;
    let reps = reps.max(1);
    let mut gbps: Vec<f64> = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        triad(a, b, c, std::hint::black_box(SCALAR));
        std::hint::black_box(&mut *a);
        let secs = t.elapsed().as_secs_f64();
        gbps.push(if secs > 0.0 { bytes / secs / 1e9 } else { 0.0 });
    }
    gbps.sort_by(f64::total_cmp);
    let best = gbps.last().copied().unwrap_or(0.0);
    let median = if gbps.is_empty() {
        0.0
    } else if gbps.len() % 2 == 1 {
        gbps[gbps.len() / 2]
    } else {
        (gbps[gbps.len() / 2 - 1] + gbps[gbps.len() / 2]) / 2.0
    };
    TriadStats {
        best_gbps: best,
        median_gbps: median,
        elements: n,
        reps,
    }
}

/// The best triad bandwidth in GB/s over `reps` passes (STREAM's convention).
pub fn triad_gbps(a: &mut [f64], b: &[f64], c: &[f64], reps: usize) -> f64 {
    triad_stats(a, b, c, reps).best_gbps
}

/// The median triad bandwidth in GB/s over `reps` passes.
pub fn triad_gbps_median(a: &mut [f64], b: &[f64], c: &[f64], reps: usize) -> f64 {
    triad_stats(a, b, c, reps).median_gbps
}

/// Checks one array against its expected constant.
fn check_array(array: char, v: &[f64], expected: f64) -> Result<(), StreamError> {
    let mut sum_err = 0.0;
    let mut bad = 0usize;
    let mut first: Option<(usize, f64)> = None;
    for (i, &x) in v.iter().enumerate() {
        let err = (x - expected).abs();
        sum_err += err;
        // A NaN error is outside the tolerance too.
        if err.is_nan() || err > EPSILON * expected.abs() {
            bad += 1;
            first.get_or_insert((i, x));
        }
    }
    let avg_err = if v.is_empty() {
        0.0
    } else {
        sum_err / v.len() as f64 / expected.abs()
    };
    // A NaN average fails the comparison.
    if bad == 0 && avg_err <= EPSILON {
        return Ok(());
    }
    let (index, got) = first.unwrap_or((0, f64::NAN));
    Err(StreamError::Value {
        array,
        bad,
        index,
        got,
        expected,
        avg_err,
    })
}

/// Verifies the arrays after [`init`] and at least one triad pass: `a = 5`,
/// `b = 2`, `c = 1` everywhere (STREAM's validation: the average error, then
/// every element).
///
/// # Errors
///
/// [`StreamError`] when the lengths differ or a value is wrong.
pub fn check(a: &[f64], b: &[f64], c: &[f64]) -> Result<(), StreamError> {
    if a.len() != b.len() || a.len() != c.len() {
        return Err(StreamError::Length {
            a: a.len(),
            b: b.len(),
            c: c.len(),
        });
    }
    check_array('a', a, B0 + SCALAR * C0)?;
    check_array('b', b, B0)?;
    check_array('c', c, C0)
}
