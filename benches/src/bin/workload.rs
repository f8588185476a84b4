//! `workload`: whole jobs on the embedded cluster, each beside a native Rust
//! baseline measured in the same run.
//!
//! ```text
//! cargo run --release -p weir-benches --bin workload -- word-count [--repeat 10] [--parallelism 1,2]
//! cargo run --release -p weir-benches --bin workload -- identity [--records 20000000] [--batch-size 256,4096]
//! cargo run --release -p weir-benches --bin workload -- windowed-count [--records 3000000] [--keys 100000]
//! cargo run --release -p weir-benches --bin workload -- metrics [--repeat 10] [--rounds 5]
//! ```
//!
//! * `word-count`: `udfs/data/kjv.txt` repeated `--repeat` times into a
//!   temp file, run as file → `tokenize` → `word-count` (keyed, final
//!   counts) → blackhole at each `--parallelism`, beside a single-threaded
//!   native word count (`HashMap`) of the same file with the same
//!   tokenizer rules. The harness checks that both saw the same words.
//! * `identity`: a sequence generator of `--record-bytes`-byte records →
//!   `identity` → blackhole as a job at each `--parallelism`; the same
//!   chain driven by this harness through Weir's real subtask driver, with
//!   a source that stamps each batch with the wall clock and a sink that
//!   records how long the batch took to get there (per-batch latency);
//!   and native loops: generator → blackhole, and generator → copy →
//!   blackhole (the copy is what identity amounts to).
//! * `windowed-count`: `--records` JSON lines `{"k":…,"ts":…}` over `--keys`
//!   keys (spread by a hash), `--records-per-ms` per millisecond of event
//!   time, counted per key in tumbling windows of `--window-ms` through
//!   file → window → blackhole on `--backend`, four ways: the host's
//!   built-in `aggregate = "count"`, the same window with the Wasm
//!   aggregate function `count-aggregate`, the `window-count` operator (the
//!   same count written in Wasm with event-time timers and map state), and a
//!   file → blackhole job (what reading and parsing the input costs alone);
//!   beside a native loop that parses the same file and counts in a
//!   `HashMap`. Every case must fire the same number of windows.
//!
//! * `metrics`: the word-count job with metrics on (the default; the
//!   TaskManager's `/metrics` served and scraped every `--scrape-ms`) and
//!   off (`job.metrics = false`), alternating for `--rounds` rounds; prints
//!   each round's lines/s and the median ratio off ÷ on (issue 15's goal:
//!   metrics cost under 3 %).
//!
//! Every case runs in its own child process (`workload case ...`, which
//! prints one `RESULT` line), so the peak memory it reports (`VmHWM`) is
//! that case's alone. Compiling the components is not timed: a job's time
//! starts when its subtasks start.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use weir_benches::measure::{peak_rss_kib, quantile};
use weir_benches::native::{copy_batch, word_count};
use weir_host::connectors::{
    BlackholeSink, ConnectorError, GeneratorConfig, GeneratorKind, GeneratorSource, Sink, Source,
};
use weir_host::jobmanager::{JobDetail, VertexDetail};
use weir_host::record::Batch;
use weir_host::taskmanager::{
    Abort, ChainedOperator, Head, JobMetrics, Operator, Subtask, TailSink,
};
use weir_host::wasm::{InstanceConfig, Runtime, RuntimeConfig};
use weir_tests::artifacts;

/// The word-count input that ships with the examples.
const KJV: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../udfs/data/kjv.txt");

/// Seed of the sequence generator (any fixed value: runs must repeat).
const SEED: u64 = 7;

#[derive(Parser)]
#[command(about = "Weir workloads beside native baselines")]
struct Cli {
    #[command(subcommand)]
    command: Workload,
}

#[derive(Subcommand)]
enum Workload {
    /// File → tokenize → word-count → blackhole, beside a native HashMap word count.
    WordCount(WordCountArgs),
    /// Generator → identity → blackhole, beside native loops; per-batch latency.
    Identity(IdentityArgs),
    /// File → tumbling window count → blackhole: built-in vs Wasm vs native.
    WindowedCount(WindowedCountArgs),
    /// The word-count job with metrics on (scraped) and off, alternating.
    Metrics(MetricsArgs),
    /// Runs one case in this process and prints one `RESULT` line.
    #[command(hide = true)]
    Case {
        #[command(subcommand)]
        case: Case,
    },
}

