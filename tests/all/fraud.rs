//! Fraud detection (Flink's walkthrough) over a generated transaction
//! stream: the alerts `weir run` commits equal those of a reference
//! implementation written here, applied to the raw stream the same job
//! also writes out.

use std::collections::HashMap;
use std::path::Path;

use weir_tests::artifacts;

use crate::util::{describe, read_sink, run_weir, toml_path};

#[derive(Debug, Clone, PartialEq, PartialOrd)]
pub(crate) struct Alert {
    pub(crate) account: String,
    pub(crate) small_ts: i64,
    pub(crate) large_ts: i64,
    pub(crate) amount: f64,
}

/// Per account, in stream order: a transaction over 500.00 that directly
/// follows one under 1.00 by at most one minute raises an alert.
pub(crate) fn reference(transactions: &[(String, f64, i64)]) -> Vec<Alert> {
    let mut flag: HashMap<&str, i64> = HashMap::new();
    let mut alerts = Vec::new();
    for (account, amount, ts) in transactions {
        if let Some(small_ts) = flag.remove(account.as_str())
            && *amount > 500.00
            && ts - small_ts <= 60_000
        {
            alerts.push(Alert {
                account: account.clone(),
                small_ts,
                large_ts: *ts,
                amount: *amount,
            });
        }
        if *amount < 1.00 {
            flag.insert(account, *ts);
        }
    }
    alerts
}

/// The fraud job: generated transactions (count, seed 11, 300 accounts) →
/// `module` keyed by account → alerts; the raw stream also goes to `raw` as
/// JSON so that the reference can be applied to exactly what the job saw.
pub(crate) fn fraud_spec(
    module: &Path,
    raw: &Path,
    alerts: &Path,
    count: u64,
    parallelism: u32,
) -> String {
    format!(
        r#"
[job]
name = "fraud"
parallelism = {parallelism}

[[source]]
id = "tx"
type = "generator"
kind = "transactions"
count = {count}
seed = 11
accounts = 300
parallelism = 1

[[operator]]
id = "fraud"
module = {module}
key_by = "key"

[[sink]]
id = "raw"
type = "file"
path = {raw}
format = "json"
parallelism = 1

[[sink]]
id = "alerts"
type = "file"
path = {alerts}

[[edge]]
from = "tx"
to = "raw"
partition = "forward"

[[edge]]
from = "tx"
to = "fraud"

[[edge]]
from = "fraud"
to = "alerts"
"#,
        module = toml_path(module),
        raw = toml_path(raw),
        alerts = toml_path(alerts),
    )
}

/// (account, amount, timestamp) of every transaction a job wrote to `raw`.
pub(crate) fn read_transactions(raw: &Path) -> Vec<(String, f64, i64)> {
    read_sink(raw)
        .iter()
        .map(|line| {
            let rec: serde_json::Value = serde_json::from_str(line).unwrap();
            let value: serde_json::Value =
                serde_json::from_str(rec["value"].as_str().unwrap()).unwrap();
            (
                value["account"].as_str().unwrap().to_string(),
                value["amount"].as_f64().unwrap(),
                rec["timestamp"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// The alerts a job wrote to `path`, in file order.
pub(crate) fn read_alerts(path: &Path) -> Vec<Alert> {
    read_sink(path)
        .iter()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("alert {line:?} is not JSON: {e}"));
            Alert {
                account: v["account"].as_str().unwrap().to_string(),
                small_ts: v["small_ts"].as_i64().unwrap(),
                large_ts: v["large_ts"].as_i64().unwrap(),
                amount: v["amount"].as_f64().unwrap(),
            }
        })
        .collect()
}

#[test]
fn fraud_alerts_equal_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("raw.jsonl");
    let alerts_path = dir.path().join("alerts.jsonl");
    let spec = dir.path().join("fraud.toml");
    let module = Path::new(artifacts::FRAUD_DETECT);
    std::fs::write(&spec, fraud_spec(module, &raw, &alerts_path, 200_000, 4)).unwrap();
    let result = run_weir(&dir.path().join("cache"), &["run", spec.to_str().unwrap()]);
    assert!(result.status.success(), "{}", describe(&result));

    let transactions = read_transactions(&raw);
    assert_eq!(transactions.len(), 200_000);
    let mut expected = reference(&transactions);
    let mut got = read_alerts(&alerts_path);
    assert!(
        expected.len() > 100,
        "the stream should raise alerts, got {}",
        expected.len()
    );
    let key = |a: &Alert, b: &Alert| a.partial_cmp(b).unwrap();
    expected.sort_by(key);
    got.sort_by(key);
    assert_eq!(got.len(), expected.len());
    assert_eq!(got, expected);
}
