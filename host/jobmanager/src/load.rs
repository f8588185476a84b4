//! How loaded a running job is, and why it is slow: recent per-vertex
//! rates and time shares from the TaskManagers' heartbeat counters
//! ([`LoadWindow`]), and Flink's backpressure rule to name the bottleneck
//! ([`find_bottleneck`]).
//!
//! # The window
//!
//! The counters in a [`JobReport`] grow over an attempt (records, and each
//! task head's busy, backpressured and idle milliseconds, summed over its
//! subtasks). Each time a report arrives, at most once per
//! [`SAMPLE_EVERY`], the job's totals are sampled; rates and shares are
//! the difference between the newest sample and the oldest one kept
//! within [`WINDOW`]. A new attempt starts a new window (its counters start
//! from zero). Time comes from the caller (the JobManager's clock).
//!
//! # The rule
//!
//! A vertex whose output channels are full most of the time is
//! *backpressured*: something downstream cannot keep up. The bottleneck is
//! the first task (chain of vertices), in topological order, that is not
//! backpressured itself, is *busy* most of the time, and has a
//! backpressured task upstream: it is what the upstream tasks wait for.
//! Thresholds are Flink's "high" level ([`BACKPRESSURED`], [`BUSY`]).
//!
//! Pure: no locks, no clock reads. This module must not touch the job's
//! lifecycle.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use weir_runtime::job::{JobGraph, TaskSpec, task_edges};
use weir_runtime::rpc::JobReport;

/// How far back rates and shares look: long enough to smooth the steps of
/// heartbeats (every second by default), short enough to follow a change
/// within a few seconds.
pub const WINDOW: Duration = Duration::from_secs(5);

/// Samples are at least this far apart: heartbeats of several
/// TaskManagers arriving together count once.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// A task backpressured at least this share of the time is
/// backpressured (Flink's "high" level starts at 50 %).
pub const BACKPRESSURED: f64 = 0.5;

/// A task busy at least this share of the time is busy.
pub const BUSY: f64 = 0.5;

/// One vertex's totals in a sample.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Totals {
    records_in: u64,
    records_out: u64,
    busy_ms: u64,
    backpressured_ms: u64,
    idle_ms: u64,
}

#[derive(Debug, Clone)]
struct Sample {
    at: Instant,
    vertices: Vec<Totals>,
}

/// A job's recent samples (one attempt's).
#[derive(Debug, Clone, Default)]
pub struct LoadWindow {
    attempt: u32,
    samples: VecDeque<Sample>,
}

/// A vertex's load over the window.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct VertexLoad {
    /// Records received per second.
    pub records_in_per_s: f64,
    /// Records emitted per second.
    pub records_out_per_s: f64,
    /// Share of its task's time spent working (0–1).
    pub busy: f64,
    /// Share spent waiting for room downstream.
    pub backpressured: f64,
    /// Share spent waiting for input.
    pub idle: f64,
}

impl LoadWindow {
    /// Samples the totals of `reports` for attempt `attempt` at `now`
    /// (skipped if the previous sample is younger than [`SAMPLE_EVERY`]).
    /// `head_of[v]` is the head vertex of `v`'s task: the time counters
    /// are kept there.
    pub fn sample<'a>(
        &mut self,
        attempt: u32,
        now: Instant,
        vertices: usize,
        head_of: &[usize],
        reports: impl Iterator<Item = &'a JobReport> + Clone,
    ) {
        if attempt != self.attempt {
            self.samples.clear();
            self.attempt = attempt;
        }
        if self
            .samples
            .back()
            .is_some_and(|s| now.saturating_duration_since(s.at) < SAMPLE_EVERY)
        {
            return;
        }
        let sum = |v: usize, f: &dyn Fn(&weir_runtime::rpc::VertexReport) -> u64| -> u64 {
            reports
                .clone()
                .filter_map(|r| r.vertices.get(v))
                .map(f)
                .sum()
        };
        let totals = (0..vertices)
            .map(|v| {
                let head = head_of.get(v).copied().unwrap_or(v);
                Totals {
                    records_in: sum(v, &|r| r.records_in),
                    records_out: sum(v, &|r| r.records_out),
                    busy_ms: sum(head, &|r| r.busy_ms),
                    backpressured_ms: sum(head, &|r| r.backpressured_ms),
                    idle_ms: sum(head, &|r| r.idle_ms),
                }
            })
            .collect();
        self.samples.push_back(Sample {
            at: now,
            vertices: totals,
        });
        // Keep one sample at or beyond the window's start as the baseline.
        while self.samples.len() > 2 && now.saturating_duration_since(self.samples[1].at) >= WINDOW
        {
            self.samples.pop_front();
        }
    }

    /// Forgets every sample (a new attempt starts from zero).
    pub fn clear(&mut self) {
        self.samples.clear();
    }

    /// Each vertex's load between the oldest and the newest sample;
    /// `None` until two samples are far enough apart.
    pub fn loads(&self) -> Option<Vec<VertexLoad>> {
        let (first, last) = (self.samples.front()?, self.samples.back()?);
        let seconds = last.at.saturating_duration_since(first.at).as_secs_f64();
        if seconds < SAMPLE_EVERY.as_secs_f64() {
            return None;
        }
        Some(
            first
                .vertices
                .iter()
                .zip(&last.vertices)
                .map(|(a, b)| {
                    let d = |x: u64, y: u64| y.saturating_sub(x) as f64;
                    let busy = d(a.busy_ms, b.busy_ms);
                    let bp = d(a.backpressured_ms, b.backpressured_ms);
                    let idle = d(a.idle_ms, b.idle_ms);
                    let time = busy + bp + idle;
                    let share = |x: f64| if time > 0.0 { x / time } else { 0.0 };
                    VertexLoad {
                        records_in_per_s: d(a.records_in, b.records_in) / seconds,
                        records_out_per_s: d(a.records_out, b.records_out) / seconds,
                        busy: share(busy),
                        backpressured: share(bp),
                        idle: share(idle),
                    }
                })
                .collect(),
        )
    }
}

