//! The PMDK-style environment overrides, each checked in a child process (they are
//! read once per process): `PMKIT_NO_CLWB`, `PMKIT_NO_CLFLUSHOPT`, `PMKIT_FORCE_DAX`.

use std::process::{Command, Stdio};

use pmem_core::flush::{self, FlushKind};
use pmem_core::{DurabilityMode, ModeSource, Pool, PoolOptions};

const CHILD: &str = "PMEM_CORE_ENV_CHILD";

/// Child half: reports the flush instruction and the mode of a fresh temp pool
/// through its exit code (kind * 10 + mode).
#[test]
fn env_child_probe() {
    let Some(dir) = std::env::var_os(CHILD) else {
        return;
    };
    let kind = match flush::kind() {
        FlushKind::Clwb => 1,
        FlushKind::ClflushOpt => 2,
        FlushKind::Clflush => 3,
        FlushKind::Portable => 4,
    };
    let path = std::path::Path::new(&dir).join("child.pool");
    let pool = Pool::create(&path, &PoolOptions::new("env", 1 << 16)).expect("create");
    let mode = match (pool.mode(), pool.mode_source(), pool.is_durable()) {
        (DurabilityMode::Dax, ModeSource::Forced, false) => 1,
        (DurabilityMode::Msync, ModeSource::PageCache, true) => 2,
        (DurabilityMode::Dax, ModeSource::MapSync, true) => 3,
        _ => 9,
    };
    drop(pool);
    std::process::exit(kind * 10 + mode);
}

fn child(vars: &[(&str, &str)]) -> (i32, i32) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    cmd.args(["--exact", "env_child_probe"])
        .env(CHILD, dir.path())
        .env_remove("PMKIT_NO_CLWB")
        .env_remove("PMKIT_NO_CLFLUSHOPT")
        .env_remove("PMKIT_FORCE_DAX")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let code = cmd.status().expect("spawn").code().expect("exit code");
    (code / 10, code % 10)
}

#[test]
fn overrides_change_the_instruction_and_the_mode() {
    let cpu = flush::cpu_support();
    let expect = |no_clwb, no_opt| match flush::choose(cpu, no_clwb, no_opt) {
        FlushKind::Clwb => 1,
        FlushKind::ClflushOpt => 2,
        FlushKind::Clflush => 3,
        FlushKind::Portable => 4,
    };
    let (k, m) = child(&[]);
    assert_eq!(k, expect(false, false));
    assert!(
        m == 2 || m == 3,
        "a temp file is msync (or real DAX), got {m}"
    );
    assert_eq!(child(&[("PMKIT_NO_CLWB", "1")]).0, expect(true, false));
    assert_eq!(
        child(&[("PMKIT_NO_CLWB", "1"), ("PMKIT_NO_CLFLUSHOPT", "1")]).0,
        expect(true, true)
    );
    assert_eq!(
        child(&[("PMKIT_NO_CLWB", "0")]).0,
        expect(false, false),
        "0 means unset"
    );
    if cpu.clwb {
        assert_ne!(child(&[("PMKIT_NO_CLWB", "1")]).0, 1);
    }
    let (_, m) = child(&[("PMKIT_FORCE_DAX", "1")]);
    if cfg!(target_arch = "x86_64") {
        assert!(
            m == 1 || m == 3,
            "forced DAX must be Dax and not durable (or real DAX), got {m}"
        );
    }
}
