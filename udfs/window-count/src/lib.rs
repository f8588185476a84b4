//! `window-count`: a tumbling event-time window count per key, written as a
//! keyed process function with event-time timers (what Flink's
//! `TumblingEventTimeWindows` + `count` does inside its `WindowOperator`).
//!
//! Config: `size_ms` (required, > 0): the window length. Window `[start,
//! start + size_ms)` holds the records with `start <= ts < start + size_ms`,
//! where `start` is a multiple of `size_ms` (negative times included).
//!
//! Per key, the map state `counts: start -> count` holds the open windows;
//! the first record of a window registers a timer at the window's last
//! millisecond (`end - 1`). When the watermark passes it, the window fires
//! once: key = the key, timestamp = `end - 1`, value
//! `{"key":"…","start":…,"end":…,"count":…}` (the key as a JSON string,
//! invalid UTF-8 replaced). Then the window is dropped.
//!
//! A record whose window has already fired (its `end - 1` is at or below the
//! current watermark) is *late*: it goes unchanged to the side output
//! `late` (edge `from = "<op>:late"`) and is counted in no window.

use weir_sdk::{
    Error, KeyedContext, KeyedProcessFunction, MapState, OpenContext, Record, StateDescriptor,
};

/// The operator.
pub struct WindowCount {
    size: i64,
    counts: MapState<i64, u64>,
}

impl WindowCount {
    fn start_of(&self, ts: i64) -> i64 {
        ts - ts.rem_euclid(self.size)
    }
}

impl KeyedProcessFunction for WindowCount {
    const STATES: &'static [StateDescriptor] = &[StateDescriptor::map("counts")];

    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        let size = ctx
            .config()
            .get_i64("size_ms")?
            .ok_or_else(|| Error::new("config `size_ms` is required (the window length in ms)"))?;
        if size <= 0 {
            return Err(Error::new(format!(
                "config `size_ms` must be at least 1, found {size}"
            )));
        }
        Ok(WindowCount {
            size,
            counts: ctx.map_state("counts")?,
        })
    }

    fn process_element(
        &mut self,
        record: Record<'_>,
        ctx: &mut KeyedContext<'_>,
    ) -> Result<(), Error> {
        let start = self.start_of(record.timestamp);
        let last = start.saturating_add(self.size - 1);
        if last <= ctx.current_watermark() {
            ctx.output("late", record);
            return Ok(());
        }
        let count = self.counts.get(ctx, &start)?.unwrap_or(0);
        if count == 0 {
            ctx.register_event_time_timer(last)?;
        }
        self.counts.put(ctx, &start, &(count + 1))
    }

    fn on_timer(&mut self, time: i64, ctx: &mut KeyedContext<'_>) -> Result<(), Error> {
        let start = self.start_of(time);
        let Some(count) = self.counts.get(ctx, &start)? else {
            return Ok(());
        };
        self.counts.remove(ctx, &start)?;
        let key = String::from_utf8_lossy(ctx.key()).into_owned();
        let value = format!(
            r#"{{"key":{},"start":{start},"end":{},"count":{count}}}"#,
            serde_json::to_string(&key)?,
            start + self.size
        );
        ctx.collect(Record::keyed(ctx.key(), &value, time));
        Ok(())
    }
}

weir_sdk::export_keyed!(WindowCount);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::Keyed;
    use weir_sdk::testing::Harness;

    fn open(size: &str) -> Result<Harness<Keyed<WindowCount>>, Error> {
        Harness::<Keyed<WindowCount>>::open(&[("size_ms", size)])
    }

    #[test]
    fn windows_fire_once_when_the_watermark_passes_their_end() -> Result<(), Error> {
        let mut h = open("10")?;
        h.process([
            Record::keyed("a", "x", 3),
            Record::keyed("a", "x", 9),
            Record::keyed("b", "x", 5),
            Record::keyed("a", "x", 10),
            Record::keyed("a", "x", -1),
        ])?;
        assert_eq!(
            h.advance_watermark(8)?.values(),
            [r#"{"key":"a","start":-10,"end":0,"count":1}"#],
            "only the window of -1 ends by 8"
        );
        let out = h.advance_watermark(9)?;
        assert_eq!(
            out.values(),
            [
                r#"{"key":"a","start":0,"end":10,"count":2}"#,
                r#"{"key":"b","start":0,"end":10,"count":1}"#,
            ]
        );
        assert_eq!(out.main[0].timestamp, 9);
        assert!(h.advance_watermark(9)?.is_empty(), "fired once");
        let out = h.finish()?;
        assert_eq!(
            out.values(),
            [r#"{"key":"a","start":10,"end":20,"count":1}"#]
        );
        Ok(())
    }

    #[test]
    fn a_record_of_a_window_that_fired_goes_to_the_late_output() -> Result<(), Error> {
        let mut h = open("10")?;
        h.process([Record::keyed("a", "x", 12)])?;
        h.advance_watermark(19)?;
        let out = h.process([Record::keyed("a", "late", 19), Record::keyed("a", "x", 20)])?;
        assert!(out.main.is_empty());
        let late = out.side("late");
        assert_eq!(late.len(), 1);
        assert_eq!(late[0].value, b"late");
        assert_eq!(late[0].timestamp, 19);
        let out = h.finish()?;
        assert_eq!(
            out.values(),
            [r#"{"key":"a","start":20,"end":30,"count":1}"#]
        );
        assert!(
            h.state_keys("counts").is_empty(),
            "fired windows are dropped"
        );
        Ok(())
    }

    #[test]
    fn size_is_required_and_positive() {
        for config in [&[][..], &[("size_ms", "0")][..]] {
            let err = Harness::<Keyed<WindowCount>>::open(config)
                .err()
                .expect("refused");
            assert!(err.message().contains("size_ms"), "{err}");
        }
    }
}
