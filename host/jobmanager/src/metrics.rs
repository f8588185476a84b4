//! `GET /metrics` on the JobManager: the Prometheus text exposition of
//! the cluster and its jobs, as Flink's JobManager reporter has them —
//! TaskManagers and slots, each job's state, restarts and latest
//! completed checkpoint — plus each vertex's records, busy, idle and
//! backpressured time and watermark summed over its subtasks from the
//! TaskManagers' reports. Per-subtask series and the operators' own
//! metrics are on each TaskManager's `/metrics` (`weir taskmanager
//! --metrics ADDR`), where they are measured.
//!
//! Built fresh at each scrape under each job's lock in turn, like the
//! REST views; it must not keep state of its own.

use weir_runtime::checkpoint::coordinator::CheckpointStatus;
use weir_runtime::telemetry::exposition::Exposition;

use super::*;

impl JobManager {
    /// The exposition text of `GET /metrics`.
    pub fn prometheus(&self) -> String {
        let mut e = Exposition::new();
        let (mut active, mut lost, mut free, mut occupied) = (0u32, 0u32, 0u32, 0u32);
        for tm in self.taskmanagers.lock().values() {
            if tm.lost.is_some() {
                lost += 1;
            } else {
                active += 1;
                occupied += tm.occupied.len() as u32;
                free += tm.slots_total - tm.occupied.len() as u32;
            }
        }
        let help = "TaskManagers known to the JobManager, by state.";
        e.gauge(
            "weir_taskmanagers",
            help,
            &[("state", "active")],
            active.into(),
        );
        e.gauge("weir_taskmanagers", help, &[("state", "lost")], lost.into());
        let help = "Task slots of the active TaskManagers, by state.";
        e.gauge("weir_slots", help, &[("state", "free")], free.into());
        e.gauge(
            "weir_slots",
            help,
            &[("state", "occupied")],
            occupied.into(),
        );
        e.gauge(
            "weir_modules",
            "Modules in the JobManager's module store.",
            &[],
            self.store.list().len() as f64,
        );
        for cell in self.job_cells() {
            let job = self.lock_job(&cell);
            job_metrics(&mut e, &job);
        }
        e.render()
    }
}

/// The samples of one job.
fn job_metrics(e: &mut Exposition, job: &Job) {
    let (id, name) = (job.id.as_str(), job.name.as_str());
    e.gauge(
        "weir_job_state",
        "1 for the job's current state (running, finished, failed, ...).",
        &[
            ("job_id", id),
            ("job_name", name),
            ("state", job.state.as_str()),
        ],
        1.0,
    );
    e.counter(
        "weir_job_restarts_total",
        "Restarts of the job by its restart strategy.",
        &[("job_id", id), ("job_name", name)],
        f64::from(job.restarts.count()),
    );
    e.gauge(
        "weir_job_attempt",
        "The job's deployment attempt (0, then one more per restart or upgrade).",
        &[("job_id", id), ("job_name", name)],
        job.attempt.into(),
    );
    let detail = job_detail(job);
    for v in &detail.vertices {
        let labels = [
            ("job_id", id),
            ("job_name", name),
            ("vertex", v.id.as_str()),
        ];
        e.counter(
            "weir_job_vertex_records_in_total",
            "Records the vertex received, summed over its subtasks (this attempt).",
            &labels,
            v.records_in as f64,
        );
        e.counter(
            "weir_job_vertex_records_out_total",
            "Records the vertex emitted, summed over its subtasks (this attempt).",
            &labels,
            v.records_out as f64,
        );
        if v.busy_ms + v.idle_ms + v.backpressured_ms > 0 {
            for (family, help, ms) in [
                (
                    "weir_job_vertex_busy_seconds_total",
                    "Time the subtasks of the vertex's task spent working, summed.",
                    v.busy_ms,
                ),
                (
                    "weir_job_vertex_idle_seconds_total",
                    "Time the subtasks of the vertex's task spent waiting for input, summed.",
                    v.idle_ms,
                ),
                (
                    "weir_job_vertex_backpressured_seconds_total",
                    "Time the subtasks of the vertex's task spent waiting for room downstream, summed.",
                    v.backpressured_ms,
                ),
            ] {
                e.counter(family, help, &labels, ms as f64 / 1000.0);
            }
        }
        if let Some(l) = &v.latency_ms {
            for (quantile, ms) in [("0.5", l.p50), ("0.95", l.p95), ("0.99", l.p99)] {
                let labels = [
                    ("job_id", id),
                    ("job_name", name),
                    ("vertex", v.id.as_str()),
                    ("quantile", quantile),
                ];
                e.gauge(
                    "weir_job_vertex_latency_seconds",
                    "Source-to-vertex latency of the latest latency markers (job.latency_tracking_interval_ms), by quantile.",
                    &labels,
                    f64::from(ms) / 1000.0,
                );
            }
        }
        if let Some(w) = v.watermark.filter(|w| *w != i64::MIN && *w != i64::MAX) {
            e.gauge(
                "weir_job_vertex_watermark_seconds",
                "The vertex's event-time watermark (lowest over its subtasks), Unix seconds.",
                &labels,
                w as f64 / 1000.0,
            );
        }
    }
    if let Some(c) = &job.checkpoints {
        let history = c.coordinator.history();
        if let Some(last) = history
            .iter()
            .find(|s| s.status == CheckpointStatus::Completed)
        {
            let labels = [("job_id", id), ("job_name", name)];
            e.gauge(
                "weir_job_last_checkpoint_id",
                "The id of the job's latest completed checkpoint.",
                &labels,
                last.id as f64,
            );
            e.gauge(
                "weir_job_last_checkpoint_duration_seconds",
                "From trigger to completion of the latest completed checkpoint.",
                &labels,
                last.duration_ms.unwrap_or(0) as f64 / 1000.0,
            );
            e.gauge(
                "weir_job_last_checkpoint_alignment_seconds",
                "The longest barrier alignment of the latest completed checkpoint.",
                &labels,
                last.max_alignment_ms as f64 / 1000.0,
            );
            e.gauge(
                "weir_job_last_checkpoint_size_bytes",
                "Bytes the latest completed checkpoint references in all.",
                &labels,
                last.full_size as f64,
            );
            e.gauge(
                "weir_job_last_checkpoint_incremental_size_bytes",
                "Bytes uploaded for the latest completed checkpoint.",
                &labels,
                last.incremental_size as f64,
            );
        }
    }
    for ((v, subtask), dropped) in job.logs.dropped() {
        let Some(vertex) = job.graph.vertices.get(v) else {
            continue;
        };
        e.counter(
            "weir_job_log_lines_dropped_total",
            "Operator log lines the JobManager never received (over the subtask's rate \
             limit, or pushed out of the TaskManager's ring first).",
            &[
                ("job_id", id),
                ("job_name", name),
                ("operator", vertex.id.0.as_str()),
                ("subtask", &subtask.to_string()),
            ],
            dropped as f64,
        );
    }
}
