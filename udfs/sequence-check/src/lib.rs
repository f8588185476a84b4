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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, HashMap};
    use weir_sdk::testing::{Harness, Step};
    use weir_sdk::{Keyed, OwnedRecord};

    /// The keys of the random input: the step is 4, so key k's sequence is
    /// k, k + 4, k + 8, ...; "x" is no number (its first expected value is
    /// u64::MAX).
    const KEYS: [&str; 5] = ["0", "1", "2", "3", "x"];
    const STEP: u64 = 4;

    /// 40 seeded random steps of 0 to 16 records: mostly each key's next
    /// number, now and then a duplicate, a gap or a number from nowhere,
    /// some padded with dots; half the steps end with a watermark (the
    /// checker has no timers: it must not mind).
    fn random_steps(mut seed: u64) -> Vec<Step> {
        let mut below = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut next: HashMap<&str, u64> = HashMap::new();
        let (mut ts, mut watermark) = (0, i64::MIN);
        (0..40)
            .map(|_| {
                let records = (0..below(17))
                    .map(|_| {
                        ts += below(3) as i64;
                        let key = KEYS[below(KEYS.len() as u64) as usize];
                        let next = next.entry(key).or_insert(key.parse().unwrap_or(1_000));
                        let n = match below(20) {
                            0 => next.saturating_sub(STEP), // a duplicate
                            1 => *next + STEP,              // a gap
                            2 => below(10_000),             // from nowhere
                            _ => *next,
                        };
                        *next = n + STEP;
                        let value = format!("{n}{}", ".".repeat(below(3) as usize));
                        Record::keyed(key, &value, ts).to_owned_record()
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

    /// Seeded random sequences with a checkpoint, two lost steps and a
    /// restore: the batch cache (one state call per batch) gives byte for
    /// byte what a call per record gives — records passed through, alerts,
    /// last numbers — and both give the alerts computed directly.
    #[test]
    fn the_batch_cache_gives_what_single_calls_give() -> Result<(), Error> {
        let (checkpoint, failure) = (15, 17);
        let mut total_alerts = 0;
        for seed in [0x2545_f491_4f6c_dd1d, 5, 1 << 50] {
            let steps = random_steps(seed);
            let batched = Harness::<Keyed<SequenceCheck>>::builder()
                .config("step", STEP.to_string())
                .run_with_failure_both_ways(&steps, checkpoint, failure)?;

            // The expectation: the last number per key in a plain map.
            let mut last: HashMap<&str, u64> = HashMap::new();
            let per_step: Vec<Vec<(String, OwnedRecord)>> = steps
                .iter()
                .map(|step| {
                    let mut alerts = Vec::new();
                    for record in &step.records {
                        let key = record.key_str().unwrap();
                        let key = KEYS.iter().find(|k| **k == key).unwrap();
                        let value = record.value_str();
                        let n: u64 = value.trim_end_matches('.').parse().unwrap();
                        let expected = match last.get(key) {
                            Some(last) => last + STEP,
                            None => key.parse().unwrap_or(u64::MAX),
                        };
                        if n != expected {
                            let alert = format!("key {key}: expected {expected}, got {n}");
                            let alert = Record::keyed(key, &alert, record.timestamp);
                            alerts.push(("alerts".to_owned(), alert.to_owned_record()));
                        }
                        last.insert(key, n);
                    }
                    alerts
                })
                .collect();
            let records = |steps: &[Step]| -> Vec<OwnedRecord> {
                steps.iter().flat_map(|s| s.records.clone()).collect()
            };
            assert_eq!(batched.committed.main, records(&steps), "passed through");
            assert_eq!(batched.committed.side, per_step.concat());
            assert_eq!(batched.lost.main, records(&steps[checkpoint..failure]));
            assert_eq!(batched.lost.side, per_step[checkpoint..failure].concat());
            let end = Harness::<Keyed<SequenceCheck>>::builder()
                .config("step", STEP.to_string())
                .restore(&batched.at_end)
                .open()?;
            for key in KEYS {
                assert_eq!(end.value_state::<u64>("last", key)?, last.get(key).copied());
            }
            total_alerts += per_step.concat().len();
            // Not vacuous: batches with several records of one key.
            assert!(steps.iter().any(|step| {
                let keys = step.records.iter().map(|r| &r.key);
                keys.clone().collect::<BTreeSet<_>>().len() < keys.count()
            }));
        }
        assert!(total_alerts > 30, "{total_alerts} alerts");
        Ok(())
    }
}
