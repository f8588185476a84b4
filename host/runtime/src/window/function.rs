//! The user's function of a window: a built-in aggregate, or a window
//! function in Wasm (`wit/operator.wit`, `window-function`). The window
//! operator calls aggregates with many windows at once (`add`, `merge`,
//! `results`), so a Wasm aggregate costs one call per batch, not per record.
//!
//! A built-in aggregate's accumulator is its running value as 8 bytes (f64,
//! little-endian); the count is the window operator's own. Results are JSON:
//! `{"key":…,"start":…,"end":…,"<aggregate>":…}` (no bounds for the global
//! window).

use super::{GLOBAL, Window};
use crate::job::{Aggregate, KeySelector};
use crate::record::{Batch, Emitted, RecordRef};
use crate::wasm::{Accumulated, FailureKind, OperatorError, OperatorInstance, WitWindow};

/// A window that fired: what its function needs to produce its output.
pub(super) struct Fired {
    pub key: Vec<u8>,
    pub window: Window,
    /// Records in the window.
    pub count: u64,
    /// Aggregates: the accumulator.
    pub accumulator: Vec<u8>,
    /// Process-window functions: the window's records, in arrival order.
    pub records: Batch,
    /// The output's timestamp: the window's max timestamp (the count
    /// window's: its last record's).
    pub timestamp: i64,
}

/// See the [module docs](self).
pub(super) enum Function {
    /// `aggregate = "…"` over the number `field` finds.
    BuiltIn {
        aggregate: Aggregate,
        field: Option<KeySelector>,
    },
    /// An aggregate in Wasm.
    Aggregate(Box<OperatorInstance>),
    /// A process-window function in Wasm: the window state keeps the records.
    Process(Box<OperatorInstance>),
}

impl Function {
    /// Whether the window state keeps records (a process-window function)
    /// rather than accumulators.
    pub(super) fn keeps_records(&self) -> bool {
        matches!(self, Function::Process(_))
    }

    /// Adds record i of `records` to `accumulators[targets[i]]`.
    pub(super) fn add(
        &mut self,
        operator: &str,
        accumulators: Vec<Option<Vec<u8>>>,
        targets: Vec<u32>,
        records: &Batch,
    ) -> Result<Vec<Vec<u8>>, OperatorError> {
        match self {
            Function::BuiltIn { aggregate, field } => {
                let mut values: Vec<Option<f64>> = accumulators
                    .iter()
                    .map(|a| a.as_deref().map(value_of))
                    .collect();
                for (r, &t) in records.iter().zip(&targets) {
                    let x = number(operator, *aggregate, field.as_ref(), r)?;
                    let slot = &mut values[t as usize];
                    *slot = Some(match *slot {
                        Some(v) => combine(*aggregate, v, x),
                        None => x,
                    });
                }
                Ok(values
                    .into_iter()
                    .map(|v| v.unwrap_or(0.0).to_le_bytes().to_vec())
                    .collect())
            }
            Function::Aggregate(instance) => instance.window_add(accumulators, targets, records),
            Function::Process(_) => unreachable!("a process-window function has no accumulators"),
        }
    }

    /// Merges `a` and `b` (session windows a record joined).
    pub(super) fn merge(&mut self, a: Vec<u8>, b: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
        match self {
            Function::BuiltIn { aggregate, .. } => {
                let v = combine(*aggregate, value_of(&a), value_of(&b));
                Ok(v.to_le_bytes().to_vec())
            }
            Function::Aggregate(instance) => Ok(instance
                .window_merge(vec![(a, b)])?
                .pop()
                .expect("checked: one per pair")),
            Function::Process(_) => unreachable!("a process-window function has no accumulators"),
        }
    }