#[derive(Args, Clone)]
struct WordCountArgs {
    /// How many times kjv.txt is repeated in the input.
    #[arg(long, default_value_t = 10)]
    repeat: u32,
    /// Parallelisms to run the job at.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    parallelism: Vec<u32>,
    /// State backend of the job: rocksdb or heap.
    #[arg(long, default_value = "rocksdb")]
    backend: String,
    /// Records per batch (the job's batch_size).
    #[arg(long, default_value_t = 1024)]
    batch_size: u32,
}

#[derive(Args, Clone)]
struct MetricsArgs {
    /// How many times kjv.txt is repeated in the input.
    #[arg(long, default_value_t = 10)]
    repeat: u32,
    /// Rounds of (on, off), alternating which goes first.
    #[arg(long, default_value_t = 5)]
    rounds: u32,
    /// Parallelism of the job.
    #[arg(long, default_value_t = 1)]
    parallelism: u32,
    /// State backend of the job: rocksdb or heap.
    #[arg(long, default_value = "rocksdb")]
    backend: String,
    /// With metrics on, scrape the TaskManager's /metrics this often.
    #[arg(long, default_value_t = 1000)]
    scrape_ms: u64,
}

#[derive(Args, Clone)]
struct IdentityArgs {
    /// Records the generator makes.
    #[arg(long, default_value_t = 20_000_000)]
    records: u64,
    /// Bytes of each record's value.
    #[arg(long, default_value_t = 100)]
    record_bytes: u32,
    /// Records per batch; every case runs at each.
    #[arg(long, value_delimiter = ',', default_value = "4096")]
    batch_size: Vec<u32>,
    /// Parallelisms to run the job at.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    parallelism: Vec<u32>,
}

#[derive(Args, Clone)]
struct WindowedCountArgs {
    /// Records in the input.
    #[arg(long, default_value_t = 3_000_000)]
    records: u64,
    /// Distinct keys.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Records per millisecond of event time.
    #[arg(long, default_value_t = 100)]
    records_per_ms: u64,
    /// Tumbling window length.
    #[arg(long, default_value_t = 10_000)]
    window_ms: u64,
    /// State backend of the jobs: rocksdb or heap.
    #[arg(long, default_value = "rocksdb")]
    backend: String,
}

/// The shape of a generated input.
#[derive(Args, Clone, Copy)]
struct Generated {
    #[arg(long)]
    records: u64,
    #[arg(long)]
    record_bytes: u32,
    #[arg(long)]
    batch_size: u32,
}

#[derive(Subcommand)]
enum Case {
    /// Native word count of `--input`.
    WcNative {
        #[arg(long)]
        input: PathBuf,
    },
    /// The word-count job over `--input`.
    WcJob {
        #[arg(long)]
        input: PathBuf,
        #[arg(long)]
        parallelism: u32,
        #[arg(long)]
        backend: String,
        #[arg(long)]
        batch_size: u32,
        /// `job.metrics`.
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        metrics: bool,
        /// Serve and scrape `/metrics` this often (0: not served).
        #[arg(long, default_value_t = 0)]
        scrape_ms: u64,
    },
    /// Generator → blackhole, no operator.
    IdSource(Generated),
    /// Generator → native copy → blackhole.
    IdNative(Generated),
    /// Generator → identity → latency sink, through Weir's subtask driver.
    IdChain(Generated),
    /// Native windowed count of `--input`.
    WnNative {
        #[arg(long)]
        input: PathBuf,
        #[arg(long)]
        window_ms: u64,
    },
    /// A windowed-count job over `--input`: `builtin`, `aggregate`, `wasm` or `source`.
    WnJob {
        #[arg(long)]
        input: PathBuf,
        #[arg(long)]
        window_ms: u64,
        #[arg(long)]
        mode: String,
        #[arg(long)]
        backend: String,
    },
    /// The generator → identity → blackhole job.
    IdJob {
        #[command(flatten)]
        generated: Generated,
        #[arg(long)]
        parallelism: u32,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Workload::WordCount(args) => word_count_workload(&args),
        Workload::Identity(args) => identity_workload(&args),
        Workload::WindowedCount(args) => windowed_count_workload(&args),
        Workload::Metrics(args) => metrics_workload(&args),
        Workload::Case { case } => {
            // Run the case on a thread of its own, as the cluster runs every
            // subtask: glibc's malloc treats the main thread's arena
            // differently (it gives freed memory back to the kernel sooner),
            // and with batches of hundreds of KiB that alone costs a page
            // fault per 4 KiB per batch and halves a native loop's speed.
            let result = std::thread::Builder::new()
                .name("case".into())
                .spawn(move || run_case(case))?
                .join()
                .map_err(|_| anyhow::anyhow!("the case panicked"))??;
            println!("RESULT {}", result.to_line());
            Ok(())
        }
    }
}

