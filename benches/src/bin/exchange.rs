//! `exchange`: records between two processes over QUIC on 127.0.0.1, through
//! Weir's data plane, beside raw quinn measured in the same run.
//!
//! ```text
//! cargo run --release -p weir-benches --bin exchange -- [--duration 5] [--record-size 100] [--batch 1024]
//! ```
//!
//! The binary re-executes itself as the receiving process (`exchange
//! --receiver DIR`), which prints its bound addresses on stdout when it is
//! ready, and one `RESULT` line per phase. TLS identities from one CA are
//! generated in memory by the parent and handed to the child in a temp dir.
//!
//! 1. **raw quinn**: one stream, `write_all` of 32 KiB buffers for
//!    `--duration`; the receiver reads chunks (zero-copy) and counts bytes.
//!    Records/s = bytes/s ÷ `--record-size`: the ceiling for a transport
//!    that adds nothing.
//! 2. **Weir**: batches of `--batch` records of `--record-size`-byte values
//!    (no key) through [`DataPlane::open_channel`] with the default
//!    [`NetConfig`] and 32 KiB buffers, into a registered input drained by
//!    a counting consumer.
//! 3. **latency**: Weir at half the rate measured in (2), buffer timeout
//!    1 ms: every millisecond the sender emits the records due as one batch
//!    (at most `--batch`), each value starting with the send time
//!    (`SystemTime` nanoseconds; same host, same clock); the consumer
//!    records arrival − send time per record.
//!
//! Throughput is counted at the receiver, from the first byte (raw) or
//! batch (Weir) to the end of the stream, in payload bytes: record values
//! only (Weir also carries 16 bytes of timestamp and lengths per record,
//! shown as "wire MB/s").

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::Parser;
use tokio::sync::mpsc;
use weir_benches::measure::quantile;
use weir_host::net::tls::{self, ClusterCa, NodeIdentity};
use weir_host::net::{ChannelOptions, DataPlane, Input, InputKey, NetConfig, Peer};
use weir_host::record::Batch;
use weir_host::taskmanager::{Abort, Message};

/// Size of each raw write: one Weir network buffer.
const RAW_WRITE: usize = 32 * 1024;

/// Capacity of the receiver's input mpsc, in messages (`channel_capacity`'s
/// default in a job).
const INPUT_CAPACITY: usize = 4;

#[derive(Parser)]
#[command(about = "Exchange throughput and latency between two processes over QUIC")]
struct Cli {
    /// Seconds per phase.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Bytes per record (its value).
    #[arg(long, default_value_t = 100)]
    record_size: usize,
    /// Records per batch.
    #[arg(long, default_value_t = 1024)]
    batch: usize,
    /// Raw and Weir phases alternate this many times (the machine's load
    /// drifts; alternating keeps the ratio honest). Medians are reported.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Network buffer size in KiB (the receiver's `NetConfig` and the
    /// channel's `ChannelOptions`).
    #[arg(long, default_value_t = 32)]
    buffer_kb: usize,
    /// Credits per channel (the receiver's `NetConfig`).
    #[arg(long, default_value_t = 4)]
    credits: u32,
    /// Records/s of the latency phase (default: half the median Weir rate).
    #[arg(long)]
    latency_rate: Option<f64>,
    /// Run as the receiving process, with the identities in this directory.
    #[arg(long, hide = true)]
    receiver: Option<PathBuf>,
}

impl Cli {
    fn net_config(&self) -> NetConfig {
        NetConfig {
            buffer_size: self.buffer_kb << 10,
            credits_per_channel: self.credits,
        }
    }

    fn channel_options(&self, buffer_timeout: Duration) -> ChannelOptions {
        ChannelOptions {
            buffer_size: self.buffer_kb << 10,
            buffer_timeout,
            ..ChannelOptions::default()
        }
    }
}

/// Input subtask of the latency phase (throughput rounds use 0..rounds).
const LATENCY_SUBTASK: u32 = u32::MAX;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if cli.record_size < 8 {
        bail!("--record-size must be at least 8 (the latency phase stamps 8 bytes)");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match &cli.receiver {
        Some(dir) => runtime.block_on(receiver(dir, &cli)),
        None => runtime.block_on(parent(&cli)),
    }
}

