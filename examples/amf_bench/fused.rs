//! The allocator a workload child runs on: the system allocator, or the fusion
//! heap installed as the global allocator, with a limit from a cgroup or given
//! to the heap itself.
//!
//! The program's global allocator is [`BenchAlloc`]: a [`FusionAlloc`] (the
//! system allocator until a heap is installed) with an optional byte cap that
//! stands in for a cgroup's limit on machines without one (`--limit-source
//! heap`): past the cap an allocation fails, as the kernel's OOM killer would end
//! the process. A fusion child builds a [`SectionSpace`] of 128 MiB sections on a
//! file given by `--sections-file` (five times the limit, the paper's largest
//! configuration), takes its pressure from the cgroup it runs in (or from its own
//! DRAM against the limit it is given), installs the heap and starts the daemon.
//! `fusion-pm` instead takes a scripted Critical pressure, so that every block
//! comes from the sections: the cost of serving from (emulated) PM.

use std::alloc::{GlobalAlloc, Layout};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nvwa::fusion::{
    Cgroup, Daemon, FusionAlloc, FusionConfig, FusionHeap, MemInfo, Pressure, PressureSource,
    PsiTrigger, Scripted, SectionSpace, ZoneInfo, SECTION_BYTES,
};

/// The global allocator of `amf_bench`. See the module docs.
pub struct BenchAlloc {
    /// The fusion adapter (the system allocator until a heap is installed).
    pub fusion: FusionAlloc,
    /// A byte cap (0: none) for the system allocator under `--limit-source heap`.
    cap: AtomicU64,
    used: AtomicU64,
}

impl BenchAlloc {
    /// No heap, no cap.
    pub const fn new() -> BenchAlloc {
        BenchAlloc {
            fusion: FusionAlloc::new(),
            cap: AtomicU64::new(0),
            used: AtomicU64::new(0),
        }
    }
}

// SAFETY: everything is passed to `FusionAlloc` (itself sound) unchanged; the
// cap only refuses (returns null) before calling it, and counts afterwards.
unsafe impl GlobalAlloc for BenchAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let cap = self.cap.load(Ordering::Relaxed);
        if cap != 0 {
            let size = layout.size() as u64;
            if self.used.fetch_add(size, Ordering::Relaxed) + size > cap {
                self.used.fetch_sub(size, Ordering::Relaxed);
                return std::ptr::null_mut();
            }
        }
        // SAFETY: GlobalAlloc's contract, passed on.
        unsafe { self.fusion.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if self.cap.load(Ordering::Relaxed) != 0 {
            self.used.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        }
        // SAFETY: GlobalAlloc's contract, passed on.
        unsafe { self.fusion.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let cap = self.cap.load(Ordering::Relaxed);
        if cap != 0 {
            let grow = (new_size as u64).saturating_sub(layout.size() as u64);
            if self.used.load(Ordering::Relaxed) + grow > cap {
                return std::ptr::null_mut();
            }
            self.used.fetch_add(new_size as u64, Ordering::Relaxed);
            self.used.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        }
        // SAFETY: GlobalAlloc's contract, passed on.
        unsafe { self.fusion.realloc(ptr, layout, new_size) }
    }
}

/// Which allocator a child runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocKind {
    /// The system allocator (glibc malloc).
    System,
    /// The fusion heap, pressure from the cgroup / the machine / its own limit.
    Fusion,
    /// The fusion heap under scripted Critical pressure: every block from PM.
    FusionPm,
}

impl AllocKind {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            AllocKind::System => "system",
            AllocKind::Fusion => "fusion",
            AllocKind::FusionPm => "fusion-pm",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Result<AllocKind, String> {
        match s {
            "system" => Ok(AllocKind::System),
            "fusion" => Ok(AllocKind::Fusion),
            "fusion-pm" => Ok(AllocKind::FusionPm),
            other => Err(format!(
                "unknown allocator {other:?} (system, fusion, fusion-pm)"
            )),
        }
    }
}

/// A child's allocator arguments.
#[derive(Clone, Debug)]
pub struct AllocArgs {
    /// Which allocator.
    pub kind: AllocKind,
    /// The section file to create (fusion kinds); the parent removes it after
    /// the child, which may have been killed before it could.
    pub sections_file: Option<PathBuf>,
    /// The memory limit the child runs under, bytes (0: none).
    pub limit: u64,
    /// Who enforces it: `cgroup-v1`, `cgroup-v2`, `heap` or `none`.
    pub limit_source: String,
    /// Wait for the parent to read the section file through before using it
    /// (`--precharge`; see `child::run_limited_with`).
    pub precharge: bool,
}

