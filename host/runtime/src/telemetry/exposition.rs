//! The Prometheus text exposition (format 0.0.4) of what a daemon measures,
//! built fresh for each scrape of `/metrics` with the `prometheus` crate,
//! never formatted by hand.
//!
//! A scrape reads the daemon's live counters (jobs come and go, so the set
//! of label values changes between scrapes) into an [`Exposition`]: one
//! call per sample, `counter` or `gauge`, with the family's name, help and
//! labels. Families appear in the output only once they have a sample.

use std::collections::HashMap;

use prometheus::core::{MetricVec, MetricVecBuilder};
use prometheus::{CounterVec, GaugeVec, Opts, Registry, TextEncoder};

/// The `Content-Type` of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// One scrape's samples.
#[derive(Default)]
pub struct Exposition {
    registry: Registry,
    counters: HashMap<&'static str, (CounterVec, Vec<&'static str>)>,
    gauges: HashMap<&'static str, (GaugeVec, Vec<&'static str>)>,
}

/// The families of one metric type, by name, with their label names.
type Families<P> = HashMap<&'static str, (MetricVec<P>, Vec<&'static str>)>;

/// The metric of family `(name, help, labels)` at the labels' values:
/// the family made with `make` and registered on first use; `None` (logged
/// at debug) when it cannot be, or when the label names differ from the
/// family's first sample's.
fn sample<P: MetricVecBuilder + 'static>(
    registry: &Registry,
    families: &mut Families<P>,
    (name, help, labels): (&'static str, &'static str, &[(&'static str, &str)]),
    make: fn(Opts, &[&str]) -> prometheus::Result<MetricVec<P>>,
) -> Option<P::M> {
    let names: Vec<&'static str> = labels.iter().map(|(k, _)| *k).collect();
    if !families.contains_key(name) {
        let Some(family) = make(Opts::new(name, help), &names)
            .ok()
            .filter(|f| registry.register(Box::new(f.clone())).is_ok())
        else {
            tracing::debug!("metric family {name} cannot be registered");
            return None;
        };
        families.insert(name, (family, names.clone()));
    }
    let (family, expected) = &families[name];
    if *expected != names {
        tracing::debug!("sample of {name} with labels {names:?} left out");
        return None;
    }
    let values: Vec<&str> = labels.iter().map(|(_, v)| *v).collect();
    family.get_metric_with_label_values(&values).ok()
}

impl std::fmt::Debug for Exposition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exposition").finish_non_exhaustive()
    }
}

impl Exposition {
    /// No samples yet.
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// Adds `value` to counter `name` (which ends in `_total`) at `labels`
    /// (a negative or NaN value adds nothing). Every sample of a family
    /// must have the same label names, in the same order; a sample that
    /// does not is left out (and logged at debug).
    pub fn counter(
        &mut self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
        value: f64,
    ) {
        let family = (name, help, labels);
        if let Some(c) = sample(&self.registry, &mut self.counters, family, CounterVec::new) {
            c.inc_by(if value > 0.0 { value } else { 0.0 });
        }
    }

    /// Sets gauge `name` at `labels` to `value` (the last one set wins).
    /// Label names as for [`counter`](Self::counter).
    pub fn gauge(
        &mut self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
        value: f64,
    ) {
        let family = (name, help, labels);
        if let Some(g) = sample(&self.registry, &mut self.gauges, family, GaugeVec::new) {
            g.set(value);
        }
    }

    /// The exposition text, families sorted by name.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Err(e) = TextEncoder::new().encode_utf8(&self.registry.gather(), &mut out) {
            tracing::warn!("cannot encode the metrics: {e}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_of_one_family_share_its_help_and_type() {
        let mut e = Exposition::new();
        let help = "Records emitted.";
        e.counter(
            "weir_records_out_total",
            help,
            &[("job", "j"), ("subtask", "0")],
            3.0,
        );
        e.counter(
            "weir_records_out_total",
            help,
            &[("job", "j"), ("subtask", "1")],
            4.0,
        );
        e.counter(
            "weir_records_out_total",
            help,
            &[("job", "j"), ("subtask", "1")],
            1.0,
        );
        // Other label names: left out, not a panic.
        e.counter("weir_records_out_total", help, &[("vertex", "v")], 9.0);
        e.gauge(
            "weir_watermark_milliseconds",
            "W.",
            &[("q", "a \"b\"\n")],
            -1.5,
        );
        let text = e.render();
        assert!(
            text.contains("# TYPE weir_records_out_total counter"),
            "{text}"
        );
        assert!(
            text.contains("weir_records_out_total{job=\"j\",subtask=\"0\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("weir_records_out_total{job=\"j\",subtask=\"1\"} 5"),
            "{text}"
        );
        assert!(!text.contains(" 9"), "{text}");
        assert!(
            text.contains(r#"weir_watermark_milliseconds{q="a \"b\"\n"} -1.5"#),
            "{text}"
        );
    }
}
