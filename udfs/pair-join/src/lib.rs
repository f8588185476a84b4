//! `pair-join`: a keyed co-process function (two inputs, shared keyed
//! state) that joins every left record with every right record of the same
//! key, whatever their times: the unbounded equi-join, written by hand.
//!
//! Each side's values wait in a list state (`left`, `right`); a record
//! pairs with everything the other side has so far, then waits itself, so
//! each pair is emitted exactly once, when its later record arrives:
//! key = the key, timestamp = the later record's, value
//! `{"key":"…","left":…,"right":…}` with each value embedded as JSON if it
//! is JSON, else as a JSON string. (State grows without bound: the host's
//! `join = { … }` operators clean theirs by watermark.)

use weir_sdk::{
    Error, KeyedCoProcessFunction, KeyedContext, ListState, OpenContext, Record, StateDescriptor,
};

/// The function.
pub struct PairJoin {
    left: ListState<Vec<u8>>,
    right: ListState<Vec<u8>>,
}

fn as_json(value: &[u8]) -> String {
    if serde_json::from_slice::<serde_json::Value>(value).is_ok() {
        String::from_utf8_lossy(value).into_owned()
    } else {
        serde_json::to_string(&String::from_utf8_lossy(value)).unwrap_or_default()
    }
}

impl PairJoin {
    /// Pairs `record` (of side `mine`) with every value of `other`, then
    /// keeps it in `mine`.
    fn arrive(
        record: Record<'_>,
        ctx: &mut KeyedContext<'_>,
        mine: &ListState<Vec<u8>>,
        other: &ListState<Vec<u8>>,
        left_side: bool,
    ) -> Result<(), Error> {
        let key = serde_json::to_string(&String::from_utf8_lossy(ctx.key()))?;
        let value = as_json(record.value);
        for o in other.get(ctx)? {
            let o = as_json(&o);
            let (l, r) = if left_side {
                (&value, &o)
            } else {
                (&o, &value)
            };
            let pair = format!(r#"{{"key":{key},"left":{l},"right":{r}}}"#);
            ctx.collect(Record::keyed(ctx.key(), &pair, record.timestamp));
        }
        mine.add(ctx, &record.value.to_vec())
    }
}

impl KeyedCoProcessFunction for PairJoin {
    const STATES: &'static [StateDescriptor] = &[
        StateDescriptor::list("left"),
        StateDescriptor::list("right"),
    ];

    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        Ok(PairJoin {
            left: ctx.list_state("left")?,
            right: ctx.list_state("right")?,
        })
    }

    fn process_element1(
        &mut self,
        record: Record<'_>,
        ctx: &mut KeyedContext<'_>,
    ) -> Result<(), Error> {
        Self::arrive(record, ctx, &self.left, &self.right, true)
    }

    fn process_element2(
        &mut self,
        record: Record<'_>,
        ctx: &mut KeyedContext<'_>,
    ) -> Result<(), Error> {
        Self::arrive(record, ctx, &self.right, &self.left, false)
    }
}

weir_sdk::export_keyed_co!(PairJoin);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::KeyedCo;
    use weir_sdk::testing::Harness;

    #[test]
    fn each_pair_is_emitted_once_by_its_later_record() -> Result<(), Error> {
        let mut h = Harness::<KeyedCo<PairJoin>>::open(&[])?;
        assert!(
            h.process_input(0, [Record::keyed("a", "l1", 1)])?
                .is_empty()
        );
        let out = h.process_input(
            1,
            [Record::keyed("a", "r1", 2), Record::keyed("b", "r2", 3)],
        )?;
        assert_eq!(out.values(), [r#"{"key":"a","left":"l1","right":"r1"}"#]);
        assert_eq!(out.main[0].timestamp, 2);
        // Input 0 through plain `process` is the left side too.
        let out = h.process([Record::keyed("a", "{\"n\":1}", 4)])?;
        assert_eq!(out.values(), [r#"{"key":"a","left":{"n":1},"right":"r1"}"#]);
        assert!(h.process_input(2, [Record::keyed("a", "x", 5)]).is_err());
        Ok(())
    }
}
