//! One job spec run to its end on an embedded cluster (what `weir run`
//! does), for the harnesses that time whole jobs.

use std::sync::Arc;
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
            },
            runtime,
        )?;
        let job = cluster
            .submit(graph, None)
            .await
            .map_err(|e| anyhow::anyhow!("{}", e.message))?;
        let detail = cluster
            .wait(&job)
            .await
            .map_err(|e| anyhow::anyhow!("{}", e.message))?;
        cluster.shutdown();
        anyhow::Ok(detail)
    })?;
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
    Ok((detail, elapsed))
}
