//! `panic` (sandbox test): panics on the first batch with a record.
//!
//! A panic in Wasm aborts, i.e. traps; the host must fail the task with a
//! clear error and keep running.

use weir_sdk::{Batch, Emitted, Error, OpenContext, Operator};

/// The panicker.
pub struct Panic;

impl Operator for Panic {
    fn open(_ctx: &OpenContext) -> Result<Self, Error> {
        Ok(Panic)
    }

    fn process(&mut self, input: Batch) -> Result<Emitted, Error> {
        if input.is_empty() {
            return Ok(Emitted::empty());
        }
        panic!("weir-test-panic: boom");
    }
}

weir_sdk::export_operator!(Panic);
