//! Operator logs per job on the JobManager: what the guests of a job
//! logged (`log` interface), shipped by the TaskManagers in their reports
//! ([`SubtaskLogs`]) and kept per vertex and subtask in bounded rings
//! ([`JobLogs`]), and the query behind `GET /v1/jobs/{id}/logs`
//! ([`JobManager::logs`]).
//!
//! # Invariants
//!
//! - Each (vertex, subtask) keeps at most [`RING_LINES`] lines and
//!   [`RING_BYTES`] bytes, as on the TaskManager; a job's logs are bounded
//!   by its parallelism, and kept across restarts until the job is gone.
//! - Lines get a sequence number per job as they arrive, so a client asks
//!   for what came after the last line it saw (`after`, `weir logs
//!   --follow`), over every subtask at once.
//! - A TaskManager's lines count only for subtasks placed on it.
//!
//! This module must not print the lines: the TaskManager that ran the
//! guest already did, in its own log.

use weir_runtime::rpc::SubtaskLogs;
use weir_runtime::telemetry::logs::{LogLevel, LogRing, RING_BYTES, RING_LINES};

use super::*;

/// Most lines one answer of `GET /v1/jobs/{id}/logs` carries; a client
/// asks again with `after` for the rest (`more` says there is more).
pub const MAX_LINES_PER_ANSWER: usize = 5000;

/// The logs of one job: a ring per (vertex, subtask).
#[derive(Debug, Default)]
pub(crate) struct JobLogs {
    /// The last sequence number given (0: none).
    seq: u64,
    rings: BTreeMap<(usize, u32), SubtaskRing>,
}

#[derive(Debug)]
struct SubtaskRing {
    ring: LogRing,
    /// Lines the TaskManagers reported dropped for it, over all attempts.
    dropped: u64,
}

/// `GET /v1/jobs/{id}/logs` query.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogQuery {
    /// Only this operator's (vertex uid) lines.
    pub operator: Option<String>,
    /// Only this subtask's lines.
    pub subtask: Option<u32>,
    /// Only lines after this sequence number (a previous answer's `next`).
    pub after: Option<u64>,
    /// At most this many lines (default and maximum
    /// [`MAX_LINES_PER_ANSWER`]), the oldest first.
    pub limit: Option<usize>,
}

/// `GET /v1/jobs/{id}/logs`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobLogsView {
    /// The job's id.
    pub job: String,
    /// The lines, oldest first.
    #[serde(default)]
    pub lines: Vec<LogLineView>,
    /// The sequence number to ask `after` next time: the last line's, or
    /// `after` as given when there is none.
    #[serde(default)]
    pub next: u64,
    /// Whether more lines match than `limit` let through.
    #[serde(default)]
    pub more: bool,
    /// Lines of the selected subtasks that were dropped (over their rate
    /// limit, or pushed out of the TaskManager's ring before they were
    /// sent), over the job's life.
    #[serde(default)]
    pub dropped: u64,
}

/// One line of a [`JobLogsView`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogLineView {
    /// Per job, increasing.
    pub seq: u64,
    /// When the guest wrote it, Unix ms.
    pub time_ms: i64,
    /// Its level.
    pub level: LogLevel,
    /// The operator (vertex uid).
    pub operator: String,
    /// The subtask index.
    pub subtask: u32,
    /// What the guest wrote.
    pub message: String,
}

impl JobLogs {
    /// Keeps what TaskManager `tm` shipped for `job`'s subtasks; lines
    /// for a vertex or subtask that is not the job's, or not placed on
    /// `tm`, are ignored.
    pub(crate) fn add(&mut self, job: &JobPlacement<'_>, tm: &str, logs: Vec<SubtaskLogs>) {
        for shipped in logs {
            let vertex = shipped.vertex as usize;
            if !job.runs_on(vertex, shipped.subtask, tm) {
                tracing::debug!(
                    taskmanager = tm,
                    vertex,
                    subtask = shipped.subtask,
                    "log lines for a subtask not placed on it ignored"
                );
                continue;
            }
            let ring = self
                .rings
                .entry((vertex, shipped.subtask))
                .or_insert_with(|| SubtaskRing {
                    ring: LogRing::new(RING_LINES, RING_BYTES),
                    dropped: 0,
                });
            ring.dropped = ring.dropped.saturating_add(shipped.dropped);
            for mut line in shipped.lines {
                self.seq += 1;
                line.seq = self.seq;
                ring.ring.push(line);
            }
        }
    }

