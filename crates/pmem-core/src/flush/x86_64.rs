//! The x86-64 instructions: CPUID feature bits, `clwb`, `clflushopt`, `clflush`,
//! `sfence`. On stable Rust there is no `_mm_clwb` and
//! `is_x86_feature_detected!("clwb")` does not compile, so the features come from
//! CPUID leaf 7 and the instructions from inline assembly.
//!
//! The assembly blocks are deliberately *not* marked `nomem`: the compiler must treat
//! them as touching memory, so it cannot sink a store to the flushed line below the
//! flush or hoist it above.

use core::arch::asm;
use core::arch::x86_64::{__cpuid, __cpuid_count, _mm_sfence, _mm_stream_si64};

use super::{CpuFlushSupport, FlushKind};
use crate::CACHE_LINE;

#[allow(unused_unsafe)]
pub(super) fn cpu_support() -> CpuFlushSupport {
    // SAFETY: CPUID is available on every x86-64 CPU and has no side effects.
    let max_leaf = unsafe { __cpuid(0) }.eax;
    // SAFETY: as above.
    let leaf1 = unsafe { __cpuid(1) };
    let ebx7 = if max_leaf >= 7 {
        // SAFETY: leaf 7 exists (checked against the maximum leaf above).
        unsafe { __cpuid_count(7, 0) }.ebx
    } else {
        0
    };
    CpuFlushSupport {
        clwb: ebx7 & (1 << 24) != 0,
        clflushopt: ebx7 & (1 << 23) != 0,
        clflush: leaf1.edx & (1 << 19) != 0,
    }
}

/// Flushes `lines` consecutive cache lines starting at the line-aligned `start`.
///
/// # Safety
/// Every line must be mapped; `kind` must be an instruction this CPU supports
/// (as returned by [`super::kind`]).
#[inline(always)]
pub(super) unsafe fn flush_lines(kind: FlushKind, start: usize, lines: usize) {
    let mut p = start;
    match kind {
        FlushKind::Clwb => {
            for _ in 0..lines {
                // SAFETY: `p` is a mapped line (caller) and the CPU has clwb (kind).
                unsafe { asm!("clwb [{0}]", in(reg) p, options(nostack, preserves_flags)) };
                p += CACHE_LINE;
            }
        }
        FlushKind::ClflushOpt => {
            for _ in 0..lines {
                // SAFETY: as above, with clflushopt.
                unsafe { asm!("clflushopt [{0}]", in(reg) p, options(nostack, preserves_flags)) };
                p += CACHE_LINE;
            }
        }
        FlushKind::Clflush => {
            for _ in 0..lines {
                // SAFETY: as above; clflush exists on every CPU reporting CPUID.1:EDX[19].
                unsafe { asm!("clflush [{0}]", in(reg) p, options(nostack, preserves_flags)) };
                p += CACHE_LINE;
            }
        }
        FlushKind::Portable => {}
    }
}

#[inline(always)]
pub(super) fn sfence() {
    // SAFETY: sfence is part of SSE, which every x86-64 CPU has.
    #[allow(unused_unsafe)]
    unsafe {
        _mm_sfence()
    }
}

/// `movnti`: a non-temporal 8-byte store.
///
/// # Safety
/// `p` must be valid for an 8-byte aligned write.
#[inline(always)]
pub(super) unsafe fn store_nt_u64(p: *mut u64, value: u64) {
    // SAFETY: SSE2 (movnti) is part of x86-64; `p` is valid (caller).
    unsafe { _mm_stream_si64(p.cast::<i64>(), value as i64) }
}
