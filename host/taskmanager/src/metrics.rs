//! `GET /metrics` on a TaskManager (`weir taskmanager --metrics ADDR`):
//! the Prometheus text exposition of what runs here, per job, vertex and
//! subtask — records and bytes in and out, busy, idle and backpressured
//! time (of each task's head vertex, where they are measured), the
//! latency markers' quantiles, the watermark, the keyed state's size per
//! backend, the network channels' buffers and credits — and each operator's own
//! counters and gauges (the guest's `metrics` interface) labeled with job,
//! operator and subtask, as Flink's TaskManager reporter has its task and
//! operator metrics. A job with `metrics = false` measures none of the
//! built-in per-subtask samples, so it shows only the watermark and the
//! operators' own.
//!
//! The listener is a plain HTTP/1.1 server with one path and no token,
//! like Flink's Prometheus reporter: it serves only what it measures, and
//! binds where it is told (`--metrics 127.0.0.1:9249`, or port 0 for any
//! free port; the address is printed at start). A client that does not
//! send its request header within [`READ_TIMEOUT`] is cut off.
//!
//! The exposition is built fresh at each scrape from the live counters
//! ([`weir_runtime::taskmanager::SubtaskMetrics`]); this module keeps no
//! state and must not change what it reads.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode, header};
use weir_runtime::taskmanager::{LatencyQuantiles, SubtaskMetrics};
use weir_runtime::telemetry::exposition::{CONTENT_TYPE, Exposition};

use crate::node::{Inner, LocalJob};

/// How long a client may take to send its request header.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `/metrics` on `listener` until the task is aborted.
pub(crate) async fn serve(listener: tokio::net::TcpListener, inner: Arc<Inner>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!("metrics: cannot accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let inner = inner.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let inner = inner.clone();
                async move { Ok::<_, Infallible>(answer(&req, &inner)) }
            });
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(READ_TIMEOUT);
            let io = hyper_util::rt::TokioIo::new(stream);
            if let Err(e) = http.serve_connection(io, service).await {
                tracing::debug!("metrics connection closed: {e}");
            }
        });
    }
}

fn answer(req: &Request<Incoming>, inner: &Inner) -> Response<String> {
    let plain = |status: StatusCode, text: &str| {
        let mut r = Response::new(format!("{text}\n"));
        *r.status_mut() = status;
        r
    };
    if req.uri().path() != "/metrics" {
        return plain(
            StatusCode::NOT_FOUND,
            "not found: the metrics are at /metrics",
        );
    }
    if *req.method() != Method::GET && *req.method() != Method::HEAD {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "only GET /metrics");
    }
    let mut r = Response::new(render(inner));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(CONTENT_TYPE),
    );
    r
}

/// The exposition text of everything running on this TaskManager.
pub(crate) fn render(inner: &Inner) -> String {
    let mut e = Exposition::new();
    let tm = inner.id.as_str();
    e.gauge(
        "weir_taskmanager_slots",
        "Task slots this TaskManager offers.",
        &[("taskmanager", tm)],
        inner.slots.into(),
    );
    let net = inner.net_stats();
    e.counter(
        "weir_taskmanager_network_sent_bytes_total",
        "Bytes written to data streams to other TaskManagers.",
        &[("taskmanager", tm)],
        net.bytes_sent as f64,
    );
    e.counter(
        "weir_taskmanager_network_received_bytes_total",
        "Bytes read from data streams of other TaskManagers.",
        &[("taskmanager", tm)],
        net.bytes_received as f64,
    );
    e.gauge(
        "weir_taskmanager_network_buffered_bytes",
        "Bytes serialized for other TaskManagers and not yet credited back.",
        &[("taskmanager", tm)],
        net.buffered_bytes as f64,
    );
    for (direction, open) in [("out", net.channels_out), ("in", net.channels_in)] {
        e.gauge(
            "weir_taskmanager_network_channels",
            "Data channels to (out) and from (in) other TaskManagers open now.",
            &[("taskmanager", tm), ("direction", direction)],
            open as f64,
        );
    }
    e.gauge(
        "weir_taskmanager_network_buffers_in_flight",
        "Network buffers sent to other TaskManagers and not yet credited back.",
        &[("taskmanager", tm)],
        net.buffers_in_flight as f64,
    );
    e.gauge(
        "weir_taskmanager_network_credits_available",
        "Credits the outgoing channels hold: buffers they may send before they wait \
         (0 while every receiver is behind).",
        &[("taskmanager", tm)],
        net.credits_available as f64,
    );
    e.counter(
        "weir_taskmanager_network_credit_wait_seconds_total",
        "Time outgoing channels spent waiting for a credit (backpressure from the \
         receiving TaskManagers), summed over channels.",
        &[("taskmanager", tm)],
        net.credit_wait_ns as f64 / 1e9,
    );
    if let Some(memory) = weir_runtime::telemetry::memory::ProcessMemory::current() {
        e.gauge(
            "weir_taskmanager_memory_rss_bytes",
            "The TaskManager process's resident set size.",
            &[("taskmanager", tm)],
            memory.rss_bytes as f64,
        );
        e.gauge(
            "weir_taskmanager_memory_peak_rss_bytes",
            "The TaskManager process's largest resident set size so far.",
            &[("taskmanager", tm)],
            memory.peak_rss_bytes as f64,
        );
    }
    let jobs = inner.jobs.lock().unwrap_or_else(|p| p.into_inner());
    for job in jobs.values() {
        job_metrics(&mut e, job);
    }
    drop(jobs);
    e.render()
}

