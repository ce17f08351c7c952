//! Cache-line flush and store-fence primitives.
//!
//! The flush instruction is chosen once per process, on first use, from CPUID, in
//! this order of preference: `clwb` (write back, line stays cached), `clflushopt`
//! (weakly ordered invalidate), `clflush` (strongly ordered invalidate). `clwb` and `clflushopt` are durable only
//! after a later [`drain`] (`sfence`); `clflush` is ordered with respect to stores by
//! itself, so [`drain`] issues no fence for it, as in PMDK — unless the thread made a
//! non-temporal store ([`store_nt_u64`]) since its last drain: those are weakly
//! ordered under every flush instruction, so [`drain`] then fences (a thread-local
//! flag remembers it). Off x86-64 the portable fallback
//! flushes nothing and [`drain`] is a full memory fence: such targets never get the
//! `Dax` durability mode (see [`crate::pool`]), so no durability is claimed from it.
//!
//! Environment overrides, read once, in the spirit of PMDK's `PMEM_NO_CLWB`:
//!
//! | variable | effect |
//! | --- | --- |
//! | `PMKIT_NO_CLWB=1` | never use `clwb` |
//! | `PMKIT_NO_CLFLUSHOPT=1` | never use `clflushopt` (with `PMKIT_NO_CLWB`: `clflush`) |
//! | `PMKIT_FORCE_DAX=1` | map pools in `Dax` mode even on non-DAX files (benchmarks only; see [`crate::pool`]) |
//!
//! All instruction-level code lives in the private `x86_64` module beside this file.

use std::sync::atomic::{AtomicU8, Ordering};

use crate::counters;
use crate::CACHE_LINE;

#[cfg(target_arch = "x86_64")]
mod x86_64;

/// The cache-line flush instruction in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlushKind {
    /// `clwb`: write the line back, keep it cached; durable at the next `sfence`.
    Clwb,
    /// `clflushopt`: write back and invalidate, weakly ordered; durable at the next `sfence`.
    ClflushOpt,
    /// `clflush`: write back and invalidate, ordered with stores; needs no fence.
    Clflush,
    /// No flush instruction (not x86-64): flushing does nothing, durability comes only
    /// from `msync`.
    Portable,
}

impl FlushKind {
    /// The instruction's name as printed by tools (`clwb`, `clflushopt`, ...).
    pub fn name(self) -> &'static str {
        match self {
            FlushKind::Clwb => "clwb",
            FlushKind::ClflushOpt => "clflushopt",
            FlushKind::Clflush => "clflush",
            FlushKind::Portable => "portable",
        }
    }

    /// Whether a flush with this instruction needs a later fence to become durable.
    pub fn needs_fence(self) -> bool {
        matches!(self, FlushKind::Clwb | FlushKind::ClflushOpt)
    }

    fn to_u8(self) -> u8 {
        match self {
            FlushKind::Clwb => 1,
            FlushKind::ClflushOpt => 2,
            FlushKind::Clflush => 3,
            FlushKind::Portable => 4,
        }
    }

    fn from_u8(v: u8) -> Option<FlushKind> {
        match v {
            1 => Some(FlushKind::Clwb),
            2 => Some(FlushKind::ClflushOpt),
            3 => Some(FlushKind::Clflush),
            4 => Some(FlushKind::Portable),
            _ => None,
        }
    }
}

impl std::fmt::Display for FlushKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What the CPU offers, independent of the environment overrides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuFlushSupport {
    /// CPUID.(EAX=7,ECX=0):EBX bit 24.
    pub clwb: bool,
    /// CPUID.(EAX=7,ECX=0):EBX bit 23.
    pub clflushopt: bool,
    /// CPUID.(EAX=1):EDX bit 19.
    pub clflush: bool,
}

/// Reads the CPU's flush-instruction support (all false off x86-64).
pub fn cpu_support() -> CpuFlushSupport {
    #[cfg(target_arch = "x86_64")]
    {
        x86_64::cpu_support()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        CpuFlushSupport::default()
    }
}

/// Picks the best instruction the CPU offers that the overrides allow.
/// Pure, so the choice is unit-tested for every combination.
pub fn choose(cpu: CpuFlushSupport, no_clwb: bool, no_clflushopt: bool) -> FlushKind {
    if cpu.clwb && !no_clwb {
        FlushKind::Clwb
    } else if cpu.clflushopt && !no_clflushopt {
        FlushKind::ClflushOpt
    } else if cpu.clflush {
        FlushKind::Clflush
    } else {
        FlushKind::Portable
    }
}

/// True when the environment variable is set to something other than `0` or empty.
pub(crate) fn env_flag(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty() && v != "0")
}

static KIND: AtomicU8 = AtomicU8::new(0);

/// The flush instruction this process uses (detected on first call, then cached).
#[inline]
pub fn kind() -> FlushKind {
    match FlushKind::from_u8(KIND.load(Ordering::Relaxed)) {
        Some(k) => k,
        None => detect(),
    }
}

