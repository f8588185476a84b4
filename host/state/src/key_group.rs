//! Key groups: how keys are spread over the parallel subtasks of a keyed operator.
//!
//! Owns [`KeyGroup`], [`KeyGroupRange`], [`key_group_of`] and the two pieces of
//! Flink's `KeyGroupRangeAssignment` that Weir needs:
//! [`key_group_range_for_subtask`] and [`subtask_for_key_group`].
//!
//! Invariants:
//! * A key's key group depends only on its bytes and `max_parallelism`
//!   (`xxh3_64(key) % max_parallelism`). It is written into every stored
//!   state key and into checkpoints and savepoints, so **it must never
//!   change**: a different hash would silently make restored state
//!   unreachable.
//! * For a fixed `(max_parallelism, parallelism)`, the ranges of all subtasks
//!   are contiguous, disjoint and cover `[0, max_parallelism)`; a key group's
//!   subtask (as computed by [`subtask_for_key_group`]) is the one whose
//!   range contains it. Rescaling therefore moves whole key-group ranges.
//!
//! Pure arithmetic: no storage, no Wasm, no job types.

use std::fmt;

use xxhash_rust::xxh3::xxh3_64;

/// The default number of key groups (`max_parallelism` in the job spec), as in Flink.
///
/// It bounds how far a keyed operator can later be scaled out, and costs
/// nothing at runtime; 128 matches Flink's default for small jobs.
pub const DEFAULT_MAX_PARALLELISM: u16 = 128;

/// One of the `max_parallelism` buckets that keys hash to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyGroup(pub u16);

impl fmt::Display for KeyGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A contiguous range of key groups `[start, end)`; what one subtask owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyGroupRange {
    /// First key group in the range.
    pub start: u16,
    /// One past the last key group in the range.
    pub end: u16,
}

impl KeyGroupRange {
    /// The range `[start, end)`.
    pub const fn new(start: u16, end: u16) -> Self {
        Self { start, end }
    }

    /// All key groups `[0, max_parallelism)`: what a subtask of a
    /// parallelism-1 operator owns.
    pub const fn all(max_parallelism: u16) -> Self {
        Self {
            start: 0,
            end: max_parallelism,
        }
    }

    /// Whether `kg` lies in the range.
    pub const fn contains(&self, kg: KeyGroup) -> bool {
        self.start <= kg.0 && kg.0 < self.end
    }

    /// The number of key groups in the range (0 if `end <= start`).
    pub const fn len(&self) -> u16 {
        self.end.saturating_sub(self.start)
    }

    /// Whether the range holds no key group.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The key groups in the range, in order.
    pub fn iter(&self) -> impl Iterator<Item = KeyGroup> + use<> {
        (self.start..self.end).map(KeyGroup)
    }
}

impl fmt::Display for KeyGroupRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}, {})", self.start, self.end)
    }
}

/// The key group of `key`: `xxh3_64(key) % max_parallelism`.
///
/// Stable forever: this value is baked into stored state, checkpoints and
/// savepoints, so changing the hash (or its seed) breaks every existing
/// savepoint.
///
/// # Panics
/// If `max_parallelism` is 0.
#[inline]
pub fn key_group_of(key: &[u8], max_parallelism: u16) -> KeyGroup {
    assert!(max_parallelism > 0, "max_parallelism must be at least 1");
    // The remainder is < max_parallelism <= u16::MAX, so the cast is lossless.
    KeyGroup((xxh3_64(key) % u64::from(max_parallelism)) as u16)
}

/// The key groups subtask `subtask` of `parallelism` owns, as Flink's
/// `KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex`:
/// `[ceil(subtask * max / p), ceil((subtask + 1) * max / p))`.
///
/// When `parallelism > max_parallelism` some subtasks own an empty range.
///
/// # Panics
/// If `max_parallelism` or `parallelism` is 0, or `subtask >= parallelism`.
pub fn key_group_range_for_subtask(
    max_parallelism: u16,
    parallelism: u32,
    subtask: u32,
) -> KeyGroupRange {
    assert!(max_parallelism > 0, "max_parallelism must be at least 1");
    assert!(parallelism > 0, "parallelism must be at least 1");
    assert!(
        subtask < parallelism,
        "subtask {subtask} out of range for parallelism {parallelism}"
    );
    let (max, p, i) = (
        u64::from(max_parallelism),
        u64::from(parallelism),
        u64::from(subtask),
    );
    // Flink: start = (i*max + p - 1) / p; end (inclusive) = ((i+1)*max - 1) / p.
    let start = (i * max).div_ceil(p);
    let end = ((i + 1) * max - 1) / p + 1;
    // Both are <= max <= u16::MAX.
    KeyGroupRange {
        start: start as u16,
        end: end as u16,
    }
}