fn bench_key(subtask: u32) -> InputKey {
    InputKey {
        job: "exchange".into(),
        task: 0,
        subtask,
    }
}

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as u64
}

// ---------------------------------------------------------------- receiver

/// The receiver's input: one channel, from the sender only.
fn bench_input(tx: mpsc::Sender<Message>) -> Input {
    Input {
        tx,
        channels: 1,
        senders: std::sync::Arc::new(["sender".to_string()].into()),
        max_record_bytes: ChannelOptions::default().max_record_bytes,
    }
}

/// The child: a raw quinn endpoint and a Weir data plane; prints
/// `READY <raw> <weir>`, then a `RESULT` line per phase; exits when stdin
/// closes.
async fn receiver(dir: &Path, cli: &Cli) -> anyhow::Result<()> {
    let id = NodeIdentity::load(dir, "receiver")?;
    let any: SocketAddr = "127.0.0.1:0".parse()?;
    let raw = tls::endpoint(any, &id)?;
    let plane = DataPlane::new(tls::endpoint(any, &id)?, cli.net_config());

    let mut throughput = Vec::new();
    for round in 0..cli.rounds {
        let (tx, rx) = mpsc::channel(INPUT_CAPACITY);
        plane.register_input(bench_key(round), bench_input(tx));
        throughput.push(tokio::spawn(count_records(rx)));
    }
    let (tx, rx) = mpsc::channel(INPUT_CAPACITY);
    plane.register_input(bench_key(LATENCY_SUBTASK), bench_input(tx));
    let latency = tokio::spawn(record_latency(rx));
    tokio::spawn(async move {
        for (round, task) in throughput.into_iter().enumerate() {
            let (records, bytes, secs) = task.await.expect("counter");
            println!("RESULT weir {round} {records} {bytes} {secs}");
        }
        let mut latencies = latency.await.expect("latency recorder");
        let n = latencies.len();
        let mut q = |q| quantile(&mut latencies, q).unwrap_or(0);
        let (p50, p99, p999) = (q(0.5), q(0.99), q(0.999));
        let max = latencies.last().copied().unwrap_or(0);
        println!("RESULT latency {n} {p50} {p99} {p999} {max}");
    });

    println!("READY {} {}", raw.local_addr()?, plane.local_addr());
    std::io::stdout().flush()?;

    let conn = raw.accept().await.context("raw connection")?.await?;
    for round in 0..cli.rounds {
        let (mut send, mut recv) = conn.accept_bi().await?;
        let mut bytes = 0u64;
        let mut first = None;
        while let Some(chunk) = recv.read_chunk(usize::MAX, true).await? {
            first.get_or_insert_with(Instant::now);
            bytes += chunk.bytes.len() as u64;
        }
        let secs = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
        println!("RESULT raw {round} {bytes} {secs}");
        send.write_all(b"done").await?;
        send.finish()?;
    }

    // Stay up (the senders wait for their last credits) until told to go.
    tokio::task::spawn_blocking(|| std::io::stdin().lines().count()).await?;
    drop(conn);
    Ok(())
}

/// Counts records and value bytes from the first batch to `End`.
async fn count_records(mut rx: mpsc::Receiver<Message>) -> (u64, u64, f64) {
    let (mut records, mut bytes, mut first) = (0u64, 0u64, None);
    while let Some(msg) = rx.recv().await {
        match msg {
            Message::Records { batch: b, .. } => {
                first.get_or_insert_with(Instant::now);
                records += b.len() as u64;
                bytes += b.value_lens.iter().map(|&l| u64::from(l)).sum::<u64>();
            }
            Message::End { .. } => break,
            Message::Watermark { .. }
            | Message::Idle { .. }
            | Message::Barrier { .. }
            | Message::Latency { .. } => {}
        }
    }
    (
        records,
        bytes,
        first.map_or(0.0, |t: Instant| t.elapsed().as_secs_f64()),
    )
}

