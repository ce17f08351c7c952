//! What opening a pool costs now that it detects the platform once per open:
//! `Platform::detect` alone, a read-write open + close, a read-only open + drop
//! (medians of 200, in µs).
//!
//! ```text
//! cargo run --release -p pmem-core --example open_cost -- /tmp       # ext4 here
//! cargo run --release -p pmem-core --example open_cost -- /dev/shm   # tmpfs
//! ```

use std::path::Path;
use std::time::Instant;

use pmem_core::{OpenOptions, Platform, Pool, PoolOptions};

const SIZE: u64 = 1 << 20;
const ROUNDS: usize = 200;

fn median_us(mut f: impl FnMut()) -> f64 {
    let mut times: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[ROUNDS / 2]
}

fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "/tmp".to_owned());
    let path = Path::new(&dir).join("pmkit-open-cost.pool");
    let _ = std::fs::remove_file(&path);
    Pool::create(&path, &PoolOptions::new("cost", SIZE))
        .and_then(Pool::close)
        .expect("create the pool");
    let file = std::fs::File::open(&path).expect("open the pool file");
    let detect = median_us(|| {
        std::hint::black_box(Platform::detect(&file, &path, SIZE));
    });
    let rw = median_us(|| {
        Pool::open(&path, "cost")
            .and_then(Pool::close)
            .expect("read-write open");
    });
    let ro = median_us(|| {
        drop(Pool::open_with(&path, &OpenOptions::new().read_only(true)).expect("read-only open"));
    });
    println!("{dir}: detect {detect:.1} us; open+close read-write {rw:.1} us; open+drop read-only {ro:.1} us");
    let _ = std::fs::remove_file(&path);
}
