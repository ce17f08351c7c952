//! The names the `--json` line must hold (dotted paths), shared by the report's
//! unit test and the smoke test that runs the example (`tests/collections_bench.rs`).

/// Every figure the issue asks for, by its path in the JSON object.
pub const REQUIRED: &[&str] = &[
    "hashmap_insert_ns.pmkit",
    "hashmap_insert_ns.pmdk",
    "hashmap_insert_ns.std",
    "hashmap_get_ns.pmkit",
    "hashmap_get_ns.std",
    "hashmap_remove_ns.pmkit",
    "hashmap_v64_insert_ns.pmkit",
    "hashmap_v64_insert_ns.pmdk",
    "hashmap_v64_insert_ns.std",
    "hashmap_v64_get_ns.pmkit",
    "hashmap_v64_get_ns.std",
    "hashmap_v64_remove_ns.pmkit",
    "btree_insert_ns.pmkit",
    "btree_insert_ns.std",
    "btree_get_ns.pmkit",
    "btree_get_ns.std",
    "btree_range100_ns.pmkit",
    "btree_v64_insert_ns.pmkit",
    "btree_v64_get_ns.pmkit",
    "vec_push_ns.pmkit",
    "vec_push_ns.std",
    "cmap_ops_per_sec.t1",
    "cmap_ops_per_sec.t2",
    "cmap_scaling_2t",
    "flushes_per_insert.hashmap",
    "flushes_per_insert.btree",
    "fences_per_insert.hashmap",
    "fences_per_insert.btree",
    "durable.hashmap_insert_ns.pmkit",
    "durable.hashmap_insert_ns.pmdk",
    "durable.btree_insert_ns.pmkit",
    "durable.vec_push_ns.pmkit",
    "durable.cmap_ops_per_sec.t1",
    "durable.cmap_ops_per_sec.t2",
    "durable.cmap_scaling_2t",
    "met_targets.hashmap_insert_le_0_6x_pmdk",
    "met_targets.hashmap_get_le_3x_std",
    "met_targets.btree_get_le_3x_std",
    "met_targets.cmap_scaling_2t_ge_1_6",
    "met_targets.fences_per_insert_hashmap_le_2",
];

/// The value at dotted `path` in `v` (`None` if a step is missing; a present
/// `null` — a peer not installed — is `Some(Null)`).
pub fn lookup<'a>(v: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    path.split('.').try_fold(v, |v, step| v.get(step))
}
