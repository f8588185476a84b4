//! `idle-alert`: processing-time timers. Config `timeout_ms` (required,
//! at least 1). Every record of a key pushes the key's deadline to `now +
//! timeout_ms` of wall-clock time (the previous deadline's timer is
//! deleted); when a deadline passes without a newer record, the operator
//! emits one record `"{key}\tidle"` (key = the key, timestamp = the
//! deadline) and forgets the key. The deadline lives in value state
//! `deadline`; the timer is checkpointed by the host, so an alert survives
//! a restore and is emitted once.

use weir_sdk::{
    Error, KeyedContext, KeyedProcessFunction, OpenContext, Record, StateDescriptor, ValueState,
};

/// The operator.
pub struct IdleAlert {
    timeout: i64,
    deadline: ValueState<i64>,
}

impl KeyedProcessFunction for IdleAlert {
    const STATES: &'static [StateDescriptor] = &[StateDescriptor::value("deadline")];

    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        let timeout = ctx
            .config()
            .get_i64("timeout_ms")?
            .filter(|t| *t > 0)
            .ok_or_else(|| Error::new("config `timeout_ms` is required and must be at least 1"))?;
        Ok(IdleAlert {
            timeout,
            deadline: ctx.value_state("deadline")?,
        })
    }

    fn process_element(
        &mut self,
        _record: Record<'_>,
        ctx: &mut KeyedContext<'_>,
    ) -> Result<(), Error> {
        if let Some(previous) = self.deadline.get(ctx)? {
            ctx.delete_processing_time_timer(previous)?;
        }
        let deadline = ctx.current_processing_time() + self.timeout;
        ctx.register_processing_time_timer(deadline)?;
        self.deadline.set(ctx, &deadline)
    }

    fn on_processing_timer(&mut self, time: i64, ctx: &mut KeyedContext<'_>) -> Result<(), Error> {
        if self.deadline.get(ctx)? != Some(time) {
            return Ok(());
        }
        self.deadline.clear(ctx)?;
        let alert = format!("{}\tidle", String::from_utf8_lossy(ctx.key()));
        ctx.collect(Record::keyed(ctx.key(), &alert, time));
        Ok(())
    }
}

weir_sdk::export_keyed!(IdleAlert);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::Keyed;
    use weir_sdk::testing::Harness;

    #[test]
    fn a_key_quiet_for_the_timeout_alerts_once() -> Result<(), Error> {
        let mut h = Harness::<Keyed<IdleAlert>>::open(&[("timeout_ms", "1000")])?;
        h.process([Record::keyed("a", "x", 1), Record::keyed("b", "x", 1)])?;
        assert!(h.advance_processing_time(500)?.is_empty());
        // a is active again: its deadline moves to 1500, the old timer goes.
        h.process([Record::keyed("a", "x", 2)])?;
        assert_eq!(h.processing_timers().len(), 2);
        let out = h.advance_processing_time(600)?;
        assert_eq!(out.values(), ["b\tidle"]);
        assert_eq!(out.main[0].timestamp, 1000);
        let out = h.advance_processing_time(400)?;
        assert_eq!(out.values(), ["a\tidle"]);
        assert!(h.advance_processing_time(10_000)?.is_empty(), "once");
        assert_eq!(h.state_keys("deadline"), Vec::<Vec<u8>>::new());
        Ok(())
    }
}
