//! Operator metrics, reported by the host beside its own per-operator metrics.
//!
//! Natively, inside the test harness, they are recorded (see
//! `Harness::counter` and `Harness::gauge`); outside it they are dropped.

use crate::backend;

/// Adds `delta` to the counter `name`.
pub fn counter_add(name: &str, delta: u64) {
    backend::counter_add(name, delta);
}

/// Sets the gauge `name` to `value`.
pub fn gauge_set(name: &str, value: f64) {
    backend::gauge_set(name, value);
}
