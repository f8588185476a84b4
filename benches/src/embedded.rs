//! One job spec run to its end on an embedded cluster (what `weir run`
//! does), for the harnesses that time whole jobs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::bail;
use weir_host::connectors::AllowedRoots;
use weir_host::embedded::{EmbeddedCluster, EmbeddedConfig};
use weir_host::job::JobGraph;
use weir_host::jobmanager::{JobDetail, JobState};
use weir_host::wasm::{Runtime, RuntimeConfig};

/// Runs the job spec `spec` (TOML; its files may lie anywhere under the
/// temporary directory) on a fresh embedded cluster and waits for it to
/// finish. Returns the job's detail and its wall time, submission to end,
/// as the JobManager recorded them. A job that does not finish is an error.
pub fn run_spec(spec: &str) -> anyhow::Result<(JobDetail, Duration)> {
    run_spec_scraped(spec, None).map(|(detail, elapsed, _)| (detail, elapsed))
}

/// [`run_spec`], with the TaskManager's `/metrics` served and scraped
/// every `scrape_every` (if given) while the job runs, as a Prometheus
/// server would; also returns how many scrapes succeeded.
pub fn run_spec_scraped(
    spec: &str,
    scrape_every: Option<Duration>,
) -> anyhow::Result<(JobDetail, Duration, u64)> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("job.toml");
    std::fs::write(&path, spec)?;
    let graph = JobGraph::from_file(&path, &[])?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let runtime = Arc::new(Runtime::new(RuntimeConfig { cache_dir: None })?);
    let detail = rt.block_on(async {
        let mut cluster = EmbeddedCluster::start(
            EmbeddedConfig {
                work_dir: dir.path().join("work"),
                checkpoint_dir: dir.path().join("checkpoints"),
                allowed_roots: AllowedRoots::new([std::env::temp_dir()])?,
                buffer_size: 1024,
                slots: None,
                metrics: scrape_every.map(|_| ([127, 0, 0, 1], 0).into()),
            },
            runtime,
        )?;
        let job = cluster
            .submit(graph, None)
            .await
            .map_err(|e| anyhow::anyhow!("{}", e.message))?;
        let scraper = match (scrape_every, cluster.metrics_address()) {
            (Some(every), Some(address)) => Some(Scraper::start(address, every)),
            _ => None,
        };
        let detail = cluster
            .wait(&job)
            .await
            .map_err(|e| anyhow::anyhow!("{}", e.message))?;
        let scrapes = scraper.map_or(0, Scraper::stop);
        cluster.shutdown();
        anyhow::Ok((detail, scrapes))
    })?;
    let (detail, scrapes) = detail;
    if detail.summary.state != JobState::Finished {
        bail!(
            "the job ended {:?}: {}",
            detail.summary.state,
            detail.summary.failure.clone().unwrap_or_default()
        );
    }
    let s = &detail.summary;
    let elapsed =
        Duration::from_millis(s.ended_at_ms.unwrap_or(s.submitted_at_ms) - s.submitted_at_ms);
    Ok((detail, elapsed, scrapes))
}

/// A thread that GETs `/metrics` every so often, as Prometheus does.
struct Scraper {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl Scraper {
    fn start(address: SocketAddr, every: Duration) -> Scraper {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let url = format!("http://{address}/metrics");
                let mut scrapes = 0;
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(every);
                    let body = ureq::get(&url)
                        .call()
                        .ok()
                        .and_then(|mut r| r.body_mut().read_to_string().ok());
                    if body.is_some_and(|b| b.contains("weir_records_out_total")) {
                        scrapes += 1;
                    }
                }
                scrapes
            })
        };
        Scraper { stop, thread }
    }

    /// Stops it; the number of scrapes that found the job's samples.
    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or(0)
    }
}