    /// The output of every window in `fired`, in order: records with the
    /// window's key (an aggregate's) and the fired timestamp.
    pub(super) fn fire(
        &mut self,
        fired: Vec<Fired>,
        out: &mut Emitted,
    ) -> Result<(), OperatorError> {
        match self {
            Function::BuiltIn { aggregate, .. } => {
                for f in fired {
                    let value = builtin_result(*aggregate, &f);
                    out.main.push(Some(&f.key), value.as_bytes(), f.timestamp);
                }
            }
            Function::Aggregate(instance) => {
                let timestamps: Vec<(Vec<u8>, i64)> =
                    fired.iter().map(|f| (f.key.clone(), f.timestamp)).collect();
                let windows = fired
                    .into_iter()
                    .map(|f| Accumulated {
                        key: f.key,
                        window: wit(f.window),
                        accumulator: f.accumulator,
                    })
                    .collect();
                let results = instance.window_results(windows)?;
                for ((key, ts), value) in timestamps.iter().zip(results) {
                    out.main.push(Some(key), &value, *ts);
                }
            }
            Function::Process(instance) => {
                for f in fired {
                    let mut emitted = instance.process_window(&f.key, wit(f.window), &f.records)?;
                    emitted.main.timestamps.fill(f.timestamp);
                    out.main.append(&mut emitted.main);
                    for mut side in emitted.side {
                        side.records.timestamps.fill(f.timestamp);
                        match out.side.iter_mut().find(|s| s.tag == side.tag) {
                            Some(s) => s.records.append(&mut side.records),
                            None => out.side.push(side),
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Opens a Wasm function (its `config`).
    pub(super) fn open(&mut self) -> Result<(), OperatorError> {
        match self {
            Function::BuiltIn { .. } => Ok(()),
            Function::Aggregate(i) | Function::Process(i) => i.open(),
        }
    }

    /// The Wasm instance, if any.
    pub(super) fn instance(&self) -> Option<&OperatorInstance> {
        match self {
            Function::BuiltIn { .. } => None,
            Function::Aggregate(i) | Function::Process(i) => Some(i),
        }
    }
}

fn wit(w: Window) -> WitWindow {
    WitWindow {
        start: w.start,
        end: w.end,
    }
}

fn value_of(acc: &[u8]) -> f64 {
    acc.try_into().map(f64::from_le_bytes).unwrap_or(0.0)
}

fn combine(aggregate: Aggregate, a: f64, b: f64) -> f64 {
    match aggregate {
        Aggregate::Count => 0.0,
        Aggregate::Sum | Aggregate::Avg => a + b,
        Aggregate::Min => a.min(b),
        Aggregate::Max => a.max(b),
    }
}

/// The built-in aggregate's result as JSON.
fn builtin_result(aggregate: Aggregate, f: &Fired) -> String {
    let number = |x: f64| {
        if x.is_finite() {
            format!("{x}")
        } else {
            "null".to_owned()
        }
    };
    let value = value_of(&f.accumulator);
    let result = match aggregate {
        Aggregate::Count => f.count.to_string(),
        Aggregate::Sum | Aggregate::Min | Aggregate::Max => number(value),
        Aggregate::Avg => number(value / f.count as f64),
    };
    let name = serde_json::to_string(&String::from_utf8_lossy(&f.key)).unwrap_or_default();
    if f.window == GLOBAL {
        format!(r#"{{"key":{name},"{}":{result}}}"#, aggregate.name())
    } else {
        format!(
            r#"{{"key":{name},"start":{},"end":{},"{}":{result}}}"#,
            f.window.start,
            f.window.end,
            aggregate.name()
        )
    }
}

/// The number a record contributes to a built-in aggregate (1 for `count`).
fn number(
    operator: &str,
    aggregate: Aggregate,
    field: Option<&KeySelector>,
    r: RecordRef<'_>,
) -> Result<f64, OperatorError> {
    let bad = |what: String| {
        OperatorError::new(
            operator,
            FailureKind::Host,
            format!(
                "bad record for aggregate = \"{}\" (key {:?}, value {:?}): {what}",
                aggregate.name(),
                String::from_utf8_lossy(r.key.unwrap_or_default()),
                excerpt(r.value)
            ),
        )
    };
    match field {
        None => Ok(1.0),
        Some(KeySelector::JsonField(field)) => {
            let v = crate::json_fields::field(r.value, field)
                .map_err(|e| bad(format!("field = \"json:{field}\", but it is not JSON: {e}")))?;
            v.as_ref()
                .and_then(serde_json::Value::as_f64)
                .ok_or_else(|| {
                    bad(format!(
                        "field = \"json:{field}\": no number in field `{field}`"
                    ))
                })
        }
        Some(_) => std::str::from_utf8(r.value)
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|x| x.is_finite())
            .ok_or_else(|| bad("field = \"value\": the value is not a decimal number".into())),
    }
}

/// The first 64 bytes of a value, for error messages.
fn excerpt(value: &[u8]) -> String {
    let end = value.len().min(64);
    let mut s = String::from_utf8_lossy(&value[..end]).into_owned();
    if value.len() > end {
        s.push('…');
    }
    s
}
