//! Shared pieces of the property-based fuzz tests of every decoder of
//! untrusted bytes (tests only).
//!
//! The fuzz properties live next to what they test:
//! `net::fuzz_tests` (data-plane decoder and stream header),
//! `rpc::fuzz_tests` (control frames), `checkpoint::fuzz_tests` (what a
//! restore parses back from checkpoint storage) and `job::tests::fuzz`
//! (job spec, `--set` overrides, validation). This module holds what they
//! share: the [`config`] every property runs with and [`Mutation`]s of
//! valid encodings (truncation, bit flips, length fields set to huge
//! values).
//!
//! Cases per property: proptest's default of 256, or `PROPTEST_CASES` for a
//! longer run (SECURITY.md, "Fuzzing", has the command). A failing case is
//! shrunk and printed; it is kept as a named regression test beside the
//! property, not in a `proptest-regressions` file.

use proptest::prelude::*;
use proptest::test_runner::Config;

/// The configuration of every fuzz property: proptest's defaults
/// (`PROPTEST_CASES` from the environment, 256 otherwise), without
/// persistence files in the source tree.
pub fn config() -> Config {
    Config {
        failure_persistence: None,
        ..Config::default()
    }
}

/// Values a corrupt length field most likely holds: the edges of each
/// integer width, and sizes just past the limits Weir enforces.
const HUGE: [u32; 8] = [
    u32::MAX,
    u32::MAX - 1,
    0x8000_0000,
    0x7fff_ffff,
    1 << 30,
    (1 << 24) + 1,
    0xffff,
    0,
];

/// One change to a valid encoding. Positions are taken modulo the input's
/// length, so a mutation applies to input of any size.
#[derive(Debug, Clone)]
pub enum Mutation {
    /// Cut the input at a position.
    Truncate(usize),
    /// Flip one bit.
    FlipBit(usize, u8),
    /// Overwrite one byte.
    SetByte(usize, u8),
    /// Overwrite four bytes with a huge (or zero) length, little-endian.
    HugeLe(usize, usize),
    /// The same, big-endian (the control frames' prefix).
    HugeBe(usize, usize),
    /// Insert bytes at a position.
    Insert(usize, Vec<u8>),
    /// Remove up to `n` bytes from a position.
    Remove(usize, usize),
}

/// A random [`Mutation`].
pub fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), 0..8u8).prop_map(|(at, bit)| Mutation::FlipBit(at, bit)),
        (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Mutation::SetByte(at, b)),
        (any::<usize>(), 0..HUGE.len()).prop_map(|(at, h)| Mutation::HugeLe(at, h)),
        (any::<usize>(), 0..HUGE.len()).prop_map(|(at, h)| Mutation::HugeBe(at, h)),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, b)| Mutation::Insert(at, b)),
        (any::<usize>(), 1..64usize).prop_map(|(at, n)| Mutation::Remove(at, n)),
    ]
}

/// One to eight random mutations.
pub fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(mutation(), 1..8)
}

/// Applies `mutations` to `bytes`, in order.
pub fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        let len = bytes.len();
        let at = |i: usize| if len == 0 { 0 } else { i % len };
        match m {
            Mutation::Truncate(i) => bytes.truncate(at(*i)),
            Mutation::FlipBit(i, bit) if len > 0 => bytes[at(*i)] ^= 1 << bit,
            Mutation::SetByte(i, b) if len > 0 => bytes[at(*i)] = *b,
            Mutation::HugeLe(i, h) if len >= 4 => {
                let i = i % (len - 3);
                bytes[i..i + 4].copy_from_slice(&HUGE[*h].to_le_bytes());
            }
            Mutation::HugeBe(i, h) if len >= 4 => {
                let i = i % (len - 3);
                bytes[i..i + 4].copy_from_slice(&HUGE[*h].to_be_bytes());
            }
            Mutation::Insert(i, b) => {
                let i = if len == 0 { 0 } else { i % (len + 1) };
                bytes.splice(i..i, b.iter().copied());
            }
            Mutation::Remove(i, n) if len > 0 => {
                let i = at(*i);
                bytes.drain(i..(i + n).min(len));
            }
            _ => {}
        }
    }
    bytes
}

/// Cut points that split an input of `len` bytes into pieces, as a network
/// would: each entry is the length of the next piece (at least 1).
pub fn cuts() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1..64usize, 1..16)
}

/// `bytes` split by `cuts` (repeated as needed; the rest in the last piece).
pub fn split<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    if cuts.is_empty() {
        return vec![bytes];
    }
    let mut pieces = Vec::new();
    let mut rest = bytes;
    for &cut in cuts.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (piece, tail) = rest.split_at(cut.min(rest.len()));
        pieces.push(piece);
        rest = tail;
    }
    pieces
}
