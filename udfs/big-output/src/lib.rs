//! `big-output` (sandbox test): emits one huge record per batch with a record.
//!
//! Config `bytes` (default 32 MiB): the value's size. The host's output-size
//! limit must reject it with a clear error.

use weir_sdk::{Batch, BatchBuilder, Emitted, Error, OpenContext, Operator};

/// The default size of the value.
const DEFAULT_BYTES: u64 = 32 << 20;

/// The emitter.
pub struct BigOutput {
    bytes: usize,
}

impl Operator for BigOutput {
    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        let bytes = ctx.config().get_u64("bytes")?.unwrap_or(DEFAULT_BYTES);
        Ok(BigOutput {
            bytes: usize::try_from(bytes)?,
        })
    }

    fn process(&mut self, input: Batch) -> Result<Emitted, Error> {
        if input.is_empty() {
            return Ok(Emitted::empty());
        }
        let mut out = BatchBuilder::with_capacity(1, self.bytes);
        out.push_with(None, 0, |value| value.resize(self.bytes, b'x'));
        Ok(Emitted::main(out.finish()))
    }
}

weir_sdk::export_operator!(BigOutput);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::Record;
    use weir_sdk::testing::Harness;

    #[test]
    fn emits_one_record_of_the_configured_size() -> Result<(), Error> {
        let mut h = Harness::<BigOutput>::open(&[("bytes", "1000")])?;
        assert!(h.process([])?.is_empty());
        let out = h.process([Record::new("go", 1)])?;
        assert_eq!(out.main.len(), 1);
        assert_eq!(out.main[0].value.len(), 1000);
        Ok(())
    }
}
