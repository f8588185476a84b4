//! `sequence-check`: the exactly-once checker of Weir's failure tests, as
//! Flink's `SemanticsCheckMapper`.
//!
//! Input: a keyed sequence generator's records (`kind = "sequence"`,
//! `keys = K`): record `n` has key `n % K` and value `n` (possibly padded
//! with `.`). Each key's values must advance by exactly `step` (config,
//! = K) starting at the key itself. The operator keeps the last value per
//! key in value state `last` (u64). Each key's records must come from one
//! source subtask (make `keys` a multiple of the source's parallelism), or
//! they have no order to check. A record that does not follow it — a
//! record lost, duplicated or reordered by a failure — goes to the side
//! output `alerts` as `"key <k>: expected <e>, got <n>"`. Every record also
//! passes through to the main output unchanged.

use weir_sdk::{
    Error, KeyedContext, KeyedProcessFunction, OpenContext, Record, StateDescriptor, ValueState,
};

/// The checker.
pub struct SequenceCheck {
    last: ValueState<u64>,
    step: u64,
}

fn number(value: &[u8]) -> Option<u64> {
    let end = value.iter().position(|b| *b == b'.').unwrap_or(value.len());
    std::str::from_utf8(&value[..end]).ok()?.parse().ok()
}

impl KeyedProcessFunction for SequenceCheck {
    const STATES: &'static [StateDescriptor] = &[StateDescriptor::value("last")];

    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        let step: u64 = match ctx.config().require_str("step")?.parse() {
            Ok(s) if s > 0 => s,
            _ => weir_sdk::bail!("config `step`: expected a positive integer"),
        };
        Ok(SequenceCheck {
            last: ctx.value_state("last")?,
            step,
        })
    }

    fn process_element(
        &mut self,
        record: Record<'_>,
        ctx: &mut KeyedContext<'_>,
    ) -> Result<(), Error> {
        let key = ctx.key().to_vec();
        let Some(n) = number(record.value) else {
            weir_sdk::bail!(
                "not a sequence number: {:?}",
                String::from_utf8_lossy(record.value)
            );
        };
        let expected = match self.last.get(ctx)? {
            Some(last) => last + self.step,
            // The first value of key k is k itself.
            None => std::str::from_utf8(&key)
                .ok()
                .and_then(|k| k.parse().ok())
                .unwrap_or(u64::MAX),
        };
        if n != expected {
            let alert = format!(
                "key {}: expected {expected}, got {n}",
                String::from_utf8_lossy(&key)
            );
            ctx.output(
                "alerts",
                Record::keyed(&key, alert.as_bytes(), record.timestamp),
            );
        }
        self.last.set(ctx, &n)?;
        ctx.collect(record);
        Ok(())
    }
}

weir_sdk::export_keyed!(SequenceCheck);
