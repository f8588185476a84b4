//! `checkpointing` (`src/bin/checkpointing.rs`): what checkpoints cost a
//! running job, and how long a job takes to process again after a
//! TaskManager is killed. Both run on a real cluster of `weir` processes
//! on 127.0.0.1: a JobManager and two TaskManagers of one slot each, so a
//! job of parallelism 2 has a subtask of every task on each TaskManager
//! and its keyed exchange crosses processes over QUIC.
//!
//! ```text
//! cargo run --release -p weir-benches --bin checkpointing -- throughput \
//!     [--duration 20] [--warmup 5] [--rounds 3] [--interval-ms 1000] [--keys 1000000]
//! cargo run --release -p weir-benches --bin checkpointing -- recovery \
//!     [--kills 10] [--keys 4000000] [--interval-ms 1000] [--heartbeat-timeout-ms 1000] \
//!     [--restart-delay-ms 200]
//! ```
//!
//! The job: a `sequence` generator (record `n` has key `n % keys` and a
//! value padded to `--record-bytes`) → `word_count.wasm` keyed by the key,
//! `emit = "updates"` (a u64 count per key in RocksDB) → blackhole.
//!
//! - **throughput** runs that job unthrottled for `--duration` seconds,
//!   without `[job.checkpoints]` and with `interval_ms = --interval-ms`,
//!   alternating, `--rounds` times each, one job after the other on the same
//!   cluster. A round's rate is the source's `records_out` (REST) between
//!   `--warmup` s after all subtasks run and the end, divided by the time
//!   between the two samples. The ratio is median(with) ÷ median(without).
//! - **recovery** runs the job (throttled by `--rate` if given) until every
//!   key is in state and a checkpoint completed after that, then `--kills`
//!   times: waits for a checkpoint newer than the last restore, waits a
//!   random part of a checkpoint interval, SIGKILLs one TaskManager
//!   (alternating) and starts it again at once with the same id and data
//!   dir. Timed from the kill: the job leaves `running` (detected), the
//!   new TaskManager registers, the JobManager redeploys (the restore's
//!   `at_ms`), every subtask runs again, and the source's `records_out`
//!   grows past its value at the restore ("processing again").
//!
//! Metrics reach the JobManager with TaskManager heartbeats, so every
//! REST-derived time is late by up to `--heartbeat-interval-ms` (default
//! 100). Every child process is killed on drop; the temp dir (certificates,
//! data dirs, checkpoint storage, logs) is under `--dir` and removed at the
//! end unless `--keep`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail, ensure};
use clap::{Args, Parser, Subcommand};
use serde_json::Value;
use weir_tests::artifacts;

mod cluster;

use cluster::*;

/// How long a daemon may take to print its readiness line, or a job to
/// reach a state: the machine is a loaded 2-core box.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// How long the recovery job may take to put every key in state once.
const BUILD_TIMEOUT: Duration = Duration::from_secs(900);

/// How long one recovery may take before the round counts as failed.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(60);

/// REST poll period while timing a recovery: small against the times
/// measured (hundreds of ms), large enough not to load the JobManager.
const POLL: Duration = Duration::from_millis(10);

