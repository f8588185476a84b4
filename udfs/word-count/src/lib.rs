//! `word-count`: counts records per key (the word).
//!
//! Value state `count: u64`. Config `emit`: `"final"` (default) registers an
//! event-time timer at `i64::MAX` the first time a key is seen and emits the
//! count when it fires (the host's final watermark at the end of bounded
//! input); `"updates"` emits the new count on every record. Output: key = the
//! word, value = `"{word}\t{count}"`.

use weir_sdk::{
    Error, KeyedContext, KeyedProcessFunction, OpenContext, Record, StateDescriptor, ValueState,
};

/// The counter.
pub struct WordCount {
    count: ValueState<u64>,
    emit_updates: bool,
}

impl KeyedProcessFunction for WordCount {
    const STATES: &'static [StateDescriptor] = &[StateDescriptor::value("count")];

    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        let emit_updates = match ctx.config().get_str("emit").unwrap_or("final") {
            "final" => false,
            "updates" => true,
            other => weir_sdk::bail!("config `emit`: expected `final` or `updates`, got `{other}`"),
        };
        Ok(WordCount {
            count: ctx.value_state("count")?,
            emit_updates,
        })
    }

    fn process_element(
        &mut self,
        record: Record<'_>,
        ctx: &mut KeyedContext<'_>,
    ) -> Result<(), Error> {
        let previous = self.count.get(ctx)?;
        let count = previous.unwrap_or(0) + 1;
        self.count.set(ctx, &count)?;
        if self.emit_updates {
            emit(ctx, count, record.timestamp);
        } else if previous.is_none() {
            ctx.register_event_time_timer(i64::MAX)?;
        }
        Ok(())
    }

    fn on_timer(&mut self, time: i64, ctx: &mut KeyedContext<'_>) -> Result<(), Error> {
        if let Some(count) = self.count.get(ctx)? {
            emit(ctx, count, time);
        }
        Ok(())
    }
}

/// Emits `"{word}\t{count}"` keyed by the word, written straight into the output buffer.
fn emit(ctx: &mut KeyedContext<'_>, count: u64, timestamp: i64) {
    let word = ctx.key();
    ctx.collect_with(Some(word), timestamp, |value| {
        value.extend_from_slice(word);
        value.push(b'\t');
        value.extend_from_slice(itoa::Buffer::new().format(count).as_bytes());
    });
}

weir_sdk::export_keyed!(WordCount);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::Keyed;
    use weir_sdk::testing::Harness;

    fn words(words: &[&'static str]) -> Vec<Record<'static>> {
        words
            .iter()
            .enumerate()
            .map(|(i, w)| Record::keyed(*w, *w, i as i64))
            .collect()
    }

    #[test]
    fn final_counts_come_with_the_final_watermark() -> Result<(), Error> {
        let mut h = Harness::<Keyed<WordCount>>::open(&[])?;
        assert!(h.process(words(&["a", "b", "a"]))?.is_empty());
        assert!(h.process(words(&["a"]))?.is_empty());
        assert_eq!(h.timers().len(), 2, "one timer per key");
        let out = h.finish()?;
        assert_eq!(out.values(), ["a\t3", "b\t1"]);
        assert_eq!(out.main[0].key.as_deref(), Some(&b"a"[..]));
        assert_eq!(out.main[0].timestamp, i64::MAX);
        Ok(())
    }

    #[test]
    fn updates_emit_on_every_record() -> Result<(), Error> {
        let mut h = Harness::<Keyed<WordCount>>::open(&[("emit", "updates")])?;
        let out = h.process(words(&["a", "b", "a"]))?;
        assert_eq!(out.values(), ["a\t1", "b\t1", "a\t2"]);
        assert_eq!(out.main[2].timestamp, 2);
        assert!(h.timers().is_empty());
        assert!(h.finish()?.is_empty());
        Ok(())
    }

    #[test]
    fn bad_emit_mode_fails_open() {
        let err = Harness::<Keyed<WordCount>>::open(&[("emit", "sometimes")])
            .err()
            .unwrap();
        assert_eq!(
            err.message(),
            "config `emit`: expected `final` or `updates`, got `sometimes`"
        );
    }
}
