//! The persistence domain of a pool: how it is chosen (request, environment
//! override, default), what it does to flush and drain in each mode (seen through
//! the per-thread counters), and what the pool's info says.
//!
//! The environment override is read at open, so its cases run in a child process
//! (the variable would leak into the tests running beside them).

use std::path::Path;
use std::process::{Command, Stdio};

use pmem_core::pool::DOMAIN_ENV;
use pmem_core::{
    Counters, DomainSource, DurabilityMode, ModeRequest, OpenOptions, PPtr, PersistenceDomain,
    Pool, PoolError, PoolOptions,
};

use PersistenceDomain::{CpuCache, MemoryController};

const CHILD: &str = "PMEM_CORE_DOMAIN_CHILD";

/// Whether the environment already overrides what these tests decide.
fn env_overridden() -> bool {
    std::env::var_os(DOMAIN_ENV).is_some() || std::env::var_os("PMKIT_FORCE_DAX").is_some()
}

fn create(dir: &Path, name: &str, opts: PoolOptions) -> Pool {
    Pool::create(dir.join(name), &opts).expect("create pool")
}

/// Flushes 256 bytes (four lines) and drains, returning the counters of both.
fn flush_and_drain(pool: &Pool) -> Counters {
    let at = pool.heap().start;
    Counters::measure(|| {
        pool.flush(at, 256).expect("flush");
        pool.drain().expect("drain");
    })
    .1
}

#[test]
fn dax_on_cpu_cache_flushes_nothing_and_drains_with_a_fence() {
    if env_overridden() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = || PoolOptions::new("domain", 64 * 1024).mode(ModeRequest::ForceDax);
    let adr = create(dir.path(), "adr", opts());
    let eadr = create(dir.path(), "eadr", opts().persistence_domain(CpuCache));
    if adr.mode() != DurabilityMode::Dax {
        return; // not x86-64: no Dax mode at all
    }
    assert_eq!(
        (adr.persistence_domain(), adr.domain_source()),
        (MemoryController, &DomainSource::Default)
    );
    assert!(!adr.domain_effective());
    assert_eq!(
        (eadr.persistence_domain(), eadr.domain_source()),
        (CpuCache, &DomainSource::Requested)
    );
    assert!(eadr.domain_effective());

    let on_adr = flush_and_drain(&adr);
    assert_eq!(on_adr.lines_flushed, 4, "{on_adr:?}");
    let on_eadr = flush_and_drain(&eadr);
    assert_eq!(on_eadr.lines_flushed, 0, "eADR issued flushes: {on_eadr:?}");
    assert_eq!(
        on_eadr.fences, 1,
        "an eADR drain is one sfence: {on_eadr:?}"
    );
    assert_eq!(on_eadr.msyncs, 0);

    // persist = flush + drain; a drain with nothing flushed still fences (a
    // non-temporal store or plain stores may need ordering).
    let c = Counters::measure(|| eadr.persist(eadr.heap().start, 4096).expect("persist")).1;
    assert_eq!((c.lines_flushed, c.fences), (0, 1), "{c:?}");

    // Forced DAX on a non-DAX file stays NOT durable, whatever the domain.
    assert!(!eadr.is_durable());
    let info = eadr.info();
    assert_eq!(info.persistence_domain, CpuCache);
    assert_eq!(info.domain_source, DomainSource::Requested);
    assert!(info.domain_effective && !info.durable);
}

#[test]
fn a_non_temporal_store_on_cpu_cache_is_fenced_by_the_drain() {
    if env_overridden() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut pool = create(
        dir.path(),
        "nt",
        PoolOptions::new("domain", 64 * 1024)
            .mode(ModeRequest::ForceDax)
            .persistence_domain(CpuCache),
    );
    let p = PPtr::<u64>::from_offset(pool.heap().start);
    let c = Counters::measure(|| {
        pool.write_nt_u64(p, 7).expect("nt store");
        pool.drain().expect("drain");
    })
    .1;
    if pool.mode() == DurabilityMode::Dax {
        assert_eq!((c.lines_flushed, c.fences), (0, 1), "{c:?}");
    }
    assert_eq!(pool.read(p).expect("read"), 7);
}

