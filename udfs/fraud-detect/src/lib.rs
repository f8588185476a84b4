//! `fraud-detect`: Flink's fraud-detection walkthrough.
//!
//! Input: keyed by account (the host puts the account in the record key),
//! value `{"account":"acct-17","amount":12.34}`, timestamp = event time in
//! ms. Per account, in stream order: if a previous *small* transaction
//! (amount < 1.00) at `t0` set the flag, this transaction's amount is above
//! 500.00 and `ts - t0 <= 60_000`, emit an alert. Then clear the flag. Then,
//! if this transaction is small, set the flag to `ts`. The flag is the value
//! state `small-ts: i64`.
//!
//! Alert: key = account, timestamp = ts, value
//! `{"account":"…","small_ts":…,"large_ts":…,"amount":…}` with the amount
//! printed as Rust's shortest float representation (`{}` of `f64`).

use serde::Deserialize;
use weir_sdk::{
    Error, KeyedContext, KeyedProcessFunction, OpenContext, Record, StateDescriptor, ValueState,
};

/// Below this a transaction is small.
const SMALL_AMOUNT: f64 = 1.00;
/// Above this a transaction is large.
const LARGE_AMOUNT: f64 = 500.00;
/// How long after a small transaction a large one raises an alert.
const WINDOW_MS: i64 = 60_000;

/// A transaction; the account comes from the record key, not from here.
#[derive(Deserialize)]
struct Transaction {
    amount: f64,
}

/// The detector.
pub struct FraudDetect {
    small_ts: ValueState<i64>,
}

impl KeyedProcessFunction for FraudDetect {
    const STATES: &'static [StateDescriptor] = &[StateDescriptor::value("small-ts")];

    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        Ok(FraudDetect {
            small_ts: ctx.value_state("small-ts")?,
        })
    }

    fn process_element(
        &mut self,
        record: Record<'_>,
        ctx: &mut KeyedContext<'_>,
    ) -> Result<(), Error> {
        let txn: Transaction = serde_json::from_slice(record.value)
            .map_err(|e| Error::new(format!("bad transaction {:?}: {e}", record.value_str())))?;
        let ts = record.timestamp;
        if let Some(small_ts) = self.small_ts.get(ctx)? {
            if txn.amount > LARGE_AMOUNT && ts - small_ts <= WINDOW_MS {
                let account = String::from_utf8_lossy(ctx.key());
                // serde_json escapes the account as a JSON string.
                let alert = format!(
                    r#"{{"account":{},"small_ts":{small_ts},"large_ts":{ts},"amount":{}}}"#,
                    serde_json::to_string(&account)?,
                    txn.amount
                );
                ctx.collect(Record::keyed(ctx.key(), &alert, ts));
            }
            self.small_ts.clear(ctx)?;
        }
        if txn.amount < SMALL_AMOUNT {
            self.small_ts.set(ctx, &ts)?;
        }
        Ok(())
    }
}

