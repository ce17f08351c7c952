//! The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), for figures that
//! must not count the time a thread spent descheduled: on a 2-core machine a
//! compiler or the hypervisor taking a core moves wall-clock rates by tens of
//! percent, and a rate per CPU second of the measured thread separates that from
//! the cost of the code under test.

/// The calling thread's CPU time, in seconds (NaN if the clock is unavailable).
pub fn thread_cpu_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill; the clock id needs
    // nothing else.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return f64::NAN;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}
