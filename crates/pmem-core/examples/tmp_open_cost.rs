use std::time::Instant;
fn main() {
    let dir = std::env::args().nth(1).unwrap_or("/tmp".into());
    let path = std::path::Path::new(&dir).join("open_cost.pool");
    let _ = std::fs::remove_file(&path);
    pmem_core::Pool::create(&path, &pmem_core::PoolOptions::new("c", 1 << 20)).unwrap().close().unwrap();
    let f = std::fs::File::open(&path).unwrap();
    let n = 2000;
    let t = Instant::now();
    for _ in 0..n { std::hint::black_box(pmem_core::Platform::detect(&f, &path, 1 << 20)); }
    let detect = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    let mut times = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        pmem_core::Pool::open(&path, "c").unwrap().close().unwrap();
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let mut ro = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        drop(pmem_core::Pool::open_with(&path, &pmem_core::OpenOptions::new().read_only(true)).unwrap());
        ro.push(t.elapsed().as_secs_f64() * 1e6);
    }
    ro.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("{dir}: detect {detect:.1} us; open+close rw median {:.1} us; open+drop ro median {:.1} us", times[100], ro[100]);
    let _ = std::fs::remove_file(&path);
}