/// `bottleneck` of `GET /v1/jobs/{id}`: why the job is as fast as it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bottleneck {
    /// The first vertex of the bottleneck's task; `None` when there is
    /// none (`message` says why).
    pub vertex: Option<String>,
    /// Every vertex of that task (chained with it), head first.
    #[serde(default)]
    pub chain: Vec<String>,
    /// Its busy share over the window (0–1).
    #[serde(default)]
    pub busy_ratio: Option<f64>,
    /// Its upstream vertices that are backpressured, with their shares.
    #[serde(default)]
    pub upstream: Vec<UpstreamPressure>,
    /// The diagnosis in plain words.
    pub message: String,
}

/// A backpressured vertex upstream of the bottleneck.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamPressure {
    /// The vertex (the last of its task's chain: the one that sends).
    pub vertex: String,
    /// Its backpressured share over the window (0–1).
    pub backpressured_ratio: f64,
}

/// A task as the rule sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskLoad {
    /// Its vertices' ids, head first.
    pub vertices: Vec<String>,
    /// Indices (into the same list) of the tasks feeding it.
    pub upstream: Vec<usize>,
    /// Busy share (0–1).
    pub busy: f64,
    /// Backpressured share (0–1).
    pub backpressured: f64,
}

/// The tasks of a job for [`find_bottleneck`], in `tasks`' (topological)
/// order, with the load of each task's head.
pub fn task_loads(graph: &JobGraph, tasks: &[TaskSpec], loads: &[VertexLoad]) -> Vec<TaskLoad> {
    let edges = task_edges(graph, tasks);
    tasks
        .iter()
        .enumerate()
        .map(|(t, spec)| {
            let head = loads.get(spec.head()).copied().unwrap_or_default();
            let mut upstream: Vec<usize> = edges
                .iter()
                .filter(|e| e.to_task == t)
                .map(|e| e.from_task)
                .collect();
            upstream.sort_unstable();
            upstream.dedup();
            TaskLoad {
                vertices: spec
                    .vertices
                    .iter()
                    .map(|v| graph.vertices[*v].id.0.clone())
                    .collect(),
                upstream,
                busy: head.busy,
                backpressured: head.backpressured,
            }
        })
        .collect()
}

fn pct(share: f64) -> String {
    format!("{:.0} %", share * 100.0)
}

fn name(task: &TaskLoad) -> String {
    let first = task.vertices.first().map(String::as_str).unwrap_or("?");
    if task.vertices.len() > 1 {
        format!("`{first}` (chained with {})", {
            let rest: Vec<String> = task.vertices[1..]
                .iter()
                .map(|v| format!("`{v}`"))
                .collect();
            rest.join(", ")
        })
    } else {
        format!("`{first}`")
    }
}

impl Bottleneck {
    /// What is said of a job with `job.metrics = false`: its tasks time
    /// nothing, so there is no load to judge.
    pub fn unmeasured() -> Bottleneck {
        Bottleneck {
            vertex: None,
            chain: Vec::new(),
            busy_ratio: None,
            upstream: Vec::new(),
            message: "not measured: the job runs with `metrics = false` (its tasks time \
                      nothing)"
                .to_owned(),
        }
    }
}