#[derive(Parser)]
#[command(about = "Checkpointing overhead and recovery time on a cluster of weir processes")]
struct Cli {
    #[command(subcommand)]
    bench: Bench,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct Common {
    /// The `weir` binary (default: next to this one).
    #[arg(long, global = true)]
    weir: Option<PathBuf>,
    /// Where the temp dir goes.
    #[arg(long, global = true, default_value = "/var/tmp")]
    dir: PathBuf,
    /// Keep the temp dir (logs, checkpoints) and print its path.
    #[arg(long, global = true)]
    keep: bool,
    /// JobManager `--heartbeat-interval-ms` (also how often metrics arrive).
    #[arg(long, global = true, default_value_t = 100)]
    heartbeat_interval_ms: u64,
    /// Bytes of each generated record's value.
    #[arg(long, global = true, default_value_t = 100)]
    record_bytes: u64,
}

#[derive(Subcommand)]
enum Bench {
    /// Source records/s without and with checkpoints, alternating.
    Throughput {
        /// Seconds each job runs.
        #[arg(long, default_value_t = 20)]
        duration: u64,
        /// Seconds after all subtasks run that are not measured.
        #[arg(long, default_value_t = 5)]
        warmup: u64,
        /// Jobs of each kind.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// `[job.checkpoints] interval_ms` of the checkpointed jobs.
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
        /// Distinct keys.
        #[arg(long, default_value_t = 1_000_000)]
        keys: u64,
    },
    /// Time from SIGKILL of a TaskManager to processing again.
    Recovery {
        /// Kills (and restarts).
        #[arg(long, default_value_t = 10)]
        kills: usize,
        /// Distinct keys: the size of the state.
        #[arg(long, default_value_t = 4_000_000)]
        keys: u64,
        /// Source records/s in total (0: unthrottled).
        #[arg(long, default_value_t = 0)]
        rate: u64,
        /// `[job.checkpoints] interval_ms`.
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
        /// JobManager `--heartbeat-timeout-ms`.
        #[arg(long, default_value_t = 1000)]
        heartbeat_timeout_ms: u64,
        /// `[job.restart] delay_ms` (fixed-delay).
        #[arg(long, default_value_t = 200)]
        restart_delay_ms: u64,
        /// Start the killed TaskManager again this long after the kill
        /// (0: at once, when its re-registration is what reveals the loss;
        /// above the heartbeat timeout, the timeout does).
        #[arg(long, default_value_t = 0)]
        respawn_after_ms: u64,
    },
}

// ---- processes ------------------------------------------------------------

// ---- the job --------------------------------------------------------------

// ---- statistics -----------------------------------------------------------

fn median(xs: &[f64]) -> f64 {
    percentile(xs, 50.0)
}

/// Nearest-rank percentile.
fn percentile(xs: &[f64], p: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1]
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len().max(1) as f64
}

fn mb(bytes: f64) -> f64 {
    bytes / 1e6
}

fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

// ---- 1. throughput --------------------------------------------------------

/// One job's measurement.
struct Round {
    checkpointing: bool,
    rate: f64,
    completed: usize,
    aborted: usize,
    full_mb: f64,
    incremental_mb: f64,
    duration_ms: f64,
    restores: usize,
}

fn throughput_round(
    cluster: &Cluster,
    common: &Common,
    keys: u64,
    checkpoint_interval: Option<u64>,
    warmup: Duration,
    duration: Duration,
) -> anyhow::Result<Round> {
    let extra = checkpoint_interval
        .map(checkpoints_section)
        .unwrap_or_default();
    let id = cluster.submit(&job_spec(keys, 0, common.record_bytes, &extra))?;
    cluster.wait_job(&id, all_running)?;
    let start = Instant::now();
    std::thread::sleep(warmup);
    let (t0, n0) = (Instant::now(), source_out(&cluster.job(&id)?));
    std::thread::sleep(duration.saturating_sub(start.elapsed()));
    let job = cluster.job(&id)?;
    let (t1, n1) = (Instant::now(), source_out(&job));
    ensure!(job["state"] == "running", "job {id} stopped: {job}");
    let c = cluster.checkpoints(&id)?;
    cluster.cancel(&id)?;
    let done = completed(&c);
    let field = |name: &str| {
        mean(
            &done
                .iter()
                .filter_map(|c| c[name].as_f64())
                .collect::<Vec<_>>(),
        )
    };
    Ok(Round {
        checkpointing: checkpoint_interval.is_some(),
        rate: n1.saturating_sub(n0) as f64 / (t1 - t0).as_secs_f64(),
        completed: done.len(),
        aborted: c["history"]
            .as_array()
            .map(|h| h.iter().filter(|c| c["status"] == "aborted").count())
            .unwrap_or(0),
        full_mb: mb(field("full_size")),
        incremental_mb: mb(field("incremental_size")),
        duration_ms: field("duration_ms"),
        restores: restores(&c).len(),
    })
}

