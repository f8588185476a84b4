//! `memory-cap`: the resident memory of an embedded cluster (what
//! `weir run` starts: JobManager and TaskManager in one process) running an
//! adversarial operator that declares many linear memories (multi-memory),
//! beside a well-behaved operator in the same run (issue 10).
//!
//! ```text
//! cargo run --release -p weir-benches --bin memory-cap [-- --records 100000 --parallelism 1]
//! ```
//!
//! The adversarial component is the `identity` operator with one more core
//! module instantiated inside it: `--memories`-many memories of
//! `--memory-mib` MiB each, and a start function that writes every byte of
//! every memory, so any memory the sandbox lets it create becomes resident.
//! Every case is a job generator → operator → blackhole with its own
//! `job.limits.memory_mb`, run in a child process of its own (`memory-cap
//! case ...`, which prints one `RESULT` line), so the peak resident memory
//! it reports (`VmHWM`) is that case's alone. The table shows it beside the
//! caps that apply:
//!
//! * the JobManager's `describe` of each module at submission, under the
//!   runtime's default cap (`wasm::DEFAULT_MEMORY_LIMIT`, 64 MiB);
//! * then each subtask's instance, under the job's `memory_mb`.
//!
//! The bound printed for a case is the well-behaved case's growth (the
//! fixed overhead: runtime, compilation, cluster, buffers) plus the larger
//! of the two caps' worth of memory (the describe instance is dropped
//! before the subtasks instantiate).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use serde_json::{Value, json};
use weir_benches::measure::{peak_rss_kib, reset_peak_rss, rss_kib};
use weir_host::connectors::AllowedRoots;
use weir_host::embedded::{EmbeddedCluster, EmbeddedConfig};
use weir_host::job::JobGraph;
use weir_host::jobmanager::JobState;
use weir_host::wasm::{DEFAULT_MEMORY_LIMIT, Runtime, RuntimeConfig};
use weir_tests::adversarial::with_memories;
use weir_tests::artifacts;

#[derive(Parser)]
#[command(about = "Peak RSS of a many-memories operator beside a well-behaved one")]
struct Cli {
    #[command(subcommand)]
    command: Option<Sub>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum Sub {
    /// Runs one case in this process and prints one `RESULT` line.
    #[command(hide = true)]
    Case(CaseArgs),
}

#[derive(Args, Clone)]
struct RunArgs {
    /// Records the generator makes in each job.
    #[arg(long, default_value_t = 100_000)]
    records: u64,
    /// Parallelism of each job (one instance of the operator per subtask).
    #[arg(long, default_value_t = 1)]
    parallelism: u32,
}

#[derive(Args, Clone)]
struct CaseArgs {
    /// Extra memories in the operator; 0 runs the plain `identity`.
    #[arg(long)]
    memories: u32,
    /// Size of each extra memory, in MiB.
    #[arg(long, default_value_t = 0)]
    memory_mib: u64,
    /// The job's `job.limits.memory_mb`.
    #[arg(long)]
    cap_mb: u64,
    #[arg(long)]
    records: u64,
    #[arg(long)]
    parallelism: u32,
}

/// One row of the table: the operator and the job's cap.
struct Case {
    what: &'static str,
    memories: u32,
    memory_mib: u64,
    cap_mb: u64,
}

/// The well-behaved baseline first (its growth is the fixed overhead),
/// then the adversarial shapes, and last a control in which the cap lets
/// the extra memories exist, to show that this measurement sees them.
const CASES: &[Case] = &[
    Case {
        what: "identity (well-behaved)",
        memories: 0,
        memory_mib: 0,
        cap_mb: 64,
    },
    Case {
        what: "24 × 64 MiB (the finding; over the count cap of 16)",
        memories: 24,
        memory_mib: 64,
        cap_mb: 128,
    },
    Case {
        what: "15 × 64 MiB (within the count, over the byte budget)",
        memories: 15,
        memory_mib: 64,
        cap_mb: 128,
    },
    Case {
        what: "15 × 4 MiB (passes describe's 64 MiB, over the job's cap)",
        memories: 15,
        memory_mib: 4,
        cap_mb: 32,
    },
    Case {
        what: "control: 15 × 4 MiB under a cap that allows them",
        memories: 15,
        memory_mib: 4,
        cap_mb: 128,
    },
];

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Some(Sub::Case(args)) => {
            let result = run_case(&args)?;
            println!("RESULT {result}");
            Ok(())
        }
        None => run_all(&cli.run),
    }
}

