//! `sleep` (sandbox test): sleeps for an hour on the first batch with a record.
//!
//! A sleep is a blocking WASI call (a monotonic-clock subscription, then a
//! poll) made by the host on the guest's behalf: the epoch deadline that
//! stops a spinning guest cannot interrupt it. The host must refuse it.

use std::time::Duration;

use weir_sdk::{Batch, Emitted, Error, OpenContext, Operator};

/// The sleeper.
pub struct Sleep;

impl Operator for Sleep {
    fn open(_ctx: &OpenContext) -> Result<Self, Error> {
        Ok(Sleep)
    }

    fn process(&mut self, input: Batch) -> Result<Emitted, Error> {
        if !input.is_empty() {
            std::thread::sleep(Duration::from_secs(3600));
        }
        Ok(Emitted::main(input))
    }
}

weir_sdk::export_operator!(Sleep);