fn throughput(
    cluster: &Cluster,
    common: &Common,
    duration: u64,
    warmup: u64,
    rounds: usize,
    interval_ms: u64,
    keys: u64,
) -> anyhow::Result<()> {
    ensure!(duration > warmup, "--duration must exceed --warmup");
    println!(
        "throughput: generator ({keys} keys, {} B values, unthrottled) -> word_count (RocksDB) -> \
         blackhole, p=2 on 2 TaskManagers; {duration} s per job, measured from {warmup} s; \
         checkpoints every {interval_ms} ms or none, alternating, {rounds} each",
        common.record_bytes
    );
    println!(
        "{:>5} {:>13} {:>14} {:>10} {:>8} {:>12} {:>12} {:>12} {:>10}",
        "round",
        "checkpoints",
        "records/s",
        "completed",
        "aborted",
        "mean full",
        "mean incr.",
        "mean dur.",
        "load"
    );
    let mut all = Vec::new();
    for r in 0..rounds {
        for with in [false, true] {
            let round = throughput_round(
                cluster,
                common,
                keys,
                with.then_some(interval_ms),
                Duration::from_secs(warmup),
                Duration::from_secs(duration),
            )?;
            let kind = if with {
                format!("{interval_ms} ms")
            } else {
                "none".to_owned()
            };
            let ckpt = |s: String| if with { s } else { "-".to_owned() };
            println!(
                "{:>5} {:>13} {:>14.0} {:>10} {:>8} {:>12} {:>12} {:>12} {:>10}",
                r + 1,
                kind,
                round.rate,
                ckpt(round.completed.to_string()),
                ckpt(round.aborted.to_string()),
                ckpt(format!("{:.1} MB", round.full_mb)),
                ckpt(format!("{:.2} MB", round.incremental_mb)),
                ckpt(format!("{:.0} ms", round.duration_ms)),
                load_average().split(' ').next().unwrap_or(""),
            );
            if round.restores > 0 {
                println!(
                    "      (this job restarted {} times: its rate is not comparable)",
                    round.restores
                );
            }
            all.push(round);
        }
    }
    let rates = |with: bool| -> Vec<f64> {
        all.iter()
            .filter(|r| r.checkpointing == with)
            .map(|r| r.rate)
            .collect()
    };
    let (without, with) = (median(&rates(false)), median(&rates(true)));
    let ckpt: Vec<&Round> = all.iter().filter(|r| r.checkpointing).collect();
    println!(
        "median records/s: without {without:.0}, with {with:.0}; with/without = {:.1}%",
        100.0 * with / without
    );
    println!(
        "checkpointed jobs: {:.1} completed checkpoints per job, mean full size {:.1} MB, \
         mean incremental size {:.2} MB, mean duration {:.0} ms",
        mean(&ckpt.iter().map(|r| r.completed as f64).collect::<Vec<_>>()),
        mean(&ckpt.iter().map(|r| r.full_mb).collect::<Vec<_>>()),
        mean(&ckpt.iter().map(|r| r.incremental_mb).collect::<Vec<_>>()),
        mean(&ckpt.iter().map(|r| r.duration_ms).collect::<Vec<_>>()),
    );
    Ok(())
}

// ---- 2. recovery ----------------------------------------------------------

/// One kill, times from the kill in ms.
#[derive(Default)]
struct Recovery {
    detected: Option<f64>,
    registered: Option<f64>,
    redeployed: Option<f64>,
    running: Option<f64>,
    processing: Option<f64>,
    full_mb: f64,
    cause: String,
}

