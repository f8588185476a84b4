//! `spin` (sandbox test): loops forever on the first batch with a record.
//!
//! The host's CPU budget (epoch interruption or fuel) must stop it.
//! `black_box` keeps the loop from being optimized away.

use std::hint::black_box;

use weir_sdk::{Batch, Emitted, Error, OpenContext, Operator};

/// The spinner.
pub struct Spin;

impl Operator for Spin {
    fn open(_ctx: &OpenContext) -> Result<Self, Error> {
        Ok(Spin)
    }

    fn process(&mut self, input: Batch) -> Result<Emitted, Error> {
        if input.is_empty() {
            return Ok(Emitted::empty());
        }
        let mut counter = 0u64;
        loop {
            counter = black_box(counter).wrapping_add(1);
        }
    }
}

weir_sdk::export_operator!(Spin);