#[test]
fn cpu_cache_is_recorded_but_changes_nothing_in_msync_mode() {
    if env_overridden() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let pool = create(
        dir.path(),
        "msync",
        PoolOptions::new("domain", 64 * 1024).persistence_domain(CpuCache),
    );
    if pool.mode() != DurabilityMode::Msync {
        return; // the temporary directory is on a DAX file system
    }
    assert_eq!(pool.persistence_domain(), CpuCache);
    assert_eq!(pool.domain_source(), &DomainSource::Requested);
    assert!(!pool.domain_effective());
    assert!(pool.is_durable());
    // The page cache still needs its msync.
    let c = flush_and_drain(&pool);
    assert_eq!((c.lines_flushed, c.msyncs), (0, 1), "{c:?}");
    assert!(!pool.info().domain_effective);
}

#[test]
fn cpu_cache_is_recorded_but_changes_nothing_when_volatile() {
    if env_overridden() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let pool = create(
        dir.path(),
        "volatile",
        PoolOptions::new("domain", 64 * 1024)
            .mode(ModeRequest::Volatile)
            .persistence_domain(CpuCache),
    );
    let anon = Pool::anonymous(&PoolOptions::new("domain", 64 * 1024).persistence_domain(CpuCache))
        .expect("anonymous pool");
    for p in [&pool, &anon] {
        assert_eq!(p.mode(), DurabilityMode::Volatile);
        assert_eq!(p.persistence_domain(), CpuCache);
        assert!(!p.domain_effective() && !p.is_durable());
        let c = flush_and_drain(p);
        assert_eq!(c, Counters::default(), "volatile pools do nothing: {c:?}");
    }
}

#[test]
fn open_decides_the_domain_again() {
    if env_overridden() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("reopen");
    let pool = Pool::create(
        &path,
        &PoolOptions::new("domain", 64 * 1024).persistence_domain(CpuCache),
    )
    .expect("create");
    pool.close().expect("close");
    // Nothing is stored in the file: a plain open assumes the safe default.
    let pool = Pool::open(&path, "domain").expect("open");
    assert_eq!(
        (pool.persistence_domain(), pool.domain_source()),
        (MemoryController, &DomainSource::Default)
    );
    pool.close().expect("close");
    let pool = Pool::open_with(
        &path,
        &OpenOptions::new()
            .mode(ModeRequest::ForceDax)
            .persistence_domain(CpuCache),
    )
    .expect("open");
    assert_eq!(pool.persistence_domain(), CpuCache);
    assert_eq!(pool.domain_effective(), pool.mode() == DurabilityMode::Dax);
}

/// Child half: creates a forced-DAX pool asking for `memory_controller` and
/// reports its domain, source and flushed lines through its exit code, or 90 for
/// an `InvalidEnv` error naming the variable (and no file left behind).
#[test]
fn domain_child_probe() {
    let Some(dir) = std::env::var_os(CHILD) else {
        return;
    };
    let path = Path::new(&dir).join("child.pool");
    let opts = PoolOptions::new("domain", 64 * 1024)
        .mode(ModeRequest::ForceDax)
        .persistence_domain(MemoryController);
    let pool = match Pool::create(&path, &opts) {
        Ok(p) => p,
        Err(PoolError::InvalidEnv { var, .. }) if var == DOMAIN_ENV && !path.exists() => {
            std::process::exit(90)
        }
        Err(_) => std::process::exit(99),
    };
    let domain = match pool.persistence_domain() {
        MemoryController => 1,
        CpuCache => 2,
    };
    let source = match pool.domain_source() {
        DomainSource::Override => 1,
        DomainSource::Requested => 2,
        _ => 9,
    };
    let flushed = flush_and_drain(&pool).lines_flushed.min(9) as i32;
    drop(pool);
    std::process::exit(domain * 100 + source * 10 + flushed);
}

fn child(value: Option<&str>) -> i32 {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    cmd.args(["--exact", "domain_child_probe"])
        .env(CHILD, dir.path())
        .env_remove(DOMAIN_ENV)
        .env_remove("PMKIT_FORCE_DAX")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(v) = value {
        cmd.env(DOMAIN_ENV, v);
    }
    cmd.status().expect("spawn").code().expect("exit code")
}

#[test]
fn the_environment_overrides_the_request_either_way() {
    if !cfg!(target_arch = "x86_64") {
        return;
    }
    // Requested memory_controller, no override: four lines flushed.
    assert_eq!(child(None), 124);
    // Overridden to cpu_cache: nothing flushed.
    assert_eq!(child(Some("cpu_cache")), 210);
    assert_eq!(child(Some("memory_controller")), 114);
    // Empty is unset.
    assert_eq!(child(Some("")), 124);
    // Invalid: a typed error naming the variable, and no half-made file.
    assert_eq!(child(Some("eadr")), 90);
    assert_eq!(child(Some("CPU_CACHE")), 90);
}
