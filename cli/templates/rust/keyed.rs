//! `{{name}}`: a keyed operator that counts records per key in value state
//! and emits `"{key}\t{count}"` for every record.

use std::io::Write;

use weir_sdk::{
    Error, KeyedContext, KeyedProcessFunction, OpenContext, Record, StateDescriptor, ValueState,
};

/// The operator: one instance per subtask; the state is per key.
pub struct Counter {
    count: ValueState<u64>,
}

impl KeyedProcessFunction for Counter {
    // Declared up front so the host creates the storage.
    const STATES: &'static [StateDescriptor] = &[StateDescriptor::value("count")];

    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        Ok(Counter {
            count: ctx.value_state("count")?,
        })
    }

    fn process_element(
        &mut self,
        record: Record<'_>,
        ctx: &mut KeyedContext<'_>,
    ) -> Result<(), Error> {
        // Scoped to the current record's key.
        let count = self.count.get(ctx)?.unwrap_or(0) + 1;
        self.count.set(ctx, &count)?;
        let key = ctx.key();
        ctx.collect_with(Some(key), record.timestamp, |value| {
            value.extend_from_slice(key);
            let _ = write!(value, "\t{count}");
        });
        Ok(())
    }
}

weir_sdk::export_keyed!(Counter);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::Keyed;
    use weir_sdk::testing::Harness;

    #[test]
    fn counts_per_key() -> Result<(), Error> {
        let mut h = Harness::<Keyed<Counter>>::open(&[])?;
        let out = h.process([
            Record::keyed("apple", "apple", 1),
            Record::keyed("pear", "pear", 2),
            Record::keyed("apple", "apple", 3),
        ])?;
        assert_eq!(out.values(), ["apple\t1", "pear\t1", "apple\t2"]);
        Ok(())
    }
}