/// Waits until the job runs, a checkpoint newer than `after` completed and
/// the source made progress since; returns that checkpoint's full size.
fn wait_new_checkpoint(cluster: &Cluster, id: &str, after: u64) -> anyhow::Result<f64> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let job = cluster.job(id)?;
        ensure!(job["state"] != "failed", "job failed: {}", job["failure"]);
        let c = cluster.checkpoints(id)?;
        let newest = completed(&c)
            .into_iter()
            .max_by_key(|c| c["id"].as_u64().unwrap_or(0));
        if let Some(newest) = newest.filter(|n| n["id"].as_u64().unwrap_or(0) > after)
            && all_running(&job)
        {
            return Ok(mb(newest["full_size"].as_f64().unwrap_or(0.0)));
        }
        ensure!(
            Instant::now() < deadline,
            "no checkpoint after {after} within {READY_TIMEOUT:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A clock-derived random delay in `0..max_ms` (no crate needed).
fn jitter(max_ms: u64) -> Duration {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64)
        .unwrap_or(0);
    Duration::from_millis(nanos.wrapping_mul(0x9E37_79B9_7F4A_7C15) % max_ms.max(1))
}

fn kill_and_time(
    cluster: &mut Cluster,
    id: &str,
    victim: usize,
    full_mb: f64,
    respawn_after: Duration,
) -> anyhow::Result<Recovery> {
    let restores_before = restores(&cluster.checkpoints(id)?).len();
    let log_from = std::fs::metadata(cluster.jm_log()).map_or(0, |m| m.len());
    let killed_at = Instant::now();
    let killed_ms = epoch_ms();
    cluster.tms[victim].kill();
    let mut respawned = false;
    let since = |t: Instant| (t - killed_at).as_secs_f64() * 1e3;
    let mut r = Recovery {
        full_mb,
        ..Recovery::default()
    };
    // The source's records_out at the restore; lowered if a report of the
    // attempt before arrives late and is then replaced.
    let mut baseline: Option<u64> = None;
    while killed_at.elapsed() < RECOVERY_TIMEOUT {
        if !respawned && killed_at.elapsed() >= respawn_after {
            cluster.respawn_taskmanager(victim)?;
            respawned = true;
        }
        if respawned
            && r.registered.is_none()
            && let Some(at) = cluster.tms[victim].seen_line("registered with")
        {
            r.registered = Some(since(at));
        }
        let job = cluster.job(id)?;
        let now = Instant::now();
        ensure!(
            job["state"] != "failed",
            "job failed (no restart): {}",
            job["failure"]
        );
        if r.detected.is_none() && job["state"] != "running" {
            r.detected = Some(since(now));
        }
        if r.redeployed.is_none() {
            let c = cluster.checkpoints(id)?;
            let rs = restores(&c);
            if rs.len() > restores_before {
                let at = rs.last().and_then(|x| x["at_ms"].as_u64()).unwrap_or(0);
                r.redeployed = Some(at.saturating_sub(killed_ms) as f64);
                if r.detected.is_none() {
                    // Failed and restarted between two polls.
                    r.detected = r.redeployed;
                }
            }
        }
        if r.redeployed.is_some() {
            if r.running.is_none() && all_running(&job) {
                r.running = Some(since(now));
            }
            let n = source_out(&job);
            match baseline {
                None => baseline = Some(n),
                Some(b) if n < b => baseline = Some(n),
                Some(b) if n > b && r.running.is_some() => {
                    r.processing = Some(since(now));
                    break;
                }
                Some(_) => {}
            }
        }
        std::thread::sleep(POLL);
    }
    if !respawned {
        cluster.respawn_taskmanager(victim)?;
    }
    if r.registered.is_none()
        && let Ok((at, _)) = cluster.tms[victim].wait_line("registered with")
    {
        r.registered = Some(since(at));
    }
    // The JobManager's log says what revealed the loss, and when (its
    // timestamps are UTC, microseconds; only the time of day is compared).
    let log = std::fs::read(cluster.jm_log()).unwrap_or_default();
    let log = String::from_utf8_lossy(&log[(log_from as usize).min(log.len())..]).into_owned();
    if let Some(line) = log.lines().find(|l| l.contains("lost: ")) {
        r.cause = line.split("lost: ").nth(1).unwrap_or("").trim().to_owned();
        if let Some(at) = log_time_of_day_ms(line) {
            let killed = (killed_ms % 86_400_000) as f64;
            r.detected = Some((at - killed).rem_euclid(86_400_000.0));
        }
    }
    Ok(r)
}