#[cold]
fn detect() -> FlushKind {
    let k = choose(
        cpu_support(),
        env_flag("PMKIT_NO_CLWB"),
        env_flag("PMKIT_NO_CLFLUSHOPT"),
    );
    // Racing first callers compute the same value; any of them may store it.
    KIND.store(k.to_u8(), Ordering::Relaxed);
    tracing::debug!(
        instruction = k.name(),
        "pmem-core flush instruction selected"
    );
    k
}

/// Flushes every cache line overlapping `[addr, addr + len)` from the CPU caches
/// toward memory. Not durable until [`drain`] unless the instruction is `clflush`.
///
/// # Safety
/// The whole range must lie inside memory mapped in this process (flush instructions
/// fault on unmapped addresses). Flushing never changes the bytes.
#[inline]
pub unsafe fn flush_raw(addr: *const u8, len: usize) {
    if len == 0 {
        return;
    }
    let start = addr as usize & !(CACHE_LINE - 1);
    let end = addr as usize + len;
    let lines = (end - start).div_ceil(CACHE_LINE);
    let k = kind();
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller guarantees the range is mapped; every line start we pass is
    // inside the first and last line of that range, which are mapped as a whole
    // because mappings are page granular.
    unsafe {
        x86_64::flush_lines(k, start, lines)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = k;
    counters::add_lines_flushed(lines as u64);
}

/// Safe form of [`flush_raw`] for a slice the caller can name.
#[inline]
pub fn flush(bytes: &[u8]) {
    // SAFETY: a live slice is mapped memory.
    unsafe { flush_raw(bytes.as_ptr(), bytes.len()) }
}

thread_local! {
    /// Whether this thread made a non-temporal store ([`store_nt_u64`]) that no
    /// [`drain`] has fenced yet. Non-temporal stores are weakly ordered: whatever the
    /// flush instruction, only a fence makes them durable.
    static NT_PENDING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The fence a [`drain`] issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrainFence {
    /// `sfence` (counted in [`crate::Counters::fences`]).
    Sfence,
    /// A full memory fence (the portable fallback; `mfence` on x86-64, which also
    /// orders non-temporal stores).
    Full,
    /// No fence: `clflush` is ordered by itself and no non-temporal store is pending.
    None,
}

/// What [`drain`] must issue for flush instruction `kind` when this thread has
/// (`nt_pending`) or has not made an unfenced non-temporal store. Pure, so every
/// combination is unit-tested.
pub fn drain_fence(kind: FlushKind, nt_pending: bool) -> DrainFence {
    match kind {
        FlushKind::Clwb | FlushKind::ClflushOpt => DrainFence::Sfence,
        FlushKind::Clflush if nt_pending => DrainFence::Sfence,
        FlushKind::Clflush => DrainFence::None,
        FlushKind::Portable => DrainFence::Full,
    }
}

/// Waits until previously flushed lines and non-temporal stores of this thread are
/// durable: `sfence` for `clwb`/`clflushopt`; for `clflush` (ordered by itself)
/// nothing unless a non-temporal store is pending, then `sfence`; a full fence for
/// the portable fallback (which claims no durability).
#[inline]
pub fn drain() {
    drain_with(kind());
}

/// [`drain`] as if `kind` were the flush instruction (the tests force `clflush`).
#[inline]
fn drain_with(kind: FlushKind) {
    // `try_with`: draining from a thread-local destructor must not panic; assume a
    // non-temporal store is pending then.
    let nt_pending = NT_PENDING.try_with(|c| c.replace(false)).unwrap_or(true);
    match drain_fence(kind, nt_pending) {
        DrainFence::Sfence => {
            #[cfg(target_arch = "x86_64")]
            x86_64::sfence();
            counters::add_fence();
        }
        DrainFence::None => {}
        DrainFence::Full => std::sync::atomic::fence(Ordering::SeqCst),
    }
}

/// A store fence whatever the flush instruction: what a drain is when the caches are
/// in the persistence domain (eADR), where no line was flushed but the stores (and
/// any non-temporal store) must still be ordered before what follows. `sfence` on
/// x86-64 (counted in [`crate::Counters::fences`]), a full fence elsewhere.
#[inline]
pub fn fence() {
    // The fence covers a pending non-temporal store too.
    let _ = NT_PENDING.try_with(|c| c.set(false));
    #[cfg(target_arch = "x86_64")]
    {
        x86_64::sfence();
        counters::add_fence();
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(Ordering::SeqCst);
}

/// [`flush_raw`] then [`drain`].
///
/// # Safety
/// As for [`flush_raw`].
#[inline]
pub unsafe fn persist_raw(addr: *const u8, len: usize) {
    // SAFETY: forwarded from the caller.
    unsafe { flush_raw(addr, len) };
    drain();
}

/// Safe form of [`persist_raw`].
#[inline]
pub fn persist(bytes: &[u8]) {
    flush(bytes);
    drain();
}

/// A non-temporal 8-byte store (`movnti`): bypasses the cache, durable at the next
/// [`drain`] of this thread (which fences it whatever the flush instruction). A plain
/// store off x86-64.
///
/// # Safety
/// `p` must be valid for an 8-byte aligned write, with no live reference to it.
#[inline]
pub unsafe fn store_nt_u64(p: *mut u64, value: u64) {
    let _ = NT_PENDING.try_with(|c| c.set(true));
    #[cfg(target_arch = "x86_64")]
    // SAFETY: forwarded from the caller.
    unsafe {
        x86_64::store_nt_u64(p, value)
    };
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: forwarded from the caller.
    unsafe {
        p.write(value)
    };
}

/// Number of cache lines overlapping `[addr, addr + len)`.
pub fn lines_spanned(addr: usize, len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    let start = addr & !(CACHE_LINE - 1);
    (addr + len - start).div_ceil(CACHE_LINE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Counters;

    #[test]
    fn choice_prefers_clwb_then_clflushopt_then_clflush() {
        let all = CpuFlushSupport {
            clwb: true,
            clflushopt: true,
            clflush: true,
        };
        assert_eq!(choose(all, false, false), FlushKind::Clwb);
        assert_eq!(choose(all, true, false), FlushKind::ClflushOpt);
        assert_eq!(choose(all, true, true), FlushKind::Clflush);
        assert_eq!(choose(all, false, true), FlushKind::Clwb);
        let old = CpuFlushSupport {
            clwb: false,
            clflushopt: false,
            clflush: true,
        };
        assert_eq!(choose(old, false, false), FlushKind::Clflush);
        assert_eq!(
            choose(CpuFlushSupport::default(), false, false),
            FlushKind::Portable
        );
    }

    #[test]
    fn fence_needs() {
        assert!(FlushKind::Clwb.needs_fence());
        assert!(FlushKind::ClflushOpt.needs_fence());
        assert!(!FlushKind::Clflush.needs_fence());
        assert!(!FlushKind::Portable.needs_fence());
    }

    #[test]
    fn lines_spanned_counts_partial_lines() {
        assert_eq!(lines_spanned(0, 0), 0);
        assert_eq!(lines_spanned(0, 1), 1);
        assert_eq!(lines_spanned(0, 64), 1);
        assert_eq!(lines_spanned(0, 65), 2);
        assert_eq!(lines_spanned(63, 2), 2);
        assert_eq!(lines_spanned(63, 1), 1);
        assert_eq!(lines_spanned(60, 4096), 65);
        assert_eq!(lines_spanned(4090, 12), 2);
    }

    /// Every line a range overlaps is flushed, whatever its alignment: the flush
    /// counter sees exactly `lines_spanned`, and (on x86-64) flushing the first and
    /// last byte of the range would fault if we computed the lines wrongly past a
    /// guard page (see the pool tests for the page-straddling case).
    #[test]
    fn unaligned_ranges_flush_every_overlapped_line() {
        let buf = vec![0u8; 3 * 4096 + 256];
        let base = buf.as_ptr() as usize;
        for start in [0usize, 1, 7, 63, 64, 65, 4095, 4096 - 8, 2 * 4096 - 1] {
            for len in [1usize, 2, 8, 63, 64, 65, 127, 129, 4096, 4097] {
                if start + len > buf.len() {
                    continue;
                }
                let (_, d) = Counters::measure(|| flush(&buf[start..start + len]));
                assert_eq!(
                    d.lines_flushed as usize,
                    lines_spanned(base + start, len),
                    "start {start} len {len}"
                );
            }
        }
    }

    #[test]
    fn drain_fences_pending_non_temporal_stores_under_every_instruction() {
        use DrainFence::*;
        for nt in [false, true] {
            assert_eq!(drain_fence(FlushKind::Clwb, nt), Sfence);
            assert_eq!(drain_fence(FlushKind::ClflushOpt, nt), Sfence);
            assert_eq!(drain_fence(FlushKind::Portable, nt), Full);
        }
        assert_eq!(drain_fence(FlushKind::Clflush, false), None);
        assert_eq!(drain_fence(FlushKind::Clflush, true), Sfence);
    }

    /// Under `clflush`, a drain after a non-temporal store fences (and counts it);
    /// the flag is then clear, so the next drain issues nothing.
    #[test]
    fn clflush_drain_fences_a_pending_nt_store_once() {
        let mut word = 0u64;
        drain_with(FlushKind::Clflush); // clear anything this thread left pending
                                        // SAFETY: a local, 8-byte aligned, no reference live across the call.
        unsafe { store_nt_u64(&mut word, 7) };
        let (_, d) = Counters::measure(|| drain_with(FlushKind::Clflush));
        assert_eq!(d.fences, 1, "the non-temporal store must be fenced");
        let (_, d) = Counters::measure(|| drain_with(FlushKind::Clflush));
        assert_eq!(d.fences, 0, "nothing pending any more");
        assert_eq!(word, 7);
    }

    #[test]
    fn drain_counts_a_fence_only_when_one_is_issued() {
        let (_, d) = Counters::measure(drain);
        assert_eq!(d.fences, u64::from(kind().needs_fence()));
    }
}