/// Runs every case in a child process and prints the table.
fn run_all(args: &RunArgs) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("own executable")?;
    let mut rows = Vec::new();
    for case in CASES {
        let out = Command::new(&exe)
            .arg("case")
            .args(["--memories", &case.memories.to_string()])
            .args(["--memory-mib", &case.memory_mib.to_string()])
            .args(["--cap-mb", &case.cap_mb.to_string()])
            .args(["--records", &args.records.to_string()])
            .args(["--parallelism", &args.parallelism.to_string()])
            .stderr(std::process::Stdio::inherit())
            .output()
            .with_context(|| format!("run case {}", case.what))?;
        if !out.status.success() {
            bail!("case {} failed: {}", case.what, out.status);
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix("RESULT "))
            .with_context(|| format!("case {} printed no RESULT line", case.what))?;
        let result: Value = serde_json::from_str(line)?;
        rows.push((case, result));
    }

    let kib = |v: &Value, key: &str| v[key].as_u64().unwrap_or(0);
    let mib = |k: u64| format!("{:.0} MiB", k as f64 / 1024.0);
    let overhead = kib(&rows[0].1, "peak_kib").saturating_sub(kib(&rows[0].1, "before_kib"));
    let describe_cap = DEFAULT_MEMORY_LIMIT as u64 >> 10;
    println!(
        "\nembedded cluster, generator ({} records) → operator → blackhole, parallelism {}",
        args.records, args.parallelism
    );
    println!(
        "overhead = the well-behaved case's growth ({}); describe runs under {}\n",
        mib(overhead),
        mib(describe_cap)
    );
    println!(
        "| operator | extra memories | job memory_mb | outcome | RSS before | peak RSS | growth | \
         bound: overhead + max(describe cap, p × memory_mb) | within |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (case, r) in &rows {
        let growth = kib(r, "peak_kib").saturating_sub(kib(r, "before_kib"));
        let job_caps = u64::from(args.parallelism) * (case.cap_mb << 10);
        let bound = overhead + describe_cap.max(job_caps);
        let extra = if case.memories == 0 {
            "none".to_string()
        } else {
            let total = u64::from(case.memories) * case.memory_mib;
            format!("{} × {} MiB = {total} MiB", case.memories, case.memory_mib)
        };
        let mut outcome = r["outcome"].as_str().unwrap_or("?").to_owned();
        if outcome == "finished" {
            outcome = format!("finished, {} records", r["records"]);
        }
        let message = r["message"].as_str().unwrap_or("");
        let mut shown: String = message.chars().take(160).collect();
        if shown.len() < message.len() {
            shown.push('…');
        }
        println!(
            "| {} | {extra} | {} | {outcome}{} | {} | {} | {} | {} | {} |",
            case.what,
            case.cap_mb,
            if shown.is_empty() {
                String::new()
            } else {
                format!(": {shown}")
            },
            mib(kib(r, "before_kib")),
            mib(kib(r, "peak_kib")),
            mib(growth),
            mib(bound),
            if growth <= bound { "yes" } else { "NO" },
        );
    }
    Ok(())
}

// ---- one case ------------------------------------------------------------------

fn run_case(args: &CaseArgs) -> anyhow::Result<Value> {
    let dir = tempfile::tempdir()?;
    let identity = std::fs::read(artifacts::IDENTITY)
        .with_context(|| format!("read {}", artifacts::IDENTITY))?;
    let operator = if args.memories == 0 {
        identity
    } else {
        with_memories(&identity, args.memories, args.memory_mib).map_err(anyhow::Error::msg)?
    };
    let module = dir.path().join("operator.wasm");
    std::fs::write(&module, &operator)?;
    let spec = format!(
        r#"
[job]
name = "memory-cap"
parallelism = {parallelism}

[job.limits]
memory_mb = {cap}

[job.restart]
strategy = "none"

[[source]]
id = "gen"
type = "generator"
kind = "sequence"
count = {records}

[[operator]]
id = "op"
module = {module}

[[sink]]
id = "out"
type = "blackhole"

[[edge]]
from = "gen"
to = "op"

[[edge]]
from = "op"
to = "out"
"#,
        parallelism = args.parallelism,
        cap = args.cap_mb,
        records = args.records,
        module = serde_json::to_string(&module.display().to_string())?,
    );
    let path = dir.path().join("job.toml");
    std::fs::write(&path, spec)?;
    let graph = JobGraph::from_file(&path, &[])?;
    run_job(dir.path(), graph)
}

/// Runs `graph` on an embedded cluster in `dir`; the outcome with the
/// process's resident memory just before submitting and its peak.
fn run_job(dir: &Path, graph: JobGraph) -> anyhow::Result<Value> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let runtime = Arc::new(Runtime::new(RuntimeConfig { cache_dir: None })?);
    rt.block_on(async {
        let mut cluster = EmbeddedCluster::start(
            EmbeddedConfig {
                work_dir: dir.join("work"),
                checkpoint_dir: dir.join("checkpoints"),
                allowed_roots: AllowedRoots::new([dir.to_path_buf()])?,
                buffer_size: 1024,
                slots: None,
                metrics: None,
            },
            runtime,
        )?;
        // The peak from here on: submission (the JobManager's checks and
        // `describe`), deployment, the run.
        if !reset_peak_rss() {
            bail!("cannot reset the peak RSS (/proc/self/clear_refs)");
        }
        let before = rss_kib().unwrap_or(0);
        let (outcome, message, records) = match cluster.submit(graph, None).await {
            Err(e) => ("refused at submit", e.message, 0),
            Ok(job) => {
                let detail = cluster
                    .wait(&job)
                    .await
                    .map_err(|e| anyhow::anyhow!("{}", e.message))?;
                let records = detail
                    .vertices
                    .iter()
                    .find(|v| v.id == "op")
                    .map_or(0, |v| v.records_out);
                let s = detail.summary;
                let outcome = match s.state {
                    JobState::Finished => "finished",
                    JobState::Failed => "task failed",
                    _ => "ended otherwise",
                };
                (outcome, s.failure.unwrap_or_default(), records)
            }
        };
        cluster.shutdown();
        anyhow::Ok(json!({
            "outcome": outcome,
            "message": message,
            "records": records,
            "before_kib": before,
            "peak_kib": peak_rss_kib(),
        }))
    })
}
