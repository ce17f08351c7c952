//! Choosing which crash images to check at a crash point.
//!
//! When the exact count of cuts is within the budget, all of them (exhaustive).
//! Otherwise, in this order until the budget is spent: "nothing more persisted" and
//! "everything persisted"; every cut in which at most `k` units deviate from
//! "everything persisted", then from "nothing more persisted" (k-bounded, after
//! Chipmunk); then seeded random cuts. Duplicate cuts are dropped here; duplicate
//! images (different cuts, same bytes) are dropped by the harness.

use std::collections::HashSet;

use super::model::{CrashState, Cut};

/// How many images to check per crash point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Enumerate exhaustively when the count is at most this; otherwise the number of
    /// k-bounded cuts to take at most.
    pub exhaustive_up_to: u64,
    /// Maximum number of deviating units in k-bounded cuts.
    pub k: usize,
    /// Seeded random cuts added when not exhaustive.
    pub random: usize,
    /// Seed of the random cuts.
    pub seed: u64,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            exhaustive_up_to: 1024,
            k: 2,
            random: 32,
            seed: 0x5eed,
        }
    }
}

impl Budget {
    /// The default budget, scaled by the environment variable `PMKIT_SIM_DEPTH`
    /// (a multiplier, default 1), so CI stays fast and a developer can go deeper.
    pub fn from_env() -> Budget {
        let depth = std::env::var("PMKIT_SIM_DEPTH")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(1)
            .clamp(1, 1 << 20);
        let d = Budget::default();
        Budget {
            exhaustive_up_to: d.exhaustive_up_to.saturating_mul(depth),
            k: d.k + (depth as f64).log2() as usize,
            random: d.random.saturating_mul(depth as usize),
            seed: d.seed,
        }
    }
}

/// The cuts chosen at one crash point.
#[derive(Clone, Debug)]
pub struct Selection {
    /// The cuts, deduplicated.
    pub cuts: Vec<Cut>,
    /// Whether they are all the cuts there are.
    pub exhaustive: bool,
    /// Exact number of cuts at this point (saturating).
    pub count: u128,
}

impl CrashState<'_> {
    /// Chooses the cuts to check under `budget`.
    pub fn select(&self, budget: &Budget) -> Selection {
        let count = self.count();
        if count <= u128::from(budget.exhaustive_up_to) {
            return Selection {
                cuts: self.all_cuts(),
                exhaustive: true,
                count,
            };
        }
        let mut seen = HashSet::new();
        let mut cuts = Vec::new();
        let mut add = |c: Cut, cuts: &mut Vec<Cut>| {
            if seen.insert(c.clone()) {
                cuts.push(c);
            }
        };
        add(self.minimal(), &mut cuts);
        add(self.maximal(), &mut cuts);
        let cap = budget.exhaustive_up_to as usize;
        for deviations in 1..=budget.k {
            for from_max in [true, false] {
                self.k_bounded(deviations, from_max, cap, &mut |c| add(c, &mut cuts));
                if cuts.len() >= cap {
                    break;
                }
            }
        }
        cuts.truncate(cap.max(2));
        let mut rng = crate::SplitMix64::new(budget.seed ^ self.point() as u64);
        for _ in 0..budget.random {
            let c: Cut = self
                .in_flight()
                .iter()
                .map(|u| u.durable + rng.index(u.choices()))
                .collect();
            add(c, &mut cuts);
        }
        Selection {
            cuts,
            exhaustive: false,
            count,
        }
    }

    /// Every cut, in mixed-radix order (only called when the count is small).
    fn all_cuts(&self) -> Vec<Cut> {
        let units = self.in_flight();
        let mut cut = self.minimal();
        let mut out = vec![cut.clone()];
        loop {
            let mut i = 0;
            while i < units.len() {
                if cut[i] < units[i].max() {
                    cut[i] += 1;
                    break;
                }
                cut[i] = units[i].durable;
                i += 1;
            }
            if i == units.len() {
                return out;
            }
            out.push(cut.clone());
        }
    }

    /// Calls `emit` with cuts where exactly `deviations` units differ from the
    /// baseline (maximal if `from_max`, else minimal), until `cap` were emitted.
    fn k_bounded(&self, deviations: usize, from_max: bool, cap: usize, emit: &mut dyn FnMut(Cut)) {
        let units = self.in_flight();
        let base = if from_max {
            self.maximal()
        } else {
            self.minimal()
        };
        let mut emitted = 0usize;
        let mut chosen: Vec<usize> = Vec::with_capacity(deviations);
        // Depth-first over unit combinations, then over each chosen unit's values.
        fn combos(
            start: usize,
            left: usize,
            n: usize,
            chosen: &mut Vec<usize>,
            visit: &mut dyn FnMut(&[usize]) -> bool,
        ) -> bool {
            if left == 0 {
                return visit(chosen);
            }
            for u in start..n {
                chosen.push(u);
                let go_on = combos(u + 1, left - 1, n, chosen, visit);
                chosen.pop();
                if !go_on {
                    return false;
                }
            }
            true
        }
        combos(0, deviations, units.len(), &mut chosen, &mut |set| {
            // Alternatives for each chosen unit: every allowed prefix but the baseline's.
            let alts: Vec<Vec<usize>> = set
                .iter()
                .map(|&u| {
                    (units[u].durable..=units[u].max())
                        .filter(|&p| p != base[u])
                        .collect()
                })
                .collect();
            let mut idx = vec![0usize; set.len()];
            loop {
                let mut c = base.clone();
                for (j, &u) in set.iter().enumerate() {
                    c[u] = alts[j][idx[j]];
                }
                emit(c);
                emitted += 1;
                if emitted >= cap {
                    return false;
                }
                let mut j = 0;
                while j < idx.len() {
                    idx[j] += 1;
                    if idx[j] < alts[j].len() {
                        break;
                    }
                    idx[j] = 0;
                    j += 1;
                }
                if j == idx.len() {
                    return true;
                }
            }
        });
    }
}