// ---- results ---------------------------------------------------------------

/// What one case measured. Absent fields were not measured.
#[derive(Debug, Default)]
struct CaseResult {
    secs: f64,
    records: u64,
    words: Option<u64>,
    distinct: Option<u64>,
    p50_us: Option<f64>,
    p99_us: Option<f64>,
    peak_kib: Option<u64>,
}

impl CaseResult {
    fn to_line(&self) -> String {
        let mut fields = vec![
            format!("secs={}", self.secs),
            format!("records={}", self.records),
        ];
        let opt = |name: &str, v: Option<String>| v.map(|v| format!("{name}={v}"));
        fields.extend(opt("words", self.words.map(|v| v.to_string())));
        fields.extend(opt("distinct", self.distinct.map(|v| v.to_string())));
        fields.extend(opt("p50_us", self.p50_us.map(|v| v.to_string())));
        fields.extend(opt("p99_us", self.p99_us.map(|v| v.to_string())));
        fields.extend(opt("peak_kib", self.peak_kib.map(|v| v.to_string())));
        fields.join(" ")
    }

    fn parse(line: &str) -> anyhow::Result<CaseResult> {
        let fields: HashMap<&str, &str> = line
            .split_whitespace()
            .filter_map(|f| f.split_once('='))
            .collect();
        let get = |k: &str| fields.get(k).copied();
        Ok(CaseResult {
            secs: get("secs").context("no secs")?.parse()?,
            records: get("records").context("no records")?.parse()?,
            words: get("words").map(str::parse).transpose()?,
            distinct: get("distinct").map(str::parse).transpose()?,
            p50_us: get("p50_us").map(str::parse).transpose()?,
            p99_us: get("p99_us").map(str::parse).transpose()?,
            peak_kib: get("peak_kib").map(str::parse).transpose()?,
        })
    }

    fn records_per_sec(&self) -> f64 {
        self.records as f64 / self.secs.max(1e-9)
    }
}

/// Runs `workload case <args>` as a child process and parses its result.
fn spawn_case(args: &[String]) -> anyhow::Result<CaseResult> {
    let exe = std::env::current_exe().context("own executable")?;
    let out = Command::new(exe)
        .arg("case")
        .args(args)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("run case {args:?}"))?;
    if !out.status.success() {
        bail!("case {args:?} failed: {}", out.status);
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .with_context(|| format!("case {args:?} printed no RESULT line"))?;
    CaseResult::parse(line)
}

fn millions(per_sec: f64) -> String {
    format!("{:.2} M/s", per_sec / 1e6)
}

fn mib(kib: Option<u64>) -> String {
    kib.map_or("n/a".into(), |k| format!("{:.0} MiB", k as f64 / 1024.0))
}

fn micros(us: Option<f64>) -> String {
    us.map_or("n/a".into(), |u| format!("{u:.0} µs"))
}

// ---- word count --------------------------------------------------------------

/// Writes `kjv.txt` `repeat` times into `DIR/kjv-repeated.txt`; returns
/// the file and its size in bytes.
fn kjv_repeated(dir: &Path, repeat: u32) -> anyhow::Result<(PathBuf, u64)> {
    let input = dir.join("kjv-repeated.txt");
    let text = std::fs::read(KJV).with_context(|| format!("read {KJV}"))?;
    let mut file = File::create(&input)?;
    for _ in 0..repeat {
        file.write_all(&text)?;
    }
    file.sync_all()?;
    Ok((input, text.len() as u64 * u64::from(repeat)))
}