/// Flink's backpressure rule over `tasks` (topological order): see the
/// module docs.
pub fn find_bottleneck(tasks: &[TaskLoad]) -> Bottleneck {
    let pressured = |t: &TaskLoad| t.backpressured >= BACKPRESSURED;
    for task in tasks {
        if pressured(task) || task.busy < BUSY {
            continue;
        }
        let upstream: Vec<&TaskLoad> = task
            .upstream
            .iter()
            .filter_map(|u| tasks.get(*u))
            .filter(|u| pressured(u))
            .collect();
        if upstream.is_empty() {
            continue;
        }
        let upstream: Vec<UpstreamPressure> = upstream
            .iter()
            .map(|u| UpstreamPressure {
                vertex: u.vertices.last().cloned().unwrap_or_default(),
                backpressured_ratio: u.backpressured,
            })
            .collect();
        let waiting = upstream
            .iter()
            .map(|u| {
                format!(
                    "`{}` upstream is backpressured {} of the time",
                    u.vertex,
                    pct(u.backpressured_ratio)
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        return Bottleneck {
            vertex: task.vertices.first().cloned(),
            chain: task.vertices.clone(),
            busy_ratio: Some(task.busy),
            upstream,
            message: format!(
                "{} is the bottleneck: busy {}; {waiting}",
                name(task),
                pct(task.busy)
            ),
        };
    }
    let message = if let Some(task) = tasks.iter().rfind(|t| pressured(t)) {
        // Backpressured, but nothing after it works hard: the wait is
        // elsewhere (the network between TaskManagers, a slow disk).
        format!(
            "{} is backpressured {} of the time, but no vertex downstream of it is busy: \
             the limit is between them (the network, or a sink's external system)",
            name(task),
            pct(task.backpressured)
        )
    } else if let Some(task) = tasks
        .iter()
        .filter(|t| t.upstream.is_empty() && t.busy >= BUSY)
        .max_by(|a, b| a.busy.total_cmp(&b.busy))
    {
        format!(
            "no bottleneck downstream: nothing is backpressured; the source {} is busy {} (the job runs as fast as its input is read)",
            name(task),
            pct(task.busy)
        )
    } else {
        "no bottleneck: nothing is backpressured or busy most of the time (the job keeps up with its input)".to_owned()
    };
    Bottleneck {
        vertex: None,
        chain: Vec::new(),
        busy_ratio: None,
        upstream: Vec::new(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(vertices: &[&str], upstream: &[usize], busy: f64, backpressured: f64) -> TaskLoad {
        TaskLoad {
            vertices: vertices.iter().map(|v| v.to_string()).collect(),
            upstream: upstream.to_vec(),
            busy,
            backpressured,
        }
    }

    #[test]
    fn the_first_busy_task_behind_backpressure_is_the_bottleneck() {
        let tasks = [
            task(&["lines"], &[], 0.05, 0.9),
            task(&["tokenize"], &[0], 0.1, 0.85),
            task(&["count"], &[1], 0.97, 0.0),
            // Busy too, but downstream of the bottleneck: not it.
            task(&["out"], &[2], 0.6, 0.0),
        ];
        let b = find_bottleneck(&tasks);
        assert_eq!(b.vertex.as_deref(), Some("count"));
        assert_eq!(b.busy_ratio, Some(0.97));
        assert_eq!(
            b.upstream,
            [UpstreamPressure {
                vertex: "tokenize".into(),
                backpressured_ratio: 0.85
            }]
        );
        assert_eq!(
            b.message,
            "`count` is the bottleneck: busy 97 %; `tokenize` upstream is backpressured 85 % of the time"
        );
    }

    #[test]
    fn a_slow_sink_at_the_end_of_a_chain_of_backpressure() {
        let tasks = [
            task(&["gen", "up"], &[], 0.2, 0.8),
            task(&["slow"], &[0], 0.99, 0.0),
        ];
        let b = find_bottleneck(&tasks);
        assert_eq!(b.vertex.as_deref(), Some("slow"));
        assert_eq!(b.upstream[0].vertex, "up", "the sending end of the chain");
        // A chained bottleneck names its whole chain.
        let tasks = [
            task(&["gen"], &[], 0.2, 0.8),
            task(&["count", "sink"], &[0], 0.9, 0.0),
        ];
        let b = find_bottleneck(&tasks);
        assert_eq!(b.chain, ["count", "sink"]);
        assert!(
            b.message
                .starts_with("`count` (chained with `sink`) is the bottleneck"),
            "{}",
            b.message
        );
    }

    #[test]
    fn a_busy_task_without_backpressure_upstream_is_not_a_bottleneck() {
        // Busy, but its input is not waiting on it.
        let tasks = [
            task(&["gen"], &[], 0.3, 0.1),
            task(&["work"], &[0], 0.9, 0.0),
        ];
        let b = find_bottleneck(&tasks);
        assert_eq!(b.vertex, None);
        assert!(b.message.starts_with("no bottleneck"), "{}", b.message);
        // A busy source with nothing backpressured: the input is the limit.
        let tasks = [
            task(&["gen"], &[], 0.95, 0.0),
            task(&["out"], &[0], 0.2, 0.0),
        ];
        let b = find_bottleneck(&tasks);
        assert_eq!(b.vertex, None);
        assert!(
            b.message.contains("the source `gen` is busy 95 %"),
            "{}",
            b.message
        );
    }

    #[test]
    fn backpressure_with_nothing_busy_downstream_points_between_them() {
        let tasks = [
            task(&["gen"], &[], 0.1, 0.9),
            task(&["out"], &[0], 0.2, 0.0),
        ];
        let b = find_bottleneck(&tasks);
        assert_eq!(b.vertex, None);
        assert!(
            b.message.contains("`gen` is backpressured 90 %"),
            "{}",
            b.message
        );
    }

    #[test]
    fn of_two_inputs_only_the_backpressured_one_is_named() {
        let tasks = [
            task(&["left"], &[], 0.1, 0.7),
            task(&["right"], &[], 0.1, 0.2),
            task(&["join"], &[0, 1], 0.8, 0.0),
        ];
        let b = find_bottleneck(&tasks);
        assert_eq!(b.vertex.as_deref(), Some("join"));
        assert_eq!(b.upstream.len(), 1);
        assert_eq!(b.upstream[0].vertex, "left");
    }

    fn report(values: &[(u64, u64, u64, u64, u64)]) -> JobReport {
        JobReport {
            vertices: values
                .iter()
                .map(
                    |&(records_in, records_out, busy_ms, backpressured_ms, idle_ms)| {
                        weir_runtime::rpc::VertexReport {
                            records_in,
                            records_out,
                            busy_ms,
                            backpressured_ms,
                            idle_ms,
                            watermark: None,
                            latency_ms: Vec::new(),
                        }
                    },
                )
                .collect(),
            ..JobReport::default()
        }
    }

    #[test]
    fn the_window_gives_rates_and_shares_of_its_last_seconds() {
        let t0 = Instant::now();
        let mut w = LoadWindow::default();
        let heads = [0, 0];
        // Two vertices chained: the second's time is its head's.
        w.sample(
            0,
            t0,
            2,
            &heads,
            [report(&[(0, 0, 0, 0, 0), (0, 0, 0, 0, 0)])].iter(),
        );
        assert_eq!(w.loads(), None, "one sample is no window");
        // Too soon: skipped.
        w.sample(
            0,
            t0 + Duration::from_millis(100),
            2,
            &heads,
            [report(&[(0, 50, 9, 9, 9), (50, 0, 0, 0, 0)])].iter(),
        );
        assert_eq!(w.loads(), None);
        // Two TaskManagers' reports are summed.
        let a = report(&[(0, 1000, 600, 300, 100), (1000, 500, 0, 0, 0)]);
        let b = report(&[(0, 1000, 600, 300, 100), (1000, 500, 0, 0, 0)]);
        w.sample(0, t0 + Duration::from_secs(2), 2, &heads, [a, b].iter());
        let loads = w.loads().unwrap();
        assert_eq!(loads[0].records_out_per_s, 1000.0);
        assert_eq!(loads[1].records_in_per_s, 1000.0);
        assert_eq!(loads[1].records_out_per_s, 500.0);
        assert!((loads[0].busy - 0.6).abs() < 1e-9);
        assert!(
            (loads[1].backpressured - 0.3).abs() < 1e-9,
            "the head's time"
        );
        // Old samples leave the window: the shares follow the new load.
        let mut t = t0 + Duration::from_secs(2);
        let mut busy = 1200;
        let mut bp = 600;
        for _ in 0..10 {
            t += Duration::from_secs(1);
            busy += 100;
            bp += 900;
            w.sample(
                0,
                t,
                2,
                &heads,
                [report(&[(0, 0, busy, bp, 200), (0, 0, 0, 0, 0)])].iter(),
            );
        }
        let loads = w.loads().unwrap();
        assert!((loads[0].backpressured - 0.9).abs() < 1e-9, "{loads:?}");
        // A new attempt starts over.
        w.sample(
            1,
            t + Duration::from_secs(1),
            2,
            &heads,
            [report(&[(0, 0, 1, 1, 1), (0, 0, 0, 0, 0)])].iter(),
        );
        assert_eq!(w.loads(), None);
    }
}
