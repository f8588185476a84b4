//! `deep-recursion` (sandbox test): recurses without bound on the first
//! batch with a record.
//!
//! The recursion is not a tail call (work follows the call) and `black_box`
//! hides that it never ends, so the stack must overflow and the host must
//! turn that into a trap, not a crash.

use std::hint::black_box;

use weir_sdk::{Batch, Emitted, Error, OpenContext, Operator};

/// The recurser.
pub struct DeepRecursion;

/// Recurses forever; each frame keeps a small array alive across the call.
#[inline(never)]
fn recurse(depth: u64) -> u64 {
    let frame = black_box([depth; 16]);
    if black_box(depth == u64::MAX) {
        return frame[0];
    }
    recurse(black_box(depth + 1)).wrapping_add(black_box(frame)[15])
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