fn word_count_workload(args: &WordCountArgs) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (input, bytes) = kjv_repeated(dir.path(), args.repeat)?;
    let input_arg = input.display().to_string();
    let size_mib = bytes as f64 / f64::from(1 << 20);

    let native = spawn_case(&["wc-native".into(), "--input".into(), input_arg.clone()])?;
    let mut rows = vec![("native HashMap (1 thread)".to_string(), native)];
    for &p in &args.parallelism {
        let job = spawn_case(&[
            "wc-job".into(),
            "--input".into(),
            input_arg.clone(),
            "--parallelism".into(),
            p.to_string(),
            "--backend".into(),
            args.backend.clone(),
            "--batch-size".into(),
            args.batch_size.to_string(),
        ])?;
        rows.push((format!("weir job, {}, p={p}", args.backend), job));
    }

    let native = &rows[0].1;
    println!(
        "\nword count: kjv.txt x{} ({size_mib:.1} MiB, {} lines, {} words, {} distinct), batch {}",
        args.repeat,
        native.records,
        native.words.unwrap_or(0),
        native.distinct.unwrap_or(0),
        args.batch_size
    );
    println!("| case | lines/s | words/s | vs native | peak RSS | same counts as native |");
    println!("|---|---|---|---|---|---|");
    let native_rate = native.records_per_sec();
    for (name, r) in &rows {
        let words_per_sec = r.words.unwrap_or(0) as f64 / r.secs.max(1e-9);
        let same =
            r.records == native.records && r.words == native.words && r.distinct == native.distinct;
        println!(
            "| {name} | {} | {} | {:.2}x | {} | {} |",
            millions(r.records_per_sec()),
            millions(words_per_sec),
            r.records_per_sec() / native_rate,
            mib(r.peak_kib),
            if same { "yes" } else { "NO" },
        );
    }
    println!(
        "latency: not measured (counts are emitted once, at the end of input).\n\
         vs native = records/s divided by the native baseline's records/s."
    );
    if rows
        .iter()
        .any(|(_, r)| r.words != native.words || r.distinct != native.distinct)
    {
        bail!("a job counted different words than the native baseline");
    }
    Ok(())
}

// ---- metrics on vs off ---------------------------------------------------------

fn metrics_workload(args: &MetricsArgs) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (input, _) = kjv_repeated(dir.path(), args.repeat)?;
    let input_arg = input.display().to_string();
    let case = |metrics: bool| {
        spawn_case(&[
            "wc-job".into(),
            "--input".into(),
            input_arg.clone(),
            "--parallelism".into(),
            args.parallelism.to_string(),
            "--backend".into(),
            args.backend.clone(),
            "--batch-size".into(),
            "1024".into(),
            "--metrics".into(),
            metrics.to_string(),
            "--scrape-ms".into(),
            if metrics {
                args.scrape_ms.to_string()
            } else {
                "0".into()
            },
        ])
    };
    println!(
        "\nword count, kjv.txt x{}, {}, p={}: metrics on (scraped every {} ms) vs off",
        args.repeat, args.backend, args.parallelism, args.scrape_ms
    );
    println!("| round | on lines/s | off lines/s | off ÷ on |");
    println!("|---|---|---|---|");
    let mut ratios = Vec::new();
    for round in 1..=args.rounds {
        // Alternate which goes first, so a drift in the machine's load
        // does not favour one side.
        let (on, off) = if round % 2 == 1 {
            let on = case(true)?;
            (on, case(false)?)
        } else {
            let off = case(false)?;
            (case(true)?, off)
        };
        if on.words != off.words || on.distinct != off.distinct {
            bail!("metrics on and off counted different words");
        }
        let ratio = off.records_per_sec() / on.records_per_sec();
        ratios.push(ratio);
        println!(
            "| {round} | {} | {} | {ratio:.3} |",
            millions(on.records_per_sec()),
            millions(off.records_per_sec()),
        );
    }
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    println!(
        "median off ÷ on: {median:.3} (metrics cost {:+.1} % of the throughput; goal: under 3 %)",
        (1.0 - 1.0 / median) * 100.0
    );
    Ok(())
}

fn wc_native(input: &Path) -> anyhow::Result<CaseResult> {
    let started = Instant::now();
    let file = File::open(input).with_context(|| format!("open {}", input.display()))?;
    let wc = word_count(BufReader::with_capacity(256 << 10, file))?;
    let secs = started.elapsed().as_secs_f64();
    Ok(CaseResult {
        secs,
        records: wc.lines,
        words: Some(wc.words),
        distinct: Some(wc.counts.len() as u64),
        peak_kib: peak_rss_kib(),
        ..CaseResult::default()
    })
}

/// A TOML basic string holding `s`.
fn toml_str(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// How the word-count job runs.
struct WcJob<'a> {
    parallelism: u32,
    backend: &'a str,
    batch_size: u32,
    metrics: bool,
    scrape_ms: u64,
}