fn job_metrics(e: &mut Exposition, job: &LocalJob) {
    let (id, name) = (job.job.as_str(), job.name.as_str());
    for (v, vertex) in job.metrics.vertices.iter().enumerate().take(job.vertices) {
        let Some(uid) = job.vertex_ids.get(v) else {
            continue;
        };
        let head = job.heads.iter().any(|(h, _)| *h == v);
        for (subtask, m) in vertex.subtask_list() {
            let index = subtask.to_string();
            let labels = [
                ("job_id", id),
                ("job_name", name),
                ("vertex", uid.as_str()),
                ("subtask", index.as_str()),
            ];
            if job.metrics.detailed {
                subtask_samples(e, &labels, &m, head);
            }
            if let Some(w) = vertex
                .subtask_watermark(subtask)
                .filter(|w| *w != i64::MIN && *w != i64::MAX)
            {
                e.gauge(
                    "weir_watermark_seconds",
                    "The subtask's current event-time watermark, Unix seconds.",
                    &labels,
                    w as f64 / 1000.0,
                );
                e.gauge(
                    "weir_watermark_lag_seconds",
                    "How far the subtask's watermark is behind the wall clock.",
                    &labels,
                    (weir_runtime::connectors::now_millis() - w) as f64 / 1000.0,
                );
            }
            if let Some((backend, bytes)) = vertex.subtask_state(subtask) {
                let backend = backend.to_string();
                let mut labels = labels.to_vec();
                labels.push(("backend", backend.as_str()));
                e.gauge(
                    "weir_state_size_bytes",
                    "About how many bytes the subtask's keyed state takes in its backend \
                     (RocksDB: live SST files, memtables and unflushed writes; heap: keys \
                     and values), sampled about once a second.",
                    &labels,
                    bytes as f64,
                );
            }
            let guest = m.telemetry.metrics();
            let operator = [
                ("job_id", id),
                ("job_name", name),
                ("operator", uid.as_str()),
                ("subtask", index.as_str()),
            ];
            let dropped = m.telemetry.logs_dropped();
            if dropped > 0 {
                e.counter(
                    "weir_operator_log_lines_dropped_total",
                    "Log lines of the operator's guest dropped here (over the rate limit \
                     or the call's log budget, or pushed out of the ring before they were \
                     sent to the JobManager).",
                    &operator,
                    dropped as f64,
                );
            }
            for (metric, value) in &guest.counters {
                e.counter(
                    "weir_operator_metric_total",
                    "A counter the operator's guest adds to (metrics.counter-add); \
                     `name` is the guest's name for it.",
                    &[
                        ("job_id", id),
                        ("job_name", name),
                        ("operator", uid.as_str()),
                        ("subtask", index.as_str()),
                        ("name", metric.as_str()),
                    ],
                    *value as f64,
                );
            }
            for (metric, value) in &guest.gauges {
                e.gauge(
                    "weir_operator_metric_value",
                    "A gauge the operator's guest sets (metrics.gauge-set); `name` is the \
                     guest's name for it.",
                    &[
                        ("job_id", id),
                        ("job_name", name),
                        ("operator", uid.as_str()),
                        ("subtask", index.as_str()),
                        ("name", metric.as_str()),
                    ],
                    *value,
                );
            }
        }
    }
}

