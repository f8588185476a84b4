//! `count-as-list`: keeps every record of a key in list state `count` —
//! the name `word-count` uses for a value state. An upgrade of a
//! word-count job to this module must be refused before the job stops:
//! a state keeps its kind across an upgrade.

use weir_sdk::{
    Error, KeyedContext, KeyedProcessFunction, ListState, OpenContext, Record, StateDescriptor,
};

/// Appends every record's value to its key's list and forwards it.
pub struct CountAsList {
    count: ListState<Vec<u8>>,
}

impl KeyedProcessFunction for CountAsList {
    const STATES: &'static [StateDescriptor] = &[StateDescriptor::list("count")];

    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        Ok(CountAsList {
            count: ctx.list_state("count")?,
        })
    }

    fn process_element(
        &mut self,
        record: Record<'_>,
        ctx: &mut KeyedContext<'_>,
    ) -> Result<(), Error> {
        self.count.add(ctx, &record.value.to_vec())?;
        ctx.collect(record);
        Ok(())
    }
}

weir_sdk::export_keyed!(CountAsList);
