//! Benchmark inputs: fixed-size records in packed batches, and the key
//! order of the keyed-count benchmarks.
//!
//! Everything here is deterministic, so two runs do the same work.

use weir_host::record::Batch;

/// Batch sizes every boundary and operator benchmark sweeps.
pub const BATCH_SIZES: [usize; 4] = [1, 16, 256, 4096];

/// Bytes of a record's value: the "100-byte records".
pub const VALUE_BYTES: usize = 100;

/// Bytes of a record's key where the benchmark uses keys.
pub const KEY_BYTES: usize = 8;

/// Distinct keys of the keyed-count benchmarks (as in `benches/state.rs`).
pub const COUNT_KEYS: u64 = 100_000;

/// Records per batch of the keyed-count benchmarks.
pub const COUNT_BATCH: usize = 1024;

/// Multiplier of the keyed-count visiting order (as in `benches/state.rs`);
/// coprime with [`COUNT_KEYS`], so `i * COUNT_STRIDE % COUNT_KEYS` visits
/// every key once per [`COUNT_KEYS`] records.
pub const COUNT_STRIDE: u64 = 48_271;

/// A value of `len` bytes whose content depends on `i` (so no two records
/// are the same and nothing can be deduplicated).
pub fn value(i: u64, len: usize) -> Vec<u8> {
    let mut v = vec![b'.'; len];
    let digits = i.to_string();
    let n = digits.len().min(len);
    v[..n].copy_from_slice(&digits.as_bytes()[..n]);
    v
}

/// An 8-byte key for record `i`.
pub fn key(i: u64) -> [u8; KEY_BYTES] {
    i.to_be_bytes()
}

/// `n` records without keys, each with a [`VALUE_BYTES`]-style value of
/// `value_bytes` bytes and timestamp `i`.
pub fn unkeyed_batch(n: usize, value_bytes: usize) -> Batch {
    let mut b = Batch::with_capacity(n, n * value_bytes);
    for i in 0..n as u64 {
        b.push(None, &value(i, value_bytes), i as i64);
    }
    b
}

/// `n` records with [`KEY_BYTES`]-byte keys and `value_bytes`-byte values.
pub fn keyed_batch(n: usize, value_bytes: usize) -> Batch {
    let mut b = Batch::with_capacity(n, n * (KEY_BYTES + value_bytes));
    for i in 0..n as u64 {
        b.push(Some(&key(i)), &value(i, value_bytes), i as i64);
    }
    b
}

/// The key of the `i`-th record of the keyed-count benchmarks: `user` and
/// 8 big-endian bytes (the layout `benches/state.rs` uses, so the raw
/// RocksDB numbers there are for the same keys).
pub fn count_key(i: u64) -> [u8; 12] {
    let mut k = *b"user\0\0\0\0\0\0\0\0";
    k[4..].copy_from_slice(&((i * COUNT_STRIDE) % COUNT_KEYS).to_be_bytes());
    k
}

/// Batches of [`COUNT_BATCH`] records that together visit every one of the
/// [`COUNT_KEYS`] keys at least once; key = value = the word, as `tokenize`
/// emits them.
pub fn count_batches() -> Vec<Batch> {
    let batches = (COUNT_KEYS as usize).div_ceil(COUNT_BATCH);
    (0..batches)
        .map(|b| {
            let mut batch = Batch::with_capacity(COUNT_BATCH, COUNT_BATCH * 24);
            for r in 0..COUNT_BATCH {
                let i = (b * COUNT_BATCH + r) as u64;
                let k = count_key(i);
                batch.push(Some(&k), &k, i as i64);
            }
            batch
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_batches_visit_every_key() {
        let mut seen = std::collections::HashSet::new();
        for b in count_batches() {
            b.validate().unwrap();
            for r in b.iter() {
                seen.insert(r.key.unwrap().to_vec());
            }
        }
        assert_eq!(seen.len() as u64, COUNT_KEYS);
    }

    #[test]
    fn batches_have_the_requested_shape() {
        let b = keyed_batch(16, VALUE_BYTES);
        b.validate().unwrap();
        assert_eq!(b.len(), 16);
        assert_eq!(b.data.len(), 16 * (KEY_BYTES + VALUE_BYTES));
        let u = unkeyed_batch(3, VALUE_BYTES);
        assert!(
            u.iter()
                .all(|r| r.key.is_none() && r.value.len() == VALUE_BYTES)
        );
    }
}
