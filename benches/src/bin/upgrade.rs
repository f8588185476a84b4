//! `upgrade`: how long a job is down when it is upgraded in place
//! (`weir upgrade`), with a given amount of RocksDB state, at the same
//! parallelism and when rescaling.
//!
//! ```text
//! cargo run --release -p weir-benches --bin upgrade -- [--state-mb 100] [--runs 10] \
//!     [--dir /var/tmp]
//! ```
//!
//! Runs, on an embedded cluster (the JobManager and a TaskManager in this
//! process, the same code as the daemons), an unbounded word count whose
//! keyed counter (parallelism 2, RocksDB) counts words of a vocabulary
//! sized so that its state grows to about `--state-mb`, with checkpoints.
//! Once a completed checkpoint holds that much state, it upgrades the job
//! `--runs` times at the same parallelism (a config change: savepoint,
//! stop, restore, resume, no migration), then `--runs` times rescaling
//! 2→4 and back 4→2 alternately, and prints per case the downtime (from
//! the savepoint's barrier to every new subtask running, as `weir upgrade`
//! reports it) p50 / p99 / max, the whole upgrade's duration, and the
//! savepoint's size and write throughput. The job runs unthrottled
//! throughout: the machine is as busy as a production job would make it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use weir_host::connectors::AllowedRoots;
use weir_host::embedded::{EmbeddedCluster, EmbeddedConfig};
use weir_host::jobmanager::{UpgradeRequest, UpgradeStatus, UpgradeView};
use weir_host::wasm::{Runtime, RuntimeConfig};
use weir_tests::artifacts;

#[derive(Parser)]
#[command(
    about = "Downtime of an in-place upgrade with RocksDB state, same parallelism and rescaled"
)]
struct Cli {
    /// State to build before upgrading, MB (the latest checkpoint's full size).
    #[arg(long, default_value_t = 100)]
    state_mb: u64,
    /// Upgrades per case.
    #[arg(long, default_value_t = 10)]
    runs: usize,
    /// Where the temp dirs go.
    #[arg(long, default_value = "/var/tmp")]
    dir: PathBuf,
}

/// Bytes one key of the counter takes in a checkpoint at least (its stored
/// key `w<n>` with the key-group prefix and a u64 count, compressed by
/// RocksDB): sizes the vocabulary so that the state can reach `--state-mb`.
const BYTES_PER_KEY: u64 = 20;

fn spec(vocabulary: u64) -> String {
    format!(
        r#"
[job]
name = "upgrade-bench"
state_backend = "rocksdb"

[job.checkpoints]
interval_ms = 2000
timeout_ms = 120000

[[source]]
id = "words"
type = "generator"
kind = "words"
vocabulary = {vocabulary}
seed = 7

[[operator]]
id = "count"
module = "word-count@1"
key_by = "value"
parallelism = 2
config = {{ emit = "updates", run = "0" }}

[[sink]]
id = "out"
type = "blackhole"

[[edge]]
from = "words"
to = "count"

[[edge]]
from = "count"
to = "out"
"#
    )
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let tmp = tempfile::Builder::new()
        .prefix("weir-upgrade-bench-")
        .tempdir_in(&cli.dir)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let runtime = Arc::new(Runtime::new(RuntimeConfig {
        cache_dir: Some(tmp.path().join("cache")),
    })?);
    rt.block_on(async {
        let mut cluster = EmbeddedCluster::start(
            EmbeddedConfig {
                work_dir: tmp.path().join("work"),
                checkpoint_dir: tmp.path().join("checkpoints"),
                allowed_roots: AllowedRoots::new([tmp.path().to_path_buf()])?,
                buffer_size: 1024,
                slots: Some(8),
                metrics: None,
            },
            runtime,
        )?;
        let jm = cluster.jobmanager().clone();
        let bytes = std::fs::read(artifacts::WORD_COUNT).context(artifacts::WORD_COUNT)?;
        jm.upload_module("word-count".into(), Some("1".into()), bytes)
            .await
            .map_err(|e| anyhow::anyhow!("{}", e.message))?;
        let vocabulary = cli.state_mb * 1_000_000 / BYTES_PER_KEY;
        let job = cluster
            .submit_spec(spec(vocabulary))
            .await
            .map_err(|e| anyhow::anyhow!("{}", e.message))?;
        let id = job.id.clone();

        println!(
            "upgrade downtime: unbounded word count, keyed counter on RocksDB, vocabulary {vocabulary} \
             (~{} MB of state), checkpoints every 2 s, embedded cluster, {} cores",
            cli.state_mb,
            std::thread::available_parallelism().map_or(1, |n| n.get())
        );
        let started = Instant::now();
        let state = loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let view = jm
                .checkpoints(&id)
                .map_err(|e| anyhow::anyhow!("{}", e.message))?;
            let full = view
                .history
                .iter()
                .filter(|c| c.full_size > 0)
                .map(|c| c.full_size)
                .max()
                .unwrap_or(0);
            if full >= cli.state_mb * 1_000_000 {
                break full;
            }
            if started.elapsed() > Duration::from_secs(900) {
                bail!("the state reached only {full} bytes in 15 minutes");
            }
        };
        println!(
            "state built: latest checkpoint {:.1} MB after {:.1} s",
            state as f64 / 1e6,
            started.elapsed().as_secs_f64()
        );

        let mut runs = 0u32;
        let mut upgrade = |set: Vec<String>| {
            runs += 1;
            let run = runs;
            let jm = jm.clone();
            let id = id.clone();
            async move {
                let mut set = set;
                set.push(format!("operator.count.config.run={run}"));
                let request = UpgradeRequest {
                    set,
                    ..UpgradeRequest::default()
                };
                let begun = Instant::now();
                let view = jm
                    .upgrade(&id, request)
                    .await
                    .map_err(|e| anyhow::anyhow!("{}", e.message))?;
                let done = jm
                    .wait_upgrade(&id, view.id)
                    .await
                    .map_err(|e| anyhow::anyhow!("{}", e.message))?;
                if done.status != UpgradeStatus::Completed {
                    bail!("upgrade {} {:?}: {:?}", done.id, done.status, done.failure);
                }
                let savepoint = jm
                    .savepoints(&id)
                    .map_err(|e| anyhow::anyhow!("{}", e.message))?
                    .into_iter()
                    .next()
                    .context("the upgrade's savepoint")?;
                let write_s = savepoint
                    .ended_at_ms
                    .unwrap_or(savepoint.requested_at_ms)
                    .saturating_sub(savepoint.requested_at_ms) as f64
                    / 1e3;
                // The upgrade's savepoint is the JobManager's: keep the disk.
                let _ = std::fs::remove_dir_all(&done.savepoint);
                Ok::<_, anyhow::Error>(Sample {
                    view: done,
                    total: begun.elapsed(),
                    savepoint_bytes: savepoint.bytes,
                    write_s,
                })
            }
        };

        let mut same = Vec::new();
        for _ in 0..cli.runs {
            same.push(upgrade(Vec::new()).await?);
        }
        report("same parallelism (2)", &same);
        let mut rescaled = Vec::new();
        for i in 0..cli.runs {
            let to = if i % 2 == 0 { 4 } else { 2 };
            rescaled.push(upgrade(vec![format!("operator.count.parallelism={to}")]).await?);
        }
        report("rescaling 2→4 and 4→2", &rescaled);
        cluster.shutdown();
        Ok(())
    })
}

