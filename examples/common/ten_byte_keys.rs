//! The store benchmarks' keys and values: 10 bytes each, `k` or `v` and nine
//! decimal digits, shared by the `store_bench` example and the `store` bench so the
//! two measure the same records.

/// Key `i`: `k` and nine decimal digits.
pub fn key(i: u64) -> [u8; 10] {
    let mut k = *b"k000000000";
    let mut n = i;
    for d in k[1..].iter_mut().rev() {
        *d = b'0' + (n % 10) as u8;
        n /= 10;
    }
    k
}

/// Value `i`: its key with `v` for `k`.
pub fn value(i: u64) -> [u8; 10] {
    let mut v = key(i);
    v[0] = b'v';
    v
}
