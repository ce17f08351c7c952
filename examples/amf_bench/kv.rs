//! A Redis-like key-value workload that is memory-hungry: a
//! `HashMap<u64, Box<[u8]>>` of 4 KiB values (the AMF paper's Table 5: 4 kB data,
//! random keys, `set`/`get` requests).
//!
//! Table 5 gives the sizes (400 k random keys, 4 kB values, 30 M requests,
//! pipeline 512) but no set:get ratio — `redis-benchmark` runs its `SET` and `GET`
//! tests one after the other. So the workload is:
//! 1. **fill**: one `set` of every key (`footprint_bytes / 4096` keys), which is
//!    what makes the working set reach the footprint;
//! 2. **mix**: `ops` requests on uniformly random keys, 50 % `get` and 50 % `set`
//!    overwriting the value (a new 4 KiB allocation, the old one freed after, as
//!    Redis replaces a value object).
//!
//! Both phases are timed; `ops` of the result counts both. Every value's bytes are
//! a function of `(seed, key, version)` ([`crate::verify::content_seed`]); a
//! shadow of one `u32` version per key lets every `get` check its whole value,
//! and after the timed phases every live key is read back and checked (not
//! timed). All memory comes from the global allocator (plain `Box`/`HashMap`),
//! so the same code measures whichever `#[global_allocator]` the binary has.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::verify::{check_stream, content_seed, fill_stream, SplitMix64, VerifyError};

/// Bytes of every value (Table 5: data size 4 kB).
pub const VALUE_BYTES: usize = 4096;

/// One run of the workload.
#[derive(Clone, Copy, Debug)]
pub struct KvConfig {
    /// Live value bytes at the peak: `footprint_bytes / 4096` keys (at least 1).
    pub footprint_bytes: u64,
    /// Requests of the mix phase (after the fill).
    pub ops: u64,
    /// Seed of the key choice and of the value contents.
    pub seed: u64,
}

/// What a run did and how fast.
#[derive(Clone, Copy, Debug)]
pub struct KvResult {
    /// Requests timed: the fill's sets plus the mix's.
    pub ops: u64,
    /// Sets of the fill phase (the number of keys).
    pub fill_sets: u64,
    /// Time of the fill and mix phases.
    pub elapsed: Duration,
    /// `ops / elapsed`.
    pub ops_per_sec: f64,
    /// Values compared whole: every `get` and the final read-back.
    pub values_verified: u64,
    /// Approximate live bytes at the peak: the values (one extra during an
    /// overwrite), the hash table's slots and the shadow.
    pub peak_live_bytes: u64,
}

/// A new value of `(seed, key, version)`.
fn make_value(seed: u64, key: u64, version: u32) -> Box<[u8]> {
    let mut v = vec![0u8; VALUE_BYTES];
    fill_stream(&mut v, content_seed(seed, key, version));
    v.into_boxed_slice()
}

/// Checks `value` whole against `(seed, key, version)`.
fn check_value(seed: u64, key: u64, version: u32, value: &[u8]) -> Result<(), VerifyError> {
    let bad = if value.len() != VALUE_BYTES {
        Some(value.len().min(VALUE_BYTES))
    } else {
        check_stream(value, content_seed(seed, key, version))
    };
    match bad {
        None => Ok(()),
        Some(offset) => Err(VerifyError::Value {
            key,
            version,
            offset,
        }),
    }
}

/// Approximate bytes of the hash table's slots (key, boxed-slice pointer and
/// length, one control byte each).
fn table_bytes(map: &HashMap<u64, Box<[u8]>>) -> u64 {
    let slot = std::mem::size_of::<(u64, Box<[u8]>)>() + 1;
    (map.capacity() * slot) as u64
}

/// Runs the workload of `cfg` and verifies it.
///
/// # Errors
///
/// [`VerifyError`] when a value read back differs from what was written, or a
/// key is missing: the heap under test corrupted or lost memory.
pub fn run_kv(cfg: &KvConfig) -> Result<KvResult, VerifyError> {
    let keys = (cfg.footprint_bytes / VALUE_BYTES as u64).max(1);
    let seed = cfg.seed;
    let mut rng = SplitMix64::new(seed ^ 0x6b76_5f6d_6978_2121);
    let mut versions: Vec<u32> = vec![1; keys as usize];
    let shadow_bytes = (versions.capacity() * std::mem::size_of::<u32>()) as u64;
    let mut map: HashMap<u64, Box<[u8]>> = HashMap::new();
    let mut verified = 0u64;
    let start = Instant::now();

    // Fill: one set of every key.
    for key in 0..keys {
        map.insert(key, make_value(seed, key, 1));
    }
    let live_values = keys * VALUE_BYTES as u64;
    // An overwrite allocates the new value before the old one is freed.
    let peak = live_values + VALUE_BYTES as u64 + table_bytes(&map) + shadow_bytes;

    // Mix: 50 % get (checked whole), 50 % overwriting set.
    for _ in 0..cfg.ops {
        let r = rng.next_u64();
        let key = ((u128::from(r >> 1) * u128::from(keys)) >> 63) as u64;
        let slot = &mut versions[key as usize];
        if r & 1 == 0 {
            let value = map.get(&key).ok_or(VerifyError::Missing {
                what: "kv key",
                key,
            })?;
            check_value(seed, key, *slot, value)?;
            verified += 1;
        } else {
            *slot = slot.wrapping_add(1);
            let fresh = make_value(seed, key, *slot);
            if map.insert(key, fresh).is_none() {
                return Err(VerifyError::Missing {
                    what: "kv key",
                    key,
                });
            }
        }
    }
    let elapsed = start.elapsed();

    // Read every live key back.
    if map.len() as u64 != keys {
        return Err(VerifyError::Count {
            what: "kv map",
            expected: keys,
            found: map.len() as u64,
        });
    }
    for (key, &version) in versions.iter().enumerate() {
        let key = key as u64;
        let value = map.get(&key).ok_or(VerifyError::Missing {
            what: "kv key",
            key,
        })?;
        check_value(seed, key, version, value)?;
        verified += 1;
    }

    let ops = keys + cfg.ops;
    let secs = elapsed.as_secs_f64();
    Ok(KvResult {
        ops,
        fill_sets: keys,
        elapsed,
        ops_per_sec: if secs > 0.0 { ops as f64 / secs } else { 0.0 },
        values_verified: verified,
        peak_live_bytes: peak,
    })
}