/// One upgrade as measured.
struct Sample {
    view: UpgradeView,
    total: Duration,
    savepoint_bytes: u64,
    write_s: f64,
}

fn report(case: &str, samples: &[Sample]) {
    let mut down: Vec<u64> = samples.iter().filter_map(|s| s.view.downtime_ms).collect();
    down.sort_unstable();
    let pct = |p: f64| down[((down.len() as f64 - 1.0) * p).round() as usize];
    let mut total: Vec<f64> = samples.iter().map(|s| s.total.as_secs_f64()).collect();
    total.sort_by(f64::total_cmp);
    // The downtime's parts: barrier → savepoint written → deployment sent
    // → every subtask running.
    let part = |from: fn(&UpgradeView) -> Option<u64>, to: fn(&UpgradeView) -> Option<u64>| {
        let mut ms: Vec<u64> = samples
            .iter()
            .filter_map(|s| Some(to(&s.view)?.saturating_sub(from(&s.view)?)))
            .collect();
        ms.sort_unstable();
        ms.get(ms.len() / 2).copied().unwrap_or(0)
    };
    let written = part(|v| v.stopped_at_ms, |v| v.written_at_ms);
    let deployed = part(|v| v.written_at_ms, |v| v.deployed_at_ms);
    let running = part(|v| v.deployed_at_ms, |v| v.resumed_at_ms);
    let mb: f64 = samples
        .iter()
        .map(|s| s.savepoint_bytes as f64)
        .sum::<f64>()
        / samples.len() as f64
        / 1e6;
    let secs: f64 = samples.iter().map(|s| s.write_s).sum::<f64>() / samples.len() as f64;
    println!(
        "{case}: {} upgrades; downtime p50 {} ms, p99 {} ms, max {} ms; whole upgrade p50 {:.2} s; \
         savepoint {mb:.1} MB, taken and written in {secs:.2} s ({:.0} MB/s)",
        samples.len(),
        pct(0.5),
        pct(0.99),
        down.last().copied().unwrap_or(0),
        total[total.len() / 2],
        mb / secs.max(1e-9)
    );
    println!(
        "  downtime p50 by part: barrier → savepoint written {written} ms, → deployment sent \
         {deployed} ms, → every subtask running {running} ms"
    );
    // Each upgrade's parts, to see what a slow one spent its time on.
    let parts: Vec<String> = samples
        .iter()
        .map(|s| {
            let v = &s.view;
            let d =
                |a: Option<u64>, b: Option<u64>| b.zip(a).map_or(0, |(b, a)| b.saturating_sub(a));
            format!(
                "{}={}+{}+{}",
                v.downtime_ms.unwrap_or(0),
                d(v.stopped_at_ms, v.written_at_ms),
                d(v.written_at_ms, v.deployed_at_ms),
                d(v.deployed_at_ms, v.resumed_at_ms)
            )
        })
        .collect();
    println!(
        "  each (ms = savepoint + restart + restore): {}",
        parts.join(" ")
    );
}