fn wc_job(input: &Path, job: WcJob<'_>) -> anyhow::Result<CaseResult> {
    let WcJob {
        parallelism,
        backend,
        batch_size,
        metrics,
        scrape_ms,
    } = job;
    let spec = format!(
        r#"
[job]
name = "word-count-bench"
parallelism = {parallelism}
state_backend = {backend}
batch_size = {batch_size}
metrics = {metrics}

[[source]]
id = "lines"
type = "file"
path = {input}
format = "lines"

[[operator]]
id = "tokenize"
module = {tokenize}

[[operator]]
id = "count"
module = {count}
key_by = "key"
config = {{ emit = "final" }}

[[sink]]
id = "out"
type = "blackhole"

[[edge]]
from = "lines"
to = "tokenize"

[[edge]]
from = "tokenize"
to = "count"

[[edge]]
from = "count"
to = "out"
"#,
        backend = toml_str(backend),
        input = toml_str(&input.display().to_string()),
        tokenize = toml_str(artifacts::TOKENIZE),
        count = toml_str(artifacts::WORD_COUNT),
    );
    let scrape = (scrape_ms > 0).then(|| std::time::Duration::from_millis(scrape_ms));
    let (detail, elapsed, scrapes) = weir_benches::embedded::run_spec_scraped(&spec, scrape)?;
    if scrape.is_some() && metrics && scrapes == 0 {
        bail!("no scrape of /metrics found the job's samples");
    }
    let summary = JobSummary { detail, elapsed };
    let count = vertex(&summary, "count")?;
    Ok(CaseResult {
        secs: summary.elapsed.as_secs_f64(),
        records: summary.source_records(),
        words: Some(count.records_in),
        distinct: Some(count.records_out),
        peak_kib: peak_rss_kib(),
        ..CaseResult::default()
    })
}

fn vertex<'a>(summary: &'a JobSummary, id: &str) -> anyhow::Result<&'a VertexDetail> {
    summary
        .detail
        .vertices
        .iter()
        .find(|v| v.id == id)
        .with_context(|| format!("no vertex `{id}` in the summary"))
}

/// A finished job: its counters and wall time (submit to end, as the
/// JobManager saw it).
struct JobSummary {
    detail: JobDetail,
    elapsed: std::time::Duration,
}

impl JobSummary {
    fn source_records(&self) -> u64 {
        self.detail
            .vertices
            .iter()
            .filter(|v| v.role == "source")
            .map(|v| v.records_out)
            .sum()
    }
}

/// Runs the job in `spec` on an embedded cluster (what `weir run` starts)
/// and waits for it. File sources may read the temporary directory (where
/// the inputs are written).
fn run_job(spec: &str) -> anyhow::Result<JobSummary> {
    let (detail, elapsed) = weir_benches::embedded::run_spec(spec)?;
    Ok(JobSummary { detail, elapsed })
}

// ---- windowed count ----------------------------------------------------------

fn windowed_count_workload(args: &WindowedCountArgs) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let input = dir.path().join("events.jsonl");
    let mut file = std::io::BufWriter::new(File::create(&input)?);
    for n in 0..args.records {
        let key = splitmix64(n ^ SEED) % args.keys.max(1);
        let ts = 1_700_000_000_000 + (n / args.records_per_ms.max(1)) as i64;
        writeln!(file, r#"{{"k":"key-{key}","ts":{ts}}}"#)?;
    }
    file.into_inner()?.sync_all()?;
    let input_arg = input.display().to_string();
    let window = args.window_ms.to_string();

    let mut rows = vec![(
        "native HashMap (1 thread)".to_string(),
        spawn_case(&[
            "wn-native".into(),
            "--input".into(),
            input_arg.clone(),
            "--window-ms".into(),
            window.clone(),
        ])?,
    )];
    for (mode, name) in [
        ("builtin", "weir: built-in aggregate = \"count\""),
        (
            "aggregate",
            "weir: count-aggregate.wasm (Wasm aggregate function)",
        ),
        ("wasm", "weir: window-count.wasm (timers + map state)"),
        ("source", "weir: file → blackhole (no window)"),
    ] {
        let r = spawn_case(&[
            "wn-job".into(),
            "--input".into(),
            input_arg.clone(),
            "--window-ms".into(),
            window.clone(),
            "--mode".into(),
            mode.into(),
            "--backend".into(),
            args.backend.clone(),
        ])?;
        rows.push((format!("{name}, {}", args.backend), r));
    }
    let windows = rows[0].1.distinct;
    println!(
        "\nwindowed count: {} records, {} keys, {} per ms of event time, tumbling {} ms ({} windows fired), p=1",
        args.records,
        args.keys,
        args.records_per_ms,
        args.window_ms,
        windows.unwrap_or(0)
    );
    println!("| case | records/s | vs built-in | peak RSS | same windows as native |");
    println!("|---|---|---|---|---|");
    let builtin = rows[1].1.records_per_sec();
    for (name, r) in &rows {
        let same = match r.distinct {
            None => "n/a",
            Some(_) if r.distinct == windows => "yes",
            Some(_) => "NO",
        };
        println!(
            "| {name} | {} | {:.2}x | {} | {same} |",
            millions(r.records_per_sec()),
            r.records_per_sec() / builtin,
            mib(r.peak_kib),
        );
    }
    if rows[1..4].iter().any(|(_, r)| r.distinct != windows) {
        bail!("a job fired a different number of windows than the native count");
    }
    Ok(())
}