    /// The lines `query` selects, oldest first.
    pub(crate) fn view(
        &self,
        id: &str,
        graph: &JobGraph,
        query: &LogQuery,
    ) -> Result<JobLogsView, ApiError> {
        let vertex = match &query.operator {
            None => None,
            Some(op) => Some(
                graph
                    .vertices
                    .iter()
                    .position(|v| v.id.0 == *op)
                    .ok_or_else(|| {
                        ApiError::not_found(format!(
                            "job {id} has no operator `{op}`; its vertices: {}",
                            graph
                                .vertices
                                .iter()
                                .map(|v| v.id.0.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ))
                    })?,
            ),
        };
        if let Some(subtask) = query.subtask {
            let most = match vertex {
                Some(v) => graph.vertices[v].parallelism,
                None => graph
                    .vertices
                    .iter()
                    .map(|v| v.parallelism)
                    .max()
                    .unwrap_or(0),
            };
            if subtask >= most {
                return Err(ApiError::bad_request(format!(
                    "subtask {subtask} does not exist: {} has parallelism {most} \
                     (subtasks are numbered from 0)",
                    match &query.operator {
                        Some(op) => format!("operator `{op}`"),
                        None => "the job's widest vertex".to_owned(),
                    }
                )));
            }
        }
        let limit = query
            .limit
            .unwrap_or(MAX_LINES_PER_ANSWER)
            .min(MAX_LINES_PER_ANSWER);
        let after = query.after.unwrap_or(0);
        let selected = self.rings.iter().filter(|((v, s), _)| {
            vertex.is_none_or(|want| want == *v) && query.subtask.is_none_or(|want| want == *s)
        });
        let mut dropped = 0u64;
        let mut lines = Vec::new();
        for ((v, s), ring) in selected {
            dropped = dropped.saturating_add(ring.dropped);
            lines.extend(ring.ring.after(after).map(|line| LogLineView {
                seq: line.seq,
                time_ms: line.time_ms,
                level: line.level,
                operator: graph.vertices[*v].id.0.clone(),
                subtask: *s,
                message: line.message.clone(),
            }));
        }
        lines.sort_by_key(|l| l.seq);
        let more = lines.len() > limit;
        lines.truncate(limit);
        Ok(JobLogsView {
            job: id.to_owned(),
            next: lines.last().map_or(after, |l| l.seq),
            lines,
            more,
            dropped,
        })
    }

    /// Dropped lines per (vertex, subtask), for `/metrics`.
    pub(crate) fn dropped(&self) -> impl Iterator<Item = ((usize, u32), u64)> + '_ {
        self.rings.iter().map(|(k, r)| (*k, r.dropped))
    }
}

/// Where a job's subtasks run: which TaskManager may report for which.
pub(crate) struct JobPlacement<'a> {
    pub(crate) tasks: &'a [TaskSpec],
    pub(crate) placement: &'a [Vec<SlotRef>],
}

impl JobPlacement<'_> {
    /// Whether subtask `subtask` of vertex `vertex` runs on `tm`.
    fn runs_on(&self, vertex: usize, subtask: u32, tm: &str) -> bool {
        self.tasks
            .iter()
            .position(|t| t.vertices.contains(&vertex))
            .and_then(|t| self.placement.get(t))
            .and_then(|slots| slots.get(subtask as usize))
            .is_some_and(|slot| slot.taskmanager == tm)
    }
}

