//! `migrate-fail`: `word-count` (same state `count`: a u64 LE, same output)
//! whose state migration refuses one value: a count of exactly
//! [`REFUSED`]. For testing that a failed upgrade rolls back
//! (`weir upgrade`): the job goes back to its old modules from the
//! savepoint, and its output stays exactly-once.

use std::io::Write;

use weir_sdk::{
    Error, KeyedContext, KeyedProcessFunction, OpenContext, Record, StateCodec, StateDescriptor,
    ValueState,
};

/// The one count the migration refuses.
pub const REFUSED: u64 = 7;

fn migrate(_from_version: &str, old: &[u8]) -> Result<Vec<u8>, Error> {
    let count = u64::decode(old)?;
    if count == REFUSED {
        weir_sdk::bail!(
            "a count of {REFUSED} cannot be migrated (this operator refuses it on purpose)"
        );
    }
    Ok(old.to_vec())
}

/// The counter: emits `"{word}\t{count}"` on every record.
pub struct MigrateFail {
    count: ValueState<u64>,
}

impl KeyedProcessFunction for MigrateFail {
    const STATES: &'static [StateDescriptor] =
        &[StateDescriptor::value("count").with_migration(migrate)];

    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        Ok(MigrateFail {
            count: ctx.value_state("count")?,
        })
    }

    fn process_element(
        &mut self,
        record: Record<'_>,
        ctx: &mut KeyedContext<'_>,
    ) -> Result<(), Error> {
        let count = self.count.get(ctx)?.unwrap_or(0) + 1;
        self.count.set(ctx, &count)?;
        let word = ctx.key();
        ctx.collect_with(Some(word), record.timestamp, |value| {
            value.extend_from_slice(word);
            let _ = write!(value, "\t{count}");
        });
        Ok(())
    }
}

weir_sdk::export_keyed!(MigrateFail);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::Keyed;
    use weir_sdk::testing::Harness;

    type H = Harness<Keyed<MigrateFail>>;

    #[test]
    fn every_count_but_the_refused_one_migrates_unchanged() {
        assert_eq!(
            H::migrate_state("count", "0.1.0", &6u64.to_le_bytes()).unwrap(),
            6u64.to_le_bytes()
        );
        let err = H::migrate_state("count", "0.1.0", &REFUSED.to_le_bytes()).unwrap_err();
        assert!(
            err.message().contains("refuses it on purpose"),
            "{}",
            err.message()
        );
    }
}