/// SplitMix64 (spreads the keys).
fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn wn_native(input: &Path, window_ms: u64) -> anyhow::Result<CaseResult> {
    use std::io::BufRead;
    let started = Instant::now();
    let file = File::open(input).with_context(|| format!("open {}", input.display()))?;
    let size = window_ms as i64;
    let mut open: HashMap<(String, i64), u64> = HashMap::new();
    let (mut records, mut fired, mut current) = (0u64, 0u64, i64::MIN);
    for line in BufReader::with_capacity(256 << 10, file).lines() {
        let e: serde_json::Value = serde_json::from_str(&line?)?;
        let (Some(k), Some(ts)) = (e["k"].as_str(), e["ts"].as_i64()) else {
            bail!("not an event: {e}");
        };
        records += 1;
        let start = ts - ts.rem_euclid(size);
        if start > current {
            // The input is in order: every open window before this one is done.
            fired += open.len() as u64;
            open.clear();
            current = start;
        }
        *open.entry((k.to_owned(), start)).or_insert(0) += 1;
    }
    fired += open.len() as u64;
    Ok(CaseResult {
        secs: started.elapsed().as_secs_f64(),
        records,
        distinct: Some(fired),
        peak_kib: peak_rss_kib(),
        ..CaseResult::default()
    })
}

fn wn_job(input: &Path, window_ms: u64, mode: &str, backend: &str) -> anyhow::Result<CaseResult> {
    let operator = match mode {
        "builtin" => format!(
            "window = {{ type = \"tumbling\", size_ms = {window_ms} }}\naggregate = \"count\"\nkey_by = \"key\""
        ),
        "aggregate" => format!(
            "window = {{ type = \"tumbling\", size_ms = {window_ms} }}\nmodule = {}\nkey_by = \"key\"",
            toml_str(artifacts::COUNT_AGGREGATE)
        ),
        "wasm" => format!(
            "module = {}\nconfig = {{ size_ms = {window_ms} }}\nkey_by = \"key\"",
            toml_str(artifacts::WINDOW_COUNT)
        ),
        "source" => String::new(),
        other => bail!("unknown mode {other}"),
    };
    let chain = if mode == "source" {
        "[[edge]]\nfrom = \"events\"\nto = \"out\"\n".to_owned()
    } else {
        format!(
            "[[operator]]\nid = \"count\"\n{operator}\n\n[[edge]]\nfrom = \"events\"\nto = \"count\"\n\n\
             [[edge]]\nfrom = \"count\"\nto = \"out\"\n"
        )
    };
    let spec = format!(
        r#"
[job]
name = "windowed-count-bench"
state_backend = {backend}

[[source]]
id = "events"
type = "file"
path = {input}
format = "json-lines"
key_field = "k"
timestamp_field = "ts"

[[sink]]
id = "out"
type = "blackhole"

{chain}"#,
        backend = toml_str(backend),
        input = toml_str(&input.display().to_string()),
    );
    let summary = run_job(&spec)?;
    let distinct = match mode {
        "source" => None,
        _ => Some(vertex(&summary, "count")?.records_out),
    };
    Ok(CaseResult {
        secs: summary.elapsed.as_secs_f64(),
        records: summary.source_records(),
        distinct,
        peak_kib: peak_rss_kib(),
        ..CaseResult::default()
    })
}

// ---- identity ----------------------------------------------------------------

