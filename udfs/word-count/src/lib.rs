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
    use std::collections::{BTreeMap, BTreeSet};
    use weir_sdk::Keyed;
    use weir_sdk::testing::{Harness, Step};

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

    /// The words of the random input: few, so that a batch holds several
    /// records of one word; the empty word is a key too.
    const WORDS: [&str; 7] = ["the", "and", "of", "weir", "\u{e9}t\u{e9}", "a b", ""];

    /// 30 seeded random steps: batches of 0 to 20 words (timestamps rising,
    /// the word as key and value), half of them followed by a watermark.
    fn random_steps(mut seed: u64) -> Vec<Step> {
        let mut below = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let (mut ts, mut watermark) = (0, i64::MIN);
        (0..30)
            .map(|_| {
                let records = (0..below(21))
                    .map(|_| {
                        ts += below(3) as i64;
                        let word = WORDS[below(WORDS.len() as u64) as usize];
                        Record::keyed(word, word, ts).to_owned_record()
                    })
                    .collect();
                let advance = below(2) == 0;
                if advance {
                    watermark = watermark.max(ts - below(5) as i64);
                }
                Step {
                    records,
                    watermark: advance.then_some(watermark),
                }
            })
            .collect()
    }

    /// Both emit modes, over seeded random input with a checkpoint, two
    /// lost steps and a restore: the batch cache (one state call per batch)
    /// gives byte for byte what a call per record gives — output, state
    /// and timers — and both give the counts of a plain map.
    #[test]
    fn the_batch_cache_gives_what_single_calls_give() -> Result<(), Error> {
        let (checkpoint, failure) = (12, 14);
        for seed in [0x2545_f491_4f6c_dd1d, 7, 1 << 40] {
            let steps = random_steps(seed);
            for emit in ["final", "updates"] {
                let batched = Harness::<Keyed<WordCount>>::builder()
                    .config("emit", emit)
                    .run_with_failure_both_ways(&steps, checkpoint, failure)?;

                // The expectation, from a plain map over the committed
                // input: a count per record, or each word's total at the end.
                let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
                let per_step: Vec<Vec<String>> = steps
                    .iter()
                    .map(|step| {
                        let words = step.records.iter().map(|r| r.key_str().unwrap());
                        words
                            .map(|word| {
                                let word = WORDS.iter().find(|w| **w == word).unwrap();
                                let n = counts.entry(word).or_default();
                                *n += 1;
                                format!("{word}\t{n}")
                            })
                            .collect()
                    })
                    .collect();
                let totals: Vec<String> = counts.iter().map(|(w, n)| format!("{w}\t{n}")).collect();
                if emit == "updates" {
                    assert_eq!(batched.committed.values(), per_step.concat());
                    assert_eq!(
                        batched.lost.values(),
                        per_step[checkpoint..failure].concat()
                    );
                    assert!(batched.before_end.timers().is_empty());
                } else {
                    assert_eq!(batched.committed.values(), totals);
                    assert!(batched.lost.is_empty());
                    let timers: BTreeSet<_> = batched.before_end.timers().into_iter().collect();
                    let words: BTreeSet<_> = counts
                        .keys()
                        .map(|w| (i64::MAX, w.as_bytes().to_vec()))
                        .collect();
                    assert_eq!(timers, words, "one timer per word, at the end of input");
                }
                let end = Harness::<Keyed<WordCount>>::builder()
                    .restore(&batched.at_end)
                    .open()?;
                for (word, n) in &counts {
                    assert_eq!(end.value_state::<u64>("count", word)?, Some(*n), "{word}");
                }
                assert_eq!(end.state_keys("count").len(), counts.len());
            }
            // Several records of one word in one batch.
            assert!(steps.iter().any(|step| {
                let words = step.records.iter().map(|r| &r.key);
                words.clone().collect::<BTreeSet<_>>().len() < words.count()
            }));
        }
        Ok(())
    }
}