/// The subtask that owns `kg`, as Flink's
/// `KeyGroupRangeAssignment.computeOperatorIndexForKeyGroup`:
/// `kg * parallelism / max_parallelism`.
///
/// # Panics
/// If `max_parallelism` is 0. `kg` is expected to be `< max_parallelism`.
pub fn subtask_for_key_group(max_parallelism: u16, parallelism: u32, kg: KeyGroup) -> u32 {
    assert!(max_parallelism > 0, "max_parallelism must be at least 1");
    debug_assert!(
        kg.0 < max_parallelism,
        "key group {kg} >= max_parallelism {max_parallelism}"
    );
    // < parallelism because kg < max_parallelism.
    (u64::from(kg.0) * u64::from(parallelism) / u64::from(max_parallelism)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (max_parallelism, parallelism) pairs covering p = 1, p = max, p > max,
    /// primes, powers of two and the extremes of u16.
    fn pairs() -> Vec<(u16, u32)> {
        let maxes = [
            1u16,
            2,
            3,
            7,
            10,
            64,
            127,
            128,
            129,
            1000,
            4096,
            32768,
            u16::MAX,
        ];
        let pars = [
            1u32, 2, 3, 4, 5, 7, 8, 16, 31, 64, 100, 127, 128, 129, 200, 1000,
        ];
        maxes
            .iter()
            .flat_map(|&m| pars.iter().map(move |&p| (m, p)))
            .collect()
    }

    #[test]
    fn subtask_ranges_partition_all_key_groups() {
        for (max, p) in pairs() {
            let mut next = 0u16;
            for i in 0..p {
                let r = key_group_range_for_subtask(max, p, i);
                assert_eq!(r.start, next, "max={max} p={p} subtask={i}: gap or overlap");
                assert!(r.start <= r.end, "max={max} p={p} subtask={i}: {r}");
                next = r.end;
            }
            assert_eq!(next, max, "max={max} p={p}: ranges do not end at max");
        }
    }

    #[test]
    fn every_key_group_maps_to_the_subtask_whose_range_contains_it() {
        for (max, p) in pairs() {
            let ranges: Vec<_> = (0..p)
                .map(|i| key_group_range_for_subtask(max, p, i))
                .collect();
            for kg in (0..max).map(KeyGroup) {
                let owner = subtask_for_key_group(max, p, kg);
                assert!(owner < p);
                let holders: Vec<_> = (0..p)
                    .filter(|&i| ranges[i as usize].contains(kg))
                    .collect();
                assert_eq!(holders, vec![owner], "max={max} p={p} kg={kg}");
            }
        }
    }

    #[test]
    fn ranges_are_balanced_within_one() {
        for (max, p) in pairs() {
            let lens: Vec<_> = (0..p)
                .map(|i| key_group_range_for_subtask(max, p, i).len())
                .collect();
            let (lo, hi) = (lens.iter().min().unwrap(), lens.iter().max().unwrap());
            assert!(hi - lo <= 1, "max={max} p={p}: {lens:?}");
        }
    }

    #[test]
    fn matches_flink_examples() {
        // Values computed with Flink's KeyGroupRangeAssignment.
        assert_eq!(
            key_group_range_for_subtask(128, 3, 0),
            KeyGroupRange::new(0, 43)
        );
        assert_eq!(
            key_group_range_for_subtask(128, 3, 1),
            KeyGroupRange::new(43, 86)
        );
        assert_eq!(
            key_group_range_for_subtask(128, 3, 2),
            KeyGroupRange::new(86, 128)
        );
        assert_eq!(subtask_for_key_group(128, 3, KeyGroup(42)), 0);
        assert_eq!(subtask_for_key_group(128, 3, KeyGroup(43)), 1);
        assert_eq!(
            key_group_range_for_subtask(2, 4, 1),
            KeyGroupRange::new(1, 1)
        );
    }

    #[test]
    fn key_group_of_is_stable() {
        // Pinned values: if this test fails, the key-group hash changed and
        // every existing savepoint would be read with the wrong key groups.
        assert_eq!(xxh3_64(b""), 0x2d06_8005_38d3_94c2);
        assert_eq!(
            key_group_of(b"", 128),
            KeyGroup((0x2d06_8005_38d3_94c2u64 % 128) as u16)
        );
        for key in [&b"a"[..], b"ab", b"user-42", &[0u8; 100]] {
            let kg = key_group_of(key, DEFAULT_MAX_PARALLELISM);
            assert_eq!(kg.0 as u64, xxh3_64(key) % 128);
            assert!(kg.0 < DEFAULT_MAX_PARALLELISM);
        }
        assert_eq!(key_group_of(b"anything", 1), KeyGroup(0));
    }

    #[test]
    fn key_groups_spread_keys() {
        let mut counts = [0u32; 128];
        for i in 0..128_000u32 {
            counts[key_group_of(&i.to_le_bytes(), 128).0 as usize] += 1;
        }
        // Expect ~1000 each; a hash this poor would be a bug.
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn range_basics() {
        let r = KeyGroupRange::new(3, 6);
        assert_eq!(r.len(), 3);
        assert!(!r.is_empty());
        assert!(r.contains(KeyGroup(3)) && r.contains(KeyGroup(5)));
        assert!(!r.contains(KeyGroup(2)) && !r.contains(KeyGroup(6)));
        assert_eq!(
            r.iter().collect::<Vec<_>>(),
            vec![KeyGroup(3), KeyGroup(4), KeyGroup(5)]
        );
        assert!(KeyGroupRange::new(4, 4).is_empty());
        assert_eq!(r.to_string(), "[3, 6)");
        assert_eq!(KeyGroupRange::all(128), KeyGroupRange::new(0, 128));
    }
}
