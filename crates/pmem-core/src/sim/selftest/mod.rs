//! The simulator's own test suites, as library code so both `cargo test` and the
//! `crash_selftest` example run them: Px86 litmus tests ([`litmus`]), reference
//! structures ([`reference`](mod@reference)) and the mutation suite over them ([`mutation`]), and a
//! throughput run ([`throughput`]).

pub mod litmus;
pub mod mutation;
pub mod reference;

use std::time::Instant;

use super::Model;

/// Result of a throughput run.
#[derive(Clone, Copy, Debug)]
pub struct Throughput {
    /// Crash images recovered and checked.
    pub images: u64,
    /// Wall time in seconds.
    pub seconds: f64,
}

impl Throughput {
    /// Images per second.
    pub fn images_per_sec(&self) -> f64 {
        if self.seconds > 0.0 {
            self.images as f64 / self.seconds
        } else {
            0.0
        }
    }
}

/// Checks crash images of the reference structures (under every model, repeated)
/// until at least `min_images` were checked, and times it.
pub fn throughput(min_images: u64) -> Result<Throughput, String> {
    throughput_sized(min_images, reference::POOL_SIZE)
}

/// [`throughput`] with the reference structures in a pool of `pool_size` bytes:
/// images are copy-on-write and recording scans only the lines handed out, so a
/// large pool should cost little more than a small one.
pub fn throughput_sized(min_images: u64, pool_size: u64) -> Result<Throughput, String> {
    let start = Instant::now();
    let mut images = 0u64;
    // Bounded: each round checks hundreds of images; the bound only guards against
    // a report of zero images looping forever.
    for _ in 0..100_000 {
        if images >= min_images {
            break;
        }
        for model in [Model::Line, Model::Word, Model::Eadr] {
            let none = reference::Mutant::NONE;
            let a = mutation::check_list_sized(model, none, true, pool_size)?;
            let b = mutation::check_undo_sized(model, none, true, pool_size)?;
            let round =
                a.images_checked + a.second_crash_images + b.images_checked + b.second_crash_images;
            if round == 0 {
                return Err("a throughput round checked no image".into());
            }
            images += round;
        }
    }
    Ok(Throughput {
        images,
        seconds: start.elapsed().as_secs_f64(),
    })
}