impl JobManager {
    /// The operator log lines of job `id` that `query` selects
    /// (`GET /v1/jobs/{id}/logs`).
    pub fn logs(&self, id: &str, query: &LogQuery) -> Result<JobLogsView, ApiError> {
        let cell = self.job_cell(id)?;
        let job = self.lock_job(&cell);
        job.logs.view(id, &job.graph, query)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_runtime::telemetry::logs::LogLine;

    fn graph() -> JobGraph {
        crate::savepoints::tests::graph_with(1, 2, 128)
    }

    fn shipped(vertex: u32, subtask: u32, messages: &[&str], dropped: u64) -> SubtaskLogs {
        SubtaskLogs {
            vertex,
            subtask,
            lines: messages
                .iter()
                .enumerate()
                .map(|(i, m)| LogLine {
                    seq: 100 + i as u64,
                    time_ms: 7,
                    level: LogLevel::Info,
                    message: (*m).to_owned(),
                })
                .collect(),
            dropped,
        }
    }

    #[test]
    fn lines_are_kept_per_subtask_and_numbered_per_job() {
        let graph = graph();
        let tasks = chain(&graph);
        let tm = |t: usize, s: usize| {
            if (t + s).is_multiple_of(2) {
                "tm-a"
            } else {
                "tm-b"
            }
        };
        let placement: Vec<Vec<SlotRef>> = tasks
            .iter()
            .enumerate()
            .map(|(t, spec)| {
                (0..spec.parallelism as usize)
                    .map(|s| SlotRef {
                        taskmanager: tm(t, s).into(),
                        slot: s as u32,
                    })
                    .collect()
            })
            .collect();
        let job = JobPlacement {
            tasks: &tasks,
            placement: &placement,
        };
        let op = graph
            .vertices
            .iter()
            .position(|v| v.parallelism == 2)
            .expect("an operator of parallelism 2");
        let t = tasks.iter().position(|t| t.vertices.contains(&op)).unwrap();
        let (on_a, on_b) = if tm(t, 0) == "tm-a" { (0, 1) } else { (1, 0) };
        let mut logs = JobLogs::default();
        logs.add(
            &job,
            "tm-a",
            vec![shipped(op as u32, on_a, &["a1", "a2"], 3)],
        );
        // Not placed there: ignored.
        logs.add(&job, "tm-a", vec![shipped(op as u32, on_b, &["forged"], 9)]);
        logs.add(&job, "tm-b", vec![shipped(op as u32, on_b, &["b1"], 0)]);
        let uid = graph.vertices[op].id.0.clone();
        let all = logs.view("j", &graph, &LogQuery::default()).unwrap();
        let text: Vec<&str> = all.lines.iter().map(|l| l.message.as_str()).collect();
        assert_eq!(text, ["a1", "a2", "b1"]);
        assert_eq!(all.lines[2].subtask, on_b);
        assert_eq!(all.lines[2].operator, uid);
        assert_eq!((all.next, all.dropped, all.more), (3, 3, false));
        let query = LogQuery {
            operator: Some(uid.clone()),
            subtask: Some(on_a),
            after: Some(1),
            limit: None,
        };
        let one = logs.view("j", &graph, &query).unwrap();
        assert_eq!(one.lines.len(), 1);
        assert_eq!(one.lines[0].message, "a2");
        let limited = LogQuery {
            limit: Some(1),
            ..LogQuery::default()
        };
        let first = logs.view("j", &graph, &limited).unwrap();
        assert_eq!((first.lines.len(), first.next, first.more), (1, 1, true));
        // Nothing new: `next` stays where the client was.
        let none = LogQuery {
            after: Some(3),
            ..LogQuery::default()
        };
        assert_eq!(logs.view("j", &graph, &none).unwrap().next, 3);
    }

    #[test]
    fn an_unknown_operator_or_subtask_is_a_clear_error() {
        let graph = graph();
        let logs = JobLogs::default();
        let e = logs
            .view(
                "j",
                &graph,
                &LogQuery {
                    operator: Some("nope".into()),
                    ..LogQuery::default()
                },
            )
            .unwrap_err();
        assert_eq!(e.status, 404);
        assert!(e.message.contains("no operator `nope`"), "{}", e.message);
        let e = logs
            .view(
                "j",
                &graph,
                &LogQuery {
                    subtask: Some(2),
                    ..LogQuery::default()
                },
            )
            .unwrap_err();
        assert_eq!(e.status, 400, "{}", e.message);
    }
}