fn identity_workload(args: &IdentityArgs) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    for &batch in &args.batch_size {
        let generated = [
            "--records".to_string(),
            args.records.to_string(),
            "--record-bytes".into(),
            args.record_bytes.to_string(),
            "--batch-size".into(),
            batch.to_string(),
        ];
        let case = |name: &str, extra: &[String]| {
            let mut a = vec![name.to_string()];
            a.extend(generated.iter().cloned());
            a.extend(extra.iter().cloned());
            spawn_case(&a)
        };
        rows.push((
            "native: generator → blackhole".to_string(),
            batch,
            case("id-source", &[])?,
        ));
        rows.push((
            "native: generator → copy → blackhole".to_string(),
            batch,
            case("id-native", &[])?,
        ));
        rows.push((
            "weir chain, driven: generator → identity.wasm → sink".to_string(),
            batch,
            case("id-chain", &[])?,
        ));
        for &p in &args.parallelism {
            rows.push((
                format!("weir job: generator → identity.wasm → blackhole, p={p}"),
                batch,
                case("id-job", &["--parallelism".into(), p.to_string()])?,
            ));
        }
    }

    println!(
        "\nidentity: {} records of {} bytes (no key)",
        args.records, args.record_bytes
    );
    println!("| case | batch | records/s | vs native copy | batch latency p50 | p99 | peak RSS |");
    println!("|---|---|---|---|---|---|---|");
    for (name, batch, r) in &rows {
        let native = rows
            .iter()
            .find(|(n, b, _)| b == batch && n.contains("copy"))
            .map(|(_, _, r)| r.records_per_sec())
            .unwrap_or(f64::NAN);
        println!(
            "| {name} | {batch} | {} | {:.2}x | {} | {} | {} |",
            millions(r.records_per_sec()),
            r.records_per_sec() / native,
            micros(r.p50_us),
            micros(r.p99_us),
            mib(r.peak_kib),
        );
    }
    println!(
        "batch latency (driven chain only): wall time from a batch leaving the source to the \
         sink receiving it, through the real subtask driver (identity process + output check + \
         routing); no channel hop, as in the job where the whole chain is one task. The job rows \
         have no latency: the generator's timestamps are event time, not wall time."
    );
    Ok(())
}

fn generator(g: Generated) -> GeneratorSource {
    GeneratorSource::new(
        GeneratorConfig {
            kind: GeneratorKind::Sequence {
                record_bytes: Some(g.record_bytes as usize),
                keys: None,
            },
            count: Some(g.records),
            seed: SEED,
            rate: None,
            interval_ms: 1,
        },
        0,
        1,
    )
}

/// Drives `source` to its end, passing each batch through `op` into a
/// blackhole; returns the records seen.
fn native_loop(g: Generated, mut op: impl FnMut(Batch) -> Batch) -> anyhow::Result<CaseResult> {
    let mut source = generator(g);
    let mut sink = BlackholeSink::new(None);
    let mut records = 0;
    let started = Instant::now();
    while let Some(batch) = source.next_batch(g.batch_size as usize)? {
        let out = op(batch);
        records += out.len() as u64;
        sink.write(&out)?;
    }
    sink.finish()?;
    Ok(CaseResult {
        secs: started.elapsed().as_secs_f64(),
        records,
        peak_kib: peak_rss_kib(),
        ..CaseResult::default()
    })
}

/// A source that stamps every record of a batch with the wall-clock time
/// (ns since `start`) at which the batch leaves it.
struct StampedSource {
    inner: GeneratorSource,
    start: Instant,
}

impl Source for StampedSource {
    fn next_batch(&mut self, max: usize) -> Result<Option<Batch>, ConnectorError> {
        let Some(mut batch) = self.inner.next_batch(max)? else {
            return Ok(None);
        };
        let now = self.start.elapsed().as_nanos() as i64;
        batch.timestamps.fill(now);
        Ok(Some(batch))
    }
}

/// A sink that records, per batch, how long ago its first record left the
/// [`StampedSource`].
struct LatencySink {
    start: Instant,
    samples_ns: Arc<Mutex<Vec<u64>>>,
    records: Arc<Mutex<u64>>,
}

impl Sink for LatencySink {
    fn write(&mut self, batch: &Batch) -> Result<(), ConnectorError> {
        let now = self.start.elapsed().as_nanos() as i64;
        if let Some(&first) = batch.timestamps.first() {
            let mut samples = self.samples_ns.lock().unwrap_or_else(|e| e.into_inner());
            samples.push(now.saturating_sub(first).max(0) as u64);
        }
        *self.records.lock().unwrap_or_else(|e| e.into_inner()) += batch.len() as u64;
        Ok(())
    }

    fn finish(&mut self) -> Result<(), ConnectorError> {
        Ok(())
    }
}