/// The built-in samples of one subtask (`job.metrics`, on by default):
/// records and bytes, the busy, idle and backpressured time of a task's
/// head, its input queue's fill, its Wasm instance's calls, call time and
/// memory, and the latency markers' quantiles where markers arrived.
fn subtask_samples(
    e: &mut Exposition,
    labels: &[(&'static str, &str); 4],
    m: &SubtaskMetrics,
    head: bool,
) {
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed) as f64;
    for (family, help, value) in [
        (
            "weir_records_in_total",
            "Records the subtask received.",
            load(&m.records_in),
        ),
        (
            "weir_records_out_total",
            "Records the subtask emitted, on every output.",
            load(&m.records_out),
        ),
        (
            "weir_bytes_in_total",
            "Bytes of the records the subtask received.",
            load(&m.bytes_in),
        ),
        (
            "weir_bytes_out_total",
            "Bytes of the records the subtask emitted.",
            load(&m.bytes_out),
        ),
    ] {
        e.counter(family, help, labels, value);
    }
    if head {
        let idle = load(&m.idle_ns) / 1e9;
        let backpressured = load(&m.backpressured_ns) / 1e9;
        let busy = (m.started.elapsed().as_secs_f64() - idle - backpressured).max(0.0);
        for (family, help, value) in [
            (
                "weir_busy_seconds_total",
                "Time the subtask's task spent working (head vertices only).",
                busy,
            ),
            (
                "weir_idle_seconds_total",
                "Time the subtask's task spent waiting for input (head vertices only).",
                idle,
            ),
            (
                "weir_backpressured_seconds_total",
                "Time the subtask's task spent waiting for room in a full output \
                 channel (head vertices only).",
                backpressured,
            ),
        ] {
            e.counter(family, help, labels, value);
        }
    }
    let capacity = m.input_capacity.load(Ordering::Relaxed);
    if head && capacity > 0 {
        let queued = m.input_queued.load(Ordering::Relaxed) as f64;
        e.gauge(
            "weir_input_queue_batches",
            "Messages (mostly batches) waiting in the subtask's input queue (head vertices \
             with an input only).",
            labels,
            queued,
        );
        e.gauge(
            "weir_input_queue_fill_ratio",
            "The subtask's input queue's fill, 0 to 1 (Flink's inPoolUsage): near 1 when \
             it cannot keep up.",
            labels,
            queued / capacity as f64,
        );
    }
    let calls = m.telemetry.calls();
    if calls.calls > 0 {
        e.counter(
            "weir_wasm_calls_total",
            "Calls into the subtask's Wasm operator instance (one per batch, timer, watermark).",
            labels,
            calls.calls as f64,
        );
        e.counter(
            "weir_wasm_call_seconds_total",
            "Time spent in those calls, host functions (state access) included.",
            labels,
            calls.call_ns as f64 / 1e9,
        );
        e.gauge(
            "weir_wasm_memory_bytes",
            "Linear memory and tables the subtask's Wasm instance holds (against \
             job.limits.memory_mb).",
            labels,
            calls.memory_bytes as f64,
        );
    }
    if let Some(l) = LatencyQuantiles::of(&m.latency_samples()) {
        for (quantile, ms) in [("0.5", l.p50), ("0.95", l.p95), ("0.99", l.p99)] {
            let mut labels = labels.to_vec();
            labels.push(("quantile", quantile));
            e.gauge(
                "weir_latency_seconds",
                "Source-to-subtask latency of its latest latency markers \
                 (job.latency_tracking_interval_ms), by quantile.",
                &labels,
                f64::from(ms) / 1000.0,
            );
        }
    }
}
