//! A fast, per-instance seeded hasher for the in-memory maps of the state
//! backends (the RocksDB write-back buffer and the heap tables) and of the
//! host's window operator.
//!
//! Keys are short byte strings from untrusted records, so the hash is xxh3
//! (fast on short inputs) with a random seed per map builder, which keeps
//! collision flooding impractical. Only in-memory: never used for anything
//! that is stored (that is [`super::key_group_of`]'s job).

use std::hash::{BuildHasher, Hasher, RandomState};

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Builds [`FastHasher`]s that share one random seed.
#[derive(Clone, Debug)]
pub struct FastHashBuilder {
    seed: u64,
}

impl Default for FastHashBuilder {
    fn default() -> Self {
        Self {
            seed: RandomState::new().hash_one(0x5eed_u64),
        }
    }
}

impl BuildHasher for FastHashBuilder {
    type Hasher = FastHasher;

    #[inline]
    fn build_hasher(&self) -> FastHasher {
        FastHasher {
            seed: self.seed,
            hash: 0,
        }
    }
}

/// xxh3 over each `write`, chained through the seed.
pub struct FastHasher {
    seed: u64,
    hash: u64,
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        self.hash = xxh3_64_with_seed(bytes, self.seed ^ self.hash);
    }

    /// Length prefixes (`[u8]`'s `Hash` writes one before the bytes) are
    /// mixed in cheaply instead of hashing 8 more bytes.
    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.hash = (self.hash ^ n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

/// A `HashMap` with [`FastHashBuilder`].
pub type FastHashMap<K, V> = std::collections::HashMap<K, V, FastHashBuilder>;
