//! `identity`: returns each input batch as it is, without decoding it.
//!
//! The low-level `Operator` trait: zero work per record, so benchmarks
//! measure the cost of crossing the Wasm boundary and nothing else.

use weir_sdk::{Batch, Emitted, Error, OpenContext, Operator};

/// The identity.
pub struct Identity;

impl Operator for Identity {
    fn open(_ctx: &OpenContext) -> Result<Self, Error> {
        Ok(Identity)
    }

    fn process(&mut self, input: Batch) -> Result<Emitted, Error> {
        Ok(Emitted::main(input))
    }
}

weir_sdk::export_operator!(Identity);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::Record;
    use weir_sdk::testing::Harness;

    #[test]
    fn returns_the_input() -> Result<(), Error> {
        let input = [Record::keyed("k", "v", 1), Record::new("w", 2)];
        let mut h = Harness::<Identity>::open(&[])?;
        let out = h.process(input)?;
        let got: Vec<_> = out.main.iter().map(|r| r.as_record()).collect();
        assert_eq!(got, input);
        Ok(())
    }
}