fn id_chain(g: Generated) -> anyhow::Result<CaseResult> {
    let runtime = Runtime::new(RuntimeConfig { cache_dir: None })?;
    let module = runtime.load(Path::new(artifacts::IDENTITY))?;
    let instance = runtime.instantiate(&module, InstanceConfig::new("identity"))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let start = Instant::now();
    let samples_ns = Arc::new(Mutex::new(Vec::new()));
    let records = Arc::new(Mutex::new(0));
    let subtask = Subtask {
        name: "generator+identity+sink (1/1)".into(),
        head_vertex: 0,
        head: Head::Source {
            vertex: 0,
            id: "generator".into(),
            source: Box::new(StampedSource {
                inner: generator(g),
                start,
            }),
            watermarks: Default::default(),
        },
        operators: vec![ChainedOperator {
            vertex: 1,
            instance: Operator::Wasm(instance),
            state_sampled: None,
        }],
        sink: Some(TailSink {
            vertex: 2,
            id: "sink".into(),
            sink: Box::new(LatencySink {
                start,
                samples_ns: samples_ns.clone(),
                records: records.clone(),
            }),
        }),
        outputs: Vec::new(),
        index: 0,
        batch_size: g.batch_size as usize,
        watermark_interval: std::time::Duration::from_millis(
            weir_host::job::DEFAULT_WATERMARK_INTERVAL_MS,
        ),
        latency_interval: None,
        metrics: Arc::new(JobMetrics::new(3)),
        stop: Arc::new(AtomicBool::new(false)),
        drain: Arc::new(AtomicBool::new(false)),
        abort: Abort::new(),
        handle: rt.handle().clone(),
        checkpointing: None,
        subtask_metrics: Vec::new(),
    };
    let started = Instant::now();
    subtask.run()?;
    let secs = started.elapsed().as_secs_f64();
    let mut samples = std::mem::take(&mut *samples_ns.lock().unwrap_or_else(|e| e.into_inner()));
    let us = |ns: Option<u64>| ns.map(|n| n as f64 / 1e3);
    let records = *records.lock().unwrap_or_else(|e| e.into_inner());
    Ok(CaseResult {
        secs,
        records,
        p50_us: us(quantile(&mut samples, 0.50)),
        p99_us: us(quantile(&mut samples, 0.99)),
        peak_kib: peak_rss_kib(),
        ..CaseResult::default()
    })
}

fn id_job(g: Generated, parallelism: u32) -> anyhow::Result<CaseResult> {
    let spec = format!(
        r#"
[job]
name = "identity-bench"
parallelism = {parallelism}
batch_size = {batch_size}

[[source]]
id = "generator"
type = "generator"
kind = "sequence"
count = {records}
seed = {SEED}
record_bytes = {record_bytes}

[[operator]]
id = "identity"
module = {identity}

[[sink]]
id = "out"
type = "blackhole"

[[edge]]
from = "generator"
to = "identity"

[[edge]]
from = "identity"
to = "out"
"#,
        batch_size = g.batch_size,
        records = g.records,
        record_bytes = g.record_bytes,
        identity = toml_str(artifacts::IDENTITY),
    );
    let summary = run_job(&spec)?;
    let sink = vertex(&summary, "out")?;
    if sink.records_in != g.records {
        bail!(
            "the sink saw {} records, expected {}",
            sink.records_in,
            g.records
        );
    }
    Ok(CaseResult {
        secs: summary.elapsed.as_secs_f64(),
        records: summary.source_records(),
        peak_kib: peak_rss_kib(),
        ..CaseResult::default()
    })
}

fn run_case(case: Case) -> anyhow::Result<CaseResult> {
    match case {
        Case::WcNative { input } => wc_native(&input),
        Case::WcJob {
            input,
            parallelism,
            backend,
            batch_size,
            metrics,
            scrape_ms,
        } => wc_job(
            &input,
            WcJob {
                parallelism,
                backend: &backend,
                batch_size,
                metrics,
                scrape_ms,
            },
        ),
        Case::WnNative { input, window_ms } => wn_native(&input, window_ms),
        Case::WnJob {
            input,
            window_ms,
            mode,
            backend,
        } => wn_job(&input, window_ms, &mode, &backend),
        Case::IdSource(g) => native_loop(g, |b| b),
        Case::IdNative(g) => native_loop(g, |b| copy_batch(&b)),
        Case::IdChain(g) => id_chain(g),
        Case::IdJob {
            generated,
            parallelism,
        } => id_job(generated, parallelism),
    }
}