/// Arrival − send time of every record until `End`, in nanoseconds.
async fn record_latency(mut rx: mpsc::Receiver<Message>) -> Vec<u64> {
    let mut latencies = Vec::new();
    while let Some(msg) = rx.recv().await {
        match msg {
            Message::Records { batch: b, .. } => {
                let now = now_nanos();
                for r in &b {
                    let sent = u64::from_le_bytes(r.value[..8].try_into().expect("8 bytes"));
                    latencies.push(now.saturating_sub(sent));
                }
            }
            Message::End { .. } => break,
            Message::Watermark { .. }
            | Message::Idle { .. }
            | Message::Barrier { .. }
            | Message::Latency { .. } => {}
        }
    }
    latencies
}

// ------------------------------------------------------------------ parent

async fn parent(cli: &Cli) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let ca = ClusterCa::generate()?;
    ca.issue_taskmanager("receiver")?
        .write(dir.path(), "receiver")?;
    let id = ca.issue_taskmanager("sender")?;

    let mut child = Command::new(std::env::current_exe()?)
        .arg("--receiver")
        .arg(dir.path())
        .args(["--rounds", &cli.rounds.to_string()])
        .args(["--buffer-kb", &cli.buffer_kb.to_string()])
        .args(["--credits", &cli.credits.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the receiver process")?;
    let (lines_tx, mut lines) = mpsc::unbounded_channel::<String>();
    let stdout = child.stdout.take().expect("piped");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let ready = lines.recv().await.context("the receiver exited")?;
    let ready: Vec<&str> = ready.split_whitespace().collect();
    if ready.len() != 3 || ready[0] != "READY" {
        bail!("unexpected line from the receiver: {ready:?}");
    }
    let mut next_line = async |tag: &str| -> anyhow::Result<Vec<f64>> {
        let line = lines.recv().await.context("the receiver exited")?;
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() < 2 || words[0] != "RESULT" || words[1] != tag {
            bail!("expected a `{tag}` result from the receiver, got `{line}`");
        }
        Ok(words[2..]
            .iter()
            .map(|w| w.parse().unwrap_or(f64::NAN))
            .collect())
    };
    let raw_addr: SocketAddr = ready[1].parse()?;
    let weir_addr = Peer {
        id: "receiver".into(),
        addr: ready[2].parse()?,
    };
    let duration = Duration::from_secs_f64(cli.duration);
    let any: SocketAddr = "127.0.0.1:0".parse()?;
    let rs = cli.record_size as f64;

    let raw = tls::endpoint(any, &id)?;
    let raw_conn = raw
        .connect(raw_addr, &tls::taskmanager_name("receiver"))?
        .await?;
    let plane = DataPlane::new(tls::endpoint(any, &id)?, NetConfig::default());
    let abort = Abort::new();
    let template = {
        let mut b = Batch::with_capacity(cli.batch, cli.batch * cli.record_size);
        let value = vec![0x5a_u8; cli.record_size];
        for i in 0..cli.batch {
            b.push(None, &value, i as i64);
        }
        b
    };
    let buffer = vec![0x5a_u8; RAW_WRITE];
    // Per round: raw records/s, Weir records/s, Weir value bytes/s.
    let mut rounds = Vec::new();
    for round in 0..cli.rounds {
        // 1. Raw quinn: one stream, 32 KiB writes.
        let (mut send, mut recv) = raw_conn.open_bi().await?;
        let start = Instant::now();
        while start.elapsed() < duration {
            send.write_all(&buffer).await?;
        }
        send.finish()?;
        recv.read_to_end(16).await?;
        let r = next_line("raw").await?;
        let raw_rate = r[1] / r[2] / rs;

        // 2. Weir: batches through a data channel.
        let (tx, writer) = plane.open_channel_with_handle(
            weir_addr.clone(),
            bench_key(round),
            cli.channel_options(ChannelOptions::default().buffer_timeout),
            abort.clone(),
        );
        let start = Instant::now();
        while start.elapsed() < duration {
            tx.send(Message::Records {
                channel: 0,
                batch: template.clone(),
            })
            .await?;
        }
        tx.send(Message::End { channel: 0 }).await?;
        drop(tx);
        writer.await??;
        let w = next_line("weir").await?;
        let (weir_rate, weir_bytes) = (w[1] / w[3], w[2] / w[3]);
        println!(
            "round {}: raw {:.0} records/s, Weir {:.0} records/s ({:.0}%)",
            round + 1,
            raw_rate,
            weir_rate,
            100.0 * weir_rate / raw_rate
        );
        rounds.push((raw_rate, weir_rate, weir_bytes));
    }
    let stats = plane.stats();
    let median = |f: &dyn Fn(&(f64, f64, f64)) -> f64| {
        let mut v: Vec<f64> = rounds.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let raw_rate = median(&|r| r.0);
    let weir_rate = median(&|r| r.1);
    let weir_bytes = median(&|r| r.2);
    let ratio = median(&|r| r.1 / r.0);

    // 3. Latency at half the Weir rate, buffer timeout 1 ms.
    let rate = cli.latency_rate.unwrap_or(weir_rate / 2.0);
    let (tx, writer) = plane.open_channel_with_handle(
        weir_addr,
        bench_key(LATENCY_SUBTASK),
        cli.channel_options(Duration::from_millis(1)),
        abort.clone(),
    );
    let mut value = vec![0x5a_u8; cli.record_size];
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let start = Instant::now();
    let mut sent = 0u64;
    while start.elapsed() < duration {
        tick.tick().await;
        let due = (start.elapsed().as_secs_f64() * rate) as u64;
        while sent < due {
            let n = ((due - sent) as usize).min(cli.batch);
            let mut b = Batch::with_capacity(n, n * cli.record_size);
            value[..8].copy_from_slice(&now_nanos().to_le_bytes());
            for _ in 0..n {
                b.push(None, &value, 0);
            }
            tx.send(Message::Records {
                channel: 0,
                batch: b,
            })
            .await?;
            sent += n as u64;
        }
    }
    tx.send(Message::End { channel: 0 }).await?;
    drop(tx);
    writer.await??;
    let l = next_line("latency").await?;
    let ms = |ns: f64| ns / 1e6;
    let (n, p50, p99, p999, max) = (l[0], ms(l[1]), ms(l[2]), ms(l[3]), ms(l[4]));

    drop(child.stdin.take());
    child.wait()?;

    println!();
    println!(
        "exchange over QUIC on 127.0.0.1, two processes: {}-byte records, {} per batch, \
         {} KiB buffers, {} credits, {} round(s) of {} s per path (medians)",
        cli.record_size, cli.batch, cli.buffer_kb, cli.credits, cli.rounds, cli.duration
    );
    println!();
    println!(
        "{:<36} {:>12} {:>10} {:>10}",
        "path", "records/s", "MB/s", "wire MB/s"
    );
    println!(
        "{:<36} {:>12.0} {:>10.1} {:>10.1}",
        "raw quinn, 1 stream, 32 KiB writes",
        raw_rate,
        raw_rate * rs / 1e6,
        raw_rate * rs / 1e6
    );
    println!(
        "{:<36} {:>12.0} {:>10.1} {:>10.1}",
        "Weir DataPlane channel",
        weir_rate,
        weir_bytes / 1e6,
        weir_rate * (rs + 16.0) / 1e6
    );
    println!(
        "{:<36} {:>11.0}%",
        "Weir / raw (median of rounds)",
        100.0 * ratio
    );
    println!();
    println!(
        "latency at {rate:.0} records/s, buffer timeout 1 ms ({n} records): \
         p50 {p50:.3} ms, p99 {p99:.3} ms, p99.9 {p999:.3} ms, max {max:.3} ms"
    );
    println!(
        "sender's max buffered bytes: {} (bound (credits + 1) × buffer = {})",
        stats.max_buffered_bytes,
        (u64::from(cli.credits) + 1) * (cli.buffer_kb as u64) * 1024
    );
    Ok(())
}
