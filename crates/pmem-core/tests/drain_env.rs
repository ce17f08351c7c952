//! `PMKIT_GROUP_COMMIT` and `PMKIT_DRAIN_SYNC` are read at create and open like
//! `PMKIT_PERSISTENCE_DOMAIN`: a good value sets an `Msync` pool's drain policy,
//! a bad one is a typed error naming the variable, and a create refused for it
//! leaves no file behind. Each case runs in a child process (this test binary,
//! filtered to `drain_env_child`) so no other test sees the variables.

use std::path::Path;
use std::process::{Command, Stdio};

use pmem_core::pool::{DRAIN_SYNC_ENV, GROUP_COMMIT_ENV};
use pmem_core::{
    DrainPolicy, DrainSync, DurabilityMode, OpenOptions, Pool, PoolError, PoolOptions,
};

const CHILD: &str = "PMKIT_TEST_DRAIN_ENV_DIR";

/// The child's exit code for a policy.
fn code(p: DrainPolicy) -> i32 {
    let sync = match p.sync {
        DrainSync::MsyncSpan => 1,
        DrainSync::WriteThenFdatasync => 2,
    };
    10 * i32::from(p.group_commit) + sync
}

/// Child half: creates (or, if `create.pool` exists, opens) a pool and exits with
/// [`code`] of its drain policy; 90 for `InvalidEnv` on the group-commit variable,
/// 91 on the sync variable, with no file left by a create; 80 when the directory
/// gives no `Msync` pool (the parent then skips); 99 for anything else.
#[test]
fn drain_env_child() {
    let Some(dir) = std::env::var_os(CHILD) else {
        return;
    };
    let path = Path::new(&dir).join("p.pool");
    let existed = path.exists();
    let got = if existed {
        Pool::open_with(&path, &OpenOptions::new())
    } else {
        Pool::create(&path, &PoolOptions::new("drain", 64 * 1024))
    };
    let pool = match got {
        Ok(p) => p,
        Err(PoolError::InvalidEnv { var, .. }) if existed || !path.exists() => {
            std::process::exit(if var == GROUP_COMMIT_ENV { 90 } else { 91 })
        }
        Err(_) => std::process::exit(99),
    };
    if pool.mode() != DurabilityMode::Msync {
        std::process::exit(80);
    }
    std::process::exit(code(pool.drain_policy()));
}

fn child(dir: &Path, group: Option<&str>, sync: Option<&str>) -> i32 {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    cmd.args(["--exact", "drain_env_child"])
        .env(CHILD, dir)
        .env_remove(GROUP_COMMIT_ENV)
        .env_remove(DRAIN_SYNC_ENV)
        .env_remove("PMKIT_FORCE_DAX")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(v) = group {
        cmd.env(GROUP_COMMIT_ENV, v);
    }
    if let Some(v) = sync {
        cmd.env(DRAIN_SYNC_ENV, v);
    }
    cmd.status().expect("spawn").code().expect("exit code")
}

#[test]
fn the_drain_variables_are_read_at_create_and_open_and_refuse_bad_values() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let default = code(DrainPolicy::default());
    let first = child(d, None, None);
    if first == 80 {
        eprintln!("skipped: the temp dir gives no msync-mode pool here");
        return;
    }
    // Created with no variables: the default; the pool now exists.
    assert_eq!(first, default);
    // Each open reads the variables again.
    assert_eq!(child(d, Some("0"), None), code(DrainPolicy::serial()));
    assert_eq!(child(d, None, Some("fdatasync")), 12);
    assert_eq!(child(d, Some(""), Some("")), default);
    // Bad values fail the open, naming the variable.
    assert_eq!(child(d, Some("maybe"), None), 90);
    assert_eq!(child(d, None, Some("fsync")), 91);

    // A create refused for a bad value leaves no file (checked in the child).
    let fresh = tempfile::tempdir().expect("tempdir");
    assert_eq!(child(fresh.path(), Some("2"), None), 90);
    assert_eq!(child(fresh.path(), None, Some("MSYNC")), 91);
    assert!(!fresh.path().join("p.pool").exists());
}
