//! `fail-once` (recovery test): passes every batch through unchanged, but
//! on the job's first deployment attempt it fails once it has seen
//! `fail_at` records (config). After a restart (`attempt() > 0`) it never
//! fails, so a job with checkpoints recovers and finishes.
//!
//! Its count lives in instance memory, not in state: a restored instance
//! starts from zero, which is why it reads the attempt instead.

use weir_sdk::{Batch, Emitted, Error, OpenContext, Operator};

/// The operator.
pub struct FailOnce {
    /// Records until the failure; `None` once restarted.
    remaining: Option<u64>,
}

impl Operator for FailOnce {
    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        let fail_at = ctx
            .config()
            .get_u64("fail_at")?
            .ok_or_else(|| Error::new("config `fail_at` is required but missing"))?;
        Ok(FailOnce {
            remaining: (ctx.attempt() == 0).then_some(fail_at),
        })
    }

    fn process(&mut self, input: Batch) -> Result<Emitted, Error> {
        if let Some(remaining) = &mut self.remaining {
            let n = input.len() as u64;
            if n >= *remaining {
                return Err(Error::new(
                    "weir-test-fail-once: failing on the first attempt, as configured",
                ));
            }
            *remaining -= n;
        }
        Ok(Emitted::main(input))
    }
}

weir_sdk::export_operator!(FailOnce);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::Record;
    use weir_sdk::testing::Harness;

    #[test]
    fn fails_at_the_configured_record_on_the_first_attempt() -> Result<(), Error> {
        let mut h = Harness::<FailOnce>::open(&[("fail_at", "3")])?;
        let out = h.process([Record::new("a", 1), Record::new("b", 2)])?;
        assert_eq!(out.main.len(), 2);
        let failed = h.process([Record::new("c", 3)]);
        assert!(failed.is_err(), "the third record fails");
        Ok(())
    }
}
