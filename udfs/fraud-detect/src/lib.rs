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
    use weir_sdk::Keyed;
    use weir_sdk::testing::Harness;

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
}
