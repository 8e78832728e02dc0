//! Hashing for tables keyed by integers the libraries choose or hand out
//! themselves (object addresses, queue pair numbers, memory keys). std's
//! SipHash resists keys picked to collide, which such keys cannot be (a remote
//! peer may send any key, but only the library inserts them), and costs some
//! 80 instructions on every lookup, which every verb makes.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Mixes an integer key into a hash whose low and high bits all vary (tables
/// take their slot from the low bits, hashbrown its tag from the high ones): an
/// address's low bits are alignment zeros, and allocations of one size sit at a
/// fixed stride, which a single multiplication maps onto few slots. SplitMix64's
/// finalizer: two multiplications.
#[inline]
pub fn mix(k: u64) -> u64 {
    let mut z = k.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A `Hasher` for one integer key (`write_*` of a single value, then `finish`).
#[derive(Default, Clone, Copy)]
pub struct IntHasher(u64);

impl Hasher for IntHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = n as u64;
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = n as u64;
    }
    fn finish(&self) -> u64 {
        mix(self.0)
    }
}

/// A `HashMap` keyed by such integers.
pub type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_addresses_spread_over_low_and_high_bits() {
        let mut low = std::collections::HashSet::new();
        let mut high = std::collections::HashSet::new();
        for i in 0..64u64 {
            let h = mix(0x5555_0000_1000 + i * 0x40);
            low.insert(h & 63);
            high.insert(h >> 57);
        }
        assert!(low.len() > 32 && high.len() > 32, "low {} high {}", low.len(), high.len());
    }

    #[test]
    fn sequential_u32_keys_spread_through_the_hasher() {
        // QP numbers count up; the map hashes them through write_u32 + finish.
        use std::hash::BuildHasher;
        let b = BuildHasherDefault::<IntHasher>::default();
        let low: std::collections::HashSet<u64> = (0..64u32).map(|k| b.hash_one(0x100 + k) & 63).collect();
        assert!(low.len() > 32, "low {}", low.len());
        let mut m: IntMap<u32, u32> = IntMap::default();
        m.extend((0..1000).map(|k| (k * 7, k)));
        assert!((0..1000).all(|k| m.get(&(k * 7)) == Some(&k)) && !m.contains_key(&1));
    }
}