impl AllocArgs {
    /// The command-line arguments that give `self` to a child.
    pub fn to_args(&self) -> Vec<String> {
        let mut v = vec![
            "--alloc".to_owned(),
            self.kind.name().to_owned(),
            "--limit".to_owned(),
            self.limit.to_string(),
            "--limit-source".to_owned(),
            self.limit_source.clone(),
        ];
        if self.precharge {
            v.push("--precharge".to_owned());
        }
        if let Some(d) = &self.sections_file {
            v.push("--sections-file".to_owned());
            v.push(d.display().to_string());
        }
        v
    }
}

/// What a child set up; keep it alive while the workload runs.
pub struct Installed {
    /// The daemon, if one runs.
    pub daemon: Option<Daemon>,
    /// The heap, if one is installed.
    pub heap: Option<&'static FusionHeap>,
}

fn critical() -> Pressure {
    Pressure {
        free_bytes: 0,
        min: 1,
        low: 1,
        high: 1,
        total: 1 << 30,
        psi_some_avg10: None,
        source: "scripted",
    }
}

/// Sets up the allocator `args` names on `global`. Call before the workload
/// allocates.
pub fn install(global: &'static BenchAlloc, args: &AllocArgs) -> Result<Installed, String> {
    if args.kind == AllocKind::System {
        if args.limit_source == "heap" && args.limit > 0 {
            global.cap.store(args.limit, Ordering::Relaxed);
        }
        return Ok(Installed {
            daemon: None,
            heap: None,
        });
    }
    let path = args
        .sections_file
        .clone()
        .ok_or("a fusion child needs --sections-file")?;
    let limit = if args.limit > 0 { args.limit } else { 1 << 30 };
    let sections =
        usize::try_from((limit * 5).div_ceil(SECTION_BYTES).max(2)).map_err(|e| e.to_string())?;
    let space = SectionSpace::create(&path, sections, SECTION_BYTES)
        .map_err(|e| format!("section file {}: {e}", path.display()))?
        .remove_on_drop();
    if args.precharge {
        // The parent reads the file through (charging its pages outside our
        // cgroup, as real PM is not DRAM) and answers.
        use std::io::{BufRead, Write};
        println!("{}", crate::child::SECTIONS_READY);
        std::io::stdout().flush().map_err(|e| e.to_string())?;
        let mut go = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut go)
            .map_err(|e| format!("waiting for the parent: {e}"))?;
    }
    let mut config = FusionConfig::default();
    let source: Option<Box<dyn PressureSource + Send>> =
        match (args.kind, args.limit_source.as_str()) {
            (AllocKind::FusionPm, _) => Some(Box::new(Scripted::cycling(vec![critical()]))),
            (_, "heap") => {
                config.dram_limit = Some(limit);
                None
            }
            (_, "cgroup-v1" | "cgroup-v2") => Some(Box::new(
                Cgroup::detect().map_err(|e| format!("cgroup source: {e}"))?,
            )),
            _ => {
                let mut zone = ZoneInfo::new();
                if zone.sample().is_ok() {
                    Some(Box::new(zone))
                } else {
                    Some(Box::new(MemInfo::new()))
                }
            }
        };
    let heap: &'static FusionHeap = Box::leak(Box::new(
        FusionHeap::new(space, source, config).map_err(|e| e.to_string())?,
    ));
    // The first round before the workload: under `fusion-pm` it integrates and
    // turns PM serving on.
    if let Err(e) = heap.round() {
        return Err(format!("first fusion round: {e}"));
    }
    global
        .fusion
        .install(heap)
        .map_err(|_| "a fusion heap was already installed")?;
    // Woken by the kernel's PSI trigger where there is one, else by its period.
    let period = Duration::from_millis(20);
    let daemon = match PsiTrigger::system() {
        Ok(trigger) => Daemon::spawn_with_trigger(heap, period, trigger),
        Err(_) => Daemon::spawn(heap, period),
    }
    .map_err(|e| e.to_string())?;
    Ok(Installed {
        daemon: Some(daemon),
        heap: Some(heap),
    })
}
