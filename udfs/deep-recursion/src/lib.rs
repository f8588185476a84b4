//! `deep-recursion` (sandbox test): recurses without bound on the first
//! batch with a record.
//!
//! The recursion is not a tail call (work follows the call) and `black_box`
//! hides that it never ends, so the Wasm call stack must overflow and the
//! host must turn that into a trap, not a crash.

use std::hint::black_box;

use weir_sdk::{Batch, Emitted, Error, OpenContext, Operator};

/// The recurser.
pub struct DeepRecursion;

/// Recurses forever. Only scalars live in a frame, so the frames sit on
/// Wasm's own call stack (which the host limits and reports as a stack
/// overflow), not on the shadow stack in linear memory.
#[inline(never)]
fn recurse(depth: u64) -> u64 {
    if black_box(depth == u64::MAX) {
        return depth;
    }
    recurse(black_box(depth + 1)).wrapping_add(black_box(depth))
}

impl Operator for DeepRecursion {
    fn open(_ctx: &OpenContext) -> Result<Self, Error> {
        Ok(DeepRecursion)
    }

    fn process(&mut self, input: Batch) -> Result<Emitted, Error> {
        if input.is_empty() {
            return Ok(Emitted::empty());
        }
        black_box(recurse(0));
        Ok(Emitted::empty())
    }
}

weir_sdk::export_operator!(DeepRecursion);
