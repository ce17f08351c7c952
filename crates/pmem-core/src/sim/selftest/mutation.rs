//! Mutation tests of the simulator: the reference structures pass the harness as
//! written, and a copy with any single flush or fence removed must be caught — by
//! the checker or by a correctness lint.

use crate::sim::{Budget, CrashInfo, CrashTest, Model, Report};
use crate::{Pool, PoolOptions};

use super::reference::{
    list_append, list_recover, undo_model, undo_recover, undo_setup, undo_tx, Mutant, LIST_SITES,
    POOL_SIZE, UNDO_SITES,
};

/// The list workload: three appends.
pub const LIST_VALUES: [u64; 3] = [11, 22, 33];

/// The undo-log workload: three transactions over both data lines.
pub fn undo_txs() -> Vec<Vec<(u64, u64)>> {
    vec![
        vec![(0, 1), (9, 2)],
        vec![(1, 3), (0, 4), (15, 5)],
        vec![(9, 6)],
    ]
}

fn test(model: Model, deny_lints: bool, pool_size: u64) -> CrashTest {
    CrashTest::new(PoolOptions::new("selftest", pool_size))
        .model(model)
        .deny_correctness_lints(deny_lints)
        .budget(Budget {
            exhaustive_up_to: 4096,
            k: 2,
            random: 64,
            seed: 1,
        })
}

/// Runs the list workload with `mutant` under `model`; correctness lints fail it
/// if `deny_lints`.
pub fn check_list(model: Model, mutant: Mutant, deny_lints: bool) -> Result<Report, String> {
    check_list_sized(model, mutant, deny_lints, POOL_SIZE)
}

/// [`check_list`] on a pool of `pool_size` bytes (the structure uses its first
/// [`POOL_SIZE`] bytes; the rest shows what a large pool costs the simulator).
pub fn check_list_sized(
    model: Model,
    mutant: Mutant,
    deny_lints: bool,
    pool_size: u64,
) -> Result<Report, String> {
    test(model, deny_lints, pool_size)
        .run(
            |_| Ok(()),
            |mut pool, sim| {
                for (n, &v) in LIST_VALUES.iter().enumerate() {
                    sim.op(n as u32, || list_append(&mut pool, v, mutant))
                        .map_err(|e| e.to_string())?;
                }
                Ok(())
            },
            |mut pool: Pool| list_recover(&mut pool),
            |values: &Vec<u64>, crash: &CrashInfo| {
                crash.expect_model(values, |ops| LIST_VALUES[..ops as usize].to_vec())
            },
        )
        .map_err(|f| f.to_string())
}

/// Runs the undo-log workload with `mutant` under `model`; correctness lints fail
/// it if `deny_lints`.
pub fn check_undo(model: Model, mutant: Mutant, deny_lints: bool) -> Result<Report, String> {
    check_undo_sized(model, mutant, deny_lints, POOL_SIZE)
}

/// [`check_undo`] on a pool of `pool_size` bytes.
pub fn check_undo_sized(
    model: Model,
    mutant: Mutant,
    deny_lints: bool,
    pool_size: u64,
) -> Result<Report, String> {
    let txs = undo_txs();
    test(model, deny_lints, pool_size)
        .run(
            |pool| undo_setup(pool).map_err(|e| e.to_string()),
            |mut pool, sim| {
                for (n, tx) in txs.iter().enumerate() {
                    sim.op(n as u32, || undo_tx(&mut pool, tx, mutant))
                        .map_err(|e| e.to_string())?;
                }
                Ok(())
            },
            |mut pool: Pool| undo_recover(&mut pool),
            |data: &Vec<u64>, crash: &CrashInfo| {
                crash.expect_model(data, |ops| undo_model(&txs[..ops as usize]))
            },
        )
        .map_err(|f| f.to_string())
}

/// One mutant's fate.
#[derive(Clone, Debug)]
pub struct MutantResult {
    /// Which flush or fence was removed.
    pub site: &'static str,
    /// Whether the harness (checker or correctness lint) failed it, as it must.
    pub caught: bool,
    /// Whether the checker alone (lints off) failed it too.
    pub caught_by_checker: bool,
    /// The first line of the failure, or why it was not caught.
    pub how: String,
}

type Check = fn(Model, Mutant, bool) -> Result<Report, String>;

/// Runs both structures unmutated (they must pass, lints included), then every
/// single-site mutant, with lints and with the checker alone.
pub fn run_all(model: Model) -> Result<Vec<MutantResult>, String> {
    check_list(model, Mutant::NONE, true).map_err(|e| format!("unmutated list failed: {e}"))?;
    check_undo(model, Mutant::NONE, true).map_err(|e| format!("unmutated undo log failed: {e}"))?;
    let structures: [(&[&'static str], Check); 2] =
        [(LIST_SITES, check_list), (UNDO_SITES, check_undo)];
    let mut out = Vec::new();
    for (sites, check) in structures {
        for (site, &name) in sites.iter().enumerate() {
            let with_lints = check(model, Mutant(Some(site)), true);
            let checker_alone = check(model, Mutant(Some(site)), false);
            out.push(MutantResult {
                site: name,
                caught: with_lints.is_err(),
                caught_by_checker: checker_alone.is_err(),
                how: match with_lints {
                    Err(e) => e.lines().next().unwrap_or("").to_owned(),
                    Ok(r) => format!("passed {} images without a failure", r.images_checked),
                },
            });
        }
    }
    Ok(out)
}