weir_sdk::export_keyed!(FraudDetect);

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use weir_sdk::Keyed;
    use weir_sdk::OwnedRecord;
    use weir_sdk::testing::{Harness, Step};

    fn txn(account: &str, amount: f64) -> String {
        format!(r#"{{"account":"{account}","amount":{amount}}}"#)
    }

    #[test]
    fn small_then_large_within_a_minute_alerts() -> Result<(), Error> {
        let mut h = Harness::<Keyed<FraudDetect>>::open(&[])?;
        let (small, large, medium) = (txn("a", 0.5), txn("a", 600.25), txn("a", 100.0));
        let out = h.process([
            Record::keyed("acct-1", &small, 1_000),
            Record::keyed("acct-2", &large, 1_500), // other account: no flag
            Record::keyed("acct-1", &large, 61_000), // exactly 60 s later: alert
        ])?;
        assert_eq!(
            out.values(),
            [r#"{"account":"acct-1","small_ts":1000,"large_ts":61000,"amount":600.25}"#]
        );
        assert_eq!(out.main[0].key.as_deref(), Some(&b"acct-1"[..]));
        assert_eq!(out.main[0].timestamp, 61_000);
        assert_eq!(
            h.value_state::<i64>("small-ts", "acct-1")?,
            None,
            "flag cleared"
        );

        // Too late, or a medium transaction in between: no alert.
        let out = h.process([
            Record::keyed("acct-1", &small, 100_000),
            Record::keyed("acct-1", &large, 160_001),
            Record::keyed("acct-1", &small, 200_000),
            Record::keyed("acct-1", &medium, 200_001),
            Record::keyed("acct-1", &large, 200_002),
        ])?;
        assert!(out.is_empty());

        // A small transaction re-arms the flag; the amount prints shortest.
        let out = h.process([
            Record::keyed("acct-1", &small, 300_000),
            Record::keyed("acct-1", &small, 300_001),
            Record::keyed("acct-1", &txn("a", 501.0), 300_002),
        ])?;
        assert_eq!(
            out.values(),
            [r#"{"account":"acct-1","small_ts":300001,"large_ts":300002,"amount":501}"#]
        );
        Ok(())
    }

    #[test]
    fn malformed_json_is_an_error() -> Result<(), Error> {
        let mut h = Harness::<Keyed<FraudDetect>>::open(&[])?;
        let err = h.process([Record::keyed("a", "not json", 1)]).unwrap_err();
        assert!(
            err.message().starts_with("bad transaction \"not json\""),
            "{err}"
        );
        Ok(())
    }

    /// The accounts of the random input (the record keys), with each as a
    /// JSON string: few, so that a batch holds several transactions of one.
    const ACCOUNTS: [(&str, &str); 5] = [
        ("acct-1", r#""acct-1""#),
        ("acct-2", r#""acct-2""#),
        ("acct-3", r#""acct-3""#),
        (r#"acct "7""#, r#""acct \"7\"""#),
        ("compte-\u{e9}", "\"compte-\u{e9}\""),
    ];

    /// Whether an amount is small (< 1.00), large (> 500.00) or neither.
    #[derive(Clone, Copy, PartialEq)]
    enum Size {
        Small,
        Medium,
        Large,
    }

    /// Amounts as the input spells them, with their size and, for the
    /// large ones, how an alert prints them (Rust's `{}` of the f64).
    const AMOUNTS: [(&str, Size, &str); 18] = [
        ("0.5", Size::Small, ""),
        ("0.99", Size::Small, ""),
        ("0", Size::Small, ""),
        ("-3.5", Size::Small, ""),
        ("1", Size::Medium, ""),
        ("1.00", Size::Medium, ""),
        ("500", Size::Medium, ""),
        ("500.0", Size::Medium, ""),
        ("600.25", Size::Large, "600.25"),
        ("501", Size::Large, "501"),
        ("501.0", Size::Large, "501"),
        ("500.01", Size::Large, "500.01"),
        ("1e3", Size::Large, "1000"),
        ("2.5E+3", Size::Large, "2500"),
        ("750.125", Size::Large, "750.125"),
        ("12345678.9", Size::Large, "12345678.9"),
        ("1234.5678", Size::Large, "1234.5678"),
        ("1e21", Size::Large, "1000000000000000000000"),
    ];

    /// A transaction's JSON in one of a few spellings (field order,
    /// whitespace, fields the detector ignores).
    fn transaction(account: &str, amount: &str, spelling: u64) -> String {
        match spelling {
            0 => format!(r#"{{"account":{account},"amount":{amount}}}"#),
            1 => format!(r#"{{ "amount" : {amount} , "account" : {account} }}"#),
            _ => format!(
                r#"{{"account":{account},"currency":"EUR","amount":{amount},"tags":["a",{{"b":null}}],"ok":true}}"#
            ),
        }
    }

    /// 40 seeded random steps of 0 to 16 transactions, the amounts drawn
    /// from AMOUNTS, the time moving on by 0 to 2 s or now and then by
    /// about a minute (around the 60 s window); half the steps end with a
    /// watermark (the detector has no timers: it must not mind).
    /// Also returns each record's index into AMOUNTS, in order.
    fn random_steps(mut seed: u64) -> (Vec<Step>, Vec<usize>) {
        let mut below = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let (mut ts, mut watermark, mut amounts) = (0i64, i64::MIN, Vec::new());
        let steps = (0..40)
            .map(|_| {
                let records = (0..below(17))
                    .map(|_| {
                        ts += match below(10) {
                            0 => 59_990 + below(20) as i64,
                            _ => below(2_000) as i64,
                        };
                        let (account, json) = ACCOUNTS[below(ACCOUNTS.len() as u64) as usize];
                        let amount = below(AMOUNTS.len() as u64) as usize;
                        amounts.push(amount);
                        let value = transaction(json, AMOUNTS[amount].0, below(3));
                        Record::keyed(account, &value, ts).to_owned_record()
                    })
                    .collect();
                let advance = below(2) == 0;
                if advance {
                    watermark = watermark.max(ts - below(5_000) as i64);
                }
                Step {
                    records,
                    watermark: advance.then_some(watermark),
                }
            })
            .collect();
        (steps, amounts)
    }

    /// Seeded random transactions with a checkpoint, two lost steps and a
    /// restore: the batch cache (one state call per batch) gives byte for
    /// byte what a call per record gives — alerts, flags left — and both
    /// give the alerts computed directly from the input.
    #[test]
    fn the_batch_cache_gives_what_single_calls_give() -> Result<(), Error> {
        let (checkpoint, failure) = (15, 17);
        let (mut alerts, mut late, mut flags_left) = (0, 0, 0);
        for seed in [0x2545_f491_4f6c_dd1d, 11, 1 << 33] {
            let (steps, amounts) = random_steps(seed);
            let batched = Harness::<Keyed<FraudDetect>>::builder()
                .run_with_failure_both_ways(&steps, checkpoint, failure)?;

            // The expectation: the flag per account in a plain map, sizes
            // and printed amounts from the table, not from parsing.
            let mut flags: HashMap<&str, i64> = HashMap::new();
            let mut amounts = amounts.into_iter();
            let per_step: Vec<Vec<OwnedRecord>> = steps
                .iter()
                .map(|step| {
                    let mut out = Vec::new();
                    for record in &step.records {
                        let account = record.key_str().unwrap();
                        let &(account, json) = ACCOUNTS.iter().find(|a| a.0 == account).unwrap();
                        let (_, size, printed) = AMOUNTS[amounts.next().unwrap()];
                        let ts = record.timestamp;
                        if let Some(small_ts) = flags.remove(account) {
                            if size == Size::Large && ts - small_ts <= 60_000 {
                                let alert = format!(
                                    r#"{{"account":{json},"small_ts":{small_ts},"large_ts":{ts},"amount":{printed}}}"#
                                );
                                out.push(Record::keyed(account, &alert, ts).to_owned_record());
                            } else if size == Size::Large {
                                late += 1;
                            }
                        }
                        if size == Size::Small {
                            flags.insert(account, ts);
                        }
                    }
                    out
                })
                .collect();
            assert_eq!(batched.committed.main, per_step.concat());
            assert!(batched.committed.side.is_empty());
            assert_eq!(batched.lost.main, per_step[checkpoint..failure].concat());
            let end = Harness::<Keyed<FraudDetect>>::builder()
                .restore(&batched.at_end)
                .open()?;
            for (account, _) in ACCOUNTS {
                let flag = flags.get(account).copied();
                assert_eq!(end.value_state::<i64>("small-ts", account)?, flag);
            }
            alerts += per_step.concat().len();
            flags_left += flags.len();
            // Not vacuous: batches with several transactions of one account.
            assert!(steps.iter().any(|step| {
                let accounts = step.records.iter().map(|r| &r.key);
                accounts
                    .clone()
                    .collect::<std::collections::BTreeSet<_>>()
                    .len()
                    < accounts.count()
            }));
        }
        // Nor here: alerts, large amounts too late for one, flags left.
        assert!(alerts > 30, "{alerts} alerts");
        assert!(
            late > 0 && flags_left > 0,
            "{late} too late, {flags_left} flags left"
        );
        Ok(())
    }
}