/// The time of day in ms of a log line starting `2026-11-30T02:19:31.007327Z`.
fn log_time_of_day_ms(line: &str) -> Option<f64> {
    let time = line.split_whitespace().next()?.split('T').nth(1)?;
    let time = time.strip_suffix('Z')?;
    let mut parts = time.split(':');
    let h: f64 = parts.next()?.parse().ok()?;
    let m: f64 = parts.next()?.parse().ok()?;
    let s: f64 = parts.next()?.parse().ok()?;
    Some(((h * 60.0 + m) * 60.0 + s) * 1e3)
}

fn ms(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.0}"))
        .unwrap_or_else(|| "-".to_owned())
}

#[allow(clippy::too_many_arguments)]
fn recovery(
    cluster: &mut Cluster,
    common: &Common,
    kills: usize,
    keys: u64,
    rate: u64,
    interval_ms: u64,
    heartbeat_timeout_ms: u64,
    restart_delay_ms: u64,
    respawn_after: Duration,
) -> anyhow::Result<()> {
    let extra = format!(
        "{}\n[job.restart]\nstrategy = \"fixed-delay\"\nattempts = 1000\ndelay_ms = {restart_delay_ms}\n",
        checkpoints_section(interval_ms)
    );
    println!(
        "recovery: generator ({keys} keys, {} B values, {}) -> word_count (RocksDB) -> blackhole, \
         p=2 on 2 TaskManagers; checkpoints every {interval_ms} ms; heartbeat interval {} ms, \
         timeout {heartbeat_timeout_ms} ms; fixed-delay restart after {restart_delay_ms} ms; \
         killed TaskManager started again {} ms after the kill",
        common.record_bytes,
        if rate > 0 {
            format!("{rate} records/s")
        } else {
            "unthrottled".to_owned()
        },
        common.heartbeat_interval_ms,
        respawn_after.as_millis(),
    );
    let id = cluster.submit(&job_spec(keys, rate, common.record_bytes, &extra))?;
    // Every key in state, then a checkpoint of it.
    let built = Instant::now();
    loop {
        let job = cluster.job(&id)?;
        ensure!(job["state"] != "failed", "job failed: {}", job["failure"]);
        if source_out(&job) >= keys {
            break;
        }
        ensure!(
            built.elapsed() < BUILD_TIMEOUT,
            "only {} of {keys} records after {BUILD_TIMEOUT:?}",
            source_out(&job)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let after = latest_completed_id(&cluster.checkpoints(&id)?);
    let full = wait_new_checkpoint(cluster, &id, after)?;
    let secs = built.elapsed().as_secs_f64();
    println!(
        "state built in {secs:.1} s ({:.0} records/s): {keys} keys, checkpoint full size \
         {full:.1} MB",
        keys as f64 / secs
    );
    println!(
        "{:>4} {:>6} {:>10} {:>9} {:>10} {:>12} {:>9} {:>12} {:>11} {:>6}  cause",
        "kill",
        "victim",
        "full MB",
        "detected",
        "TM regist.",
        "redeployed",
        "running",
        "processing",
        "redeploy→",
        "load"
    );
    let mut results = Vec::new();
    let mut failed = 0;
    for k in 0..kills {
        let after = latest_completed_id(&cluster.checkpoints(&id)?);
        let full = wait_new_checkpoint(cluster, &id, after)?;
        std::thread::sleep(jitter(interval_ms));
        let victim = k % cluster.tms.len();
        let load = load_average();
        let r = kill_and_time(cluster, &id, victim, full, respawn_after)?;
        let tail = match (r.redeployed, r.processing) {
            (Some(a), Some(b)) => format!("{:.0}", b - a),
            _ => "-".to_owned(),
        };
        println!(
            "{:>4} {:>6} {:>10.1} {:>9} {:>10} {:>12} {:>9} {:>12} {:>11} {:>6}  {}",
            k + 1,
            format!("tm-{}", victim + 1),
            r.full_mb,
            ms(r.detected),
            ms(r.registered),
            ms(r.redeployed),
            ms(r.running),
            ms(r.processing),
            tail,
            load.split(' ').next().unwrap_or(""),
            r.cause,
        );
        if r.processing.is_none() {
            failed += 1;
            println!("      no processing within {RECOVERY_TIMEOUT:?}: counted as failed");
        } else {
            results.push(r);
        }
    }
    let col = |f: &dyn Fn(&Recovery) -> Option<f64>| -> Vec<f64> {
        results.iter().filter_map(f).collect()
    };
    let total = col(&|r| r.processing);
    let detect = col(&|r| r.detected);
    let to_deploy = col(&|r| Some(r.redeployed? - r.detected?));
    let to_run = col(&|r| Some(r.running? - r.redeployed?));
    let to_process = col(&|r| Some(r.processing? - r.running?));
    let registered = col(&|r| r.registered);
    println!(
        "kill → processing again over {} recoveries ({failed} failed): p50 {:.0} ms, p99 {:.0} ms, \
         max {:.0} ms",
        total.len(),
        percentile(&total, 50.0),
        percentile(&total, 99.0),
        percentile(&total, 100.0),
    );
    println!("split, median ms (p99):");
    for (name, xs) in [
        ("kill → job leaves running (detected)", &detect),
        ("kill → restarted TM registered", &registered),
        (
            "detected → redeploy sent (restart delay, slots)",
            &to_deploy,
        ),
        (
            "redeploy → all subtasks running (download, restore)",
            &to_run,
        ),
        ("running → source records_out grows", &to_process),
    ] {
        println!(
            "  {name:<52} {:>6.0} ({:.0})",
            median(xs),
            percentile(xs, 99.0)
        );
    }
    let mut causes: Vec<String> = results.iter().map(|r| r.cause.clone()).collect();
    causes.sort();
    causes.dedup();
    println!("causes seen: {causes:?}");
    let c = cluster.checkpoints(&id)?;
    println!(
        "restores recorded: {}; checkpoints completed (retained in history): {}",
        restores(&c).len(),
        completed(&c).len()
    );
    cluster.cancel(&id)?;
    Ok(())
}

// ---- main -----------------------------------------------------------------

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let common = &cli.common;
    let weir = match &common.weir {
        Some(w) => w.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("no parent dir")?
            .join("weir"),
    };
    ensure!(
        weir.exists(),
        "no weir binary at {} (build it: cargo build --release -p weir-cli, or pass --weir)",
        weir.display()
    );
    let tmp = tempfile::Builder::new()
        .prefix("weir-checkpointing-")
        .tempdir_in(&common.dir)
        .context("temp dir")?;
    println!("load average at start: {}", load_average());
    let mut jm_args = vec![
        "--heartbeat-interval-ms".to_owned(),
        common.heartbeat_interval_ms.to_string(),
    ];
    let result = match cli.bench {
        Bench::Throughput {
            duration,
            warmup,
            rounds,
            interval_ms,
            keys,
        } => {
            let cluster = Cluster::start(&weir, tmp.path(), 2, &jm_args)?;
            throughput(
                &cluster,
                common,
                duration,
                warmup,
                rounds,
                interval_ms,
                keys,
            )
        }
        Bench::Recovery {
            kills,
            keys,
            rate,
            interval_ms,
            heartbeat_timeout_ms,
            restart_delay_ms,
            respawn_after_ms,
        } => {
            jm_args.extend([
                "--heartbeat-timeout-ms".to_owned(),
                heartbeat_timeout_ms.to_string(),
            ]);
            let mut cluster = Cluster::start(&weir, tmp.path(), 2, &jm_args)?;
            recovery(
                &mut cluster,
                common,
                kills,
                keys,
                rate,
                interval_ms,
                heartbeat_timeout_ms,
                restart_delay_ms,
                Duration::from_millis(respawn_after_ms),
            )
        }
    };
    println!("load average at end: {}", load_average());
    if common.keep {
        println!("kept {}", tmp.keep().display());
    }
    result
}
