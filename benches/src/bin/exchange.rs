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
use weir_host::net::{ChannelOptions, DataPlane, InputKey, NetConfig};
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
    /// Records/s of the latency phase (default: half the measured Weir rate).
    #[arg(long)]
    latency_rate: Option<f64>,
    /// Run as the receiving process, with the identities in this directory.
    #[arg(long, hide = true)]
    receiver: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if cli.record_size < 8 {
        bail!("--record-size must be at least 8 (the latency phase stamps 8 bytes)");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match &cli.receiver {
        Some(dir) => runtime.block_on(receiver(dir)),
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

/// The child: a raw quinn endpoint and a Weir data plane; prints
/// `READY <raw> <weir>`, then a `RESULT` line per phase; exits when stdin
/// closes.
async fn receiver(dir: &Path) -> anyhow::Result<()> {
    let id = NodeIdentity::load(dir, "receiver")?;
    let any: SocketAddr = "127.0.0.1:0".parse()?;
    let raw = tls::endpoint(any, &id)?;
    let plane = DataPlane::new(tls::endpoint(any, &id)?, NetConfig::default());

    let (tx, rx) = mpsc::channel(INPUT_CAPACITY);
    plane.register_input(bench_key(0), tx);
    let throughput = tokio::spawn(count_records(rx));
    let (tx, rx) = mpsc::channel(INPUT_CAPACITY);
    plane.register_input(bench_key(1), tx);
    let latency = tokio::spawn(record_latency(rx));

    println!("READY {} {}", raw.local_addr()?, plane.local_addr());
    std::io::stdout().flush()?;

    let conn = raw.accept().await.context("raw connection")?.await?;
    let (mut send, mut recv) = conn.accept_bi().await?;
    let mut bytes = 0u64;
    let mut first = None;
    while let Some(chunk) = recv.read_chunk(usize::MAX, true).await? {
        first.get_or_insert_with(Instant::now);
        bytes += chunk.bytes.len() as u64;
    }
    let secs = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
    println!("RESULT raw {bytes} {secs}");
    std::io::stdout().flush()?;
    send.write_all(b"done").await?;
    send.finish()?;

    let (records, bytes, secs) = throughput.await?;
    println!("RESULT weir {records} {bytes} {secs}");
    std::io::stdout().flush()?;
    let mut latencies = latency.await?;
    let n = latencies.len();
    let q = |s: &mut Vec<u64>, q| quantile(s, q).unwrap_or(0);
    let (p50, p99, p999) = (
        q(&mut latencies, 0.5),
        q(&mut latencies, 0.99),
        q(&mut latencies, 0.999),
    );
    let max = latencies.last().copied().unwrap_or(0);
    println!("RESULT latency {n} {p50} {p99} {p999} {max}");
    std::io::stdout().flush()?;

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
            Message::Records(b) => {
                first.get_or_insert_with(Instant::now);
                records += b.len() as u64;
                bytes += b.value_lens.iter().map(|&l| u64::from(l)).sum::<u64>();
            }
            Message::End { .. } => break,
            Message::Watermark { .. } => {}
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
            Message::Records(b) => {
                let now = now_nanos();
                for r in &b {
                    let sent = u64::from_le_bytes(r.value[..8].try_into().expect("8 bytes"));
                    latencies.push(now.saturating_sub(sent));
                }
            }
            Message::End { .. } => break,
            Message::Watermark { .. } => {}
        }
    }
    latencies
}

// ------------------------------------------------------------------ parent

async fn parent(cli: &Cli) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let ca = ClusterCa::generate()?;
    ca.issue("receiver")?.write(dir.path(), "receiver")?;
    let id = ca.issue("sender")?;

    let mut child = Command::new(std::env::current_exe()?)
        .arg("--receiver")
        .arg(dir.path())
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
    let mut next_line = async || -> anyhow::Result<Vec<String>> {
        let line = lines.recv().await.context("the receiver exited")?;
        Ok(line.split_whitespace().map(str::to_string).collect())
    };
    let ready = next_line().await?;
    if ready.first().map(String::as_str) != Some("READY") || ready.len() != 3 {
        bail!("unexpected line from the receiver: {ready:?}");
    }
    let raw_addr: SocketAddr = ready[1].parse()?;
    let weir_addr: SocketAddr = ready[2].parse()?;
    let duration = Duration::from_secs_f64(cli.duration);
    let any: SocketAddr = "127.0.0.1:0".parse()?;

    // 1. Raw quinn.
    let raw = tls::endpoint(any, &id)?;
    let conn = raw.connect(raw_addr, tls::SERVER_NAME)?.await?;
    let (mut send, mut recv) = conn.open_bi().await?;
    let buffer = vec![0x5a_u8; RAW_WRITE];
    let start = Instant::now();
    while start.elapsed() < duration {
        send.write_all(&buffer).await?;
    }
    send.finish()?;
    recv.read_to_end(16).await?;
    let r = next_line().await?;
    let (raw_bytes, raw_secs): (f64, f64) = (r[2].parse()?, r[3].parse()?);
    let raw_rate = raw_bytes / raw_secs;
    conn.close(0u32.into(), b"done");

    // 2. Weir throughput.
    let plane = DataPlane::new(tls::endpoint(any, &id)?, NetConfig::default());
    let template = {
        let mut b = Batch::with_capacity(cli.batch, cli.batch * cli.record_size);
        let value = vec![0x5a_u8; cli.record_size];
        for i in 0..cli.batch {
            b.push(None, &value, i as i64);
        }
        b
    };
    let abort = Abort::new();
    let (tx, writer) = plane.open_channel_with_handle(
        weir_addr,
        bench_key(0),
        ChannelOptions::default(),
        abort.clone(),
    );
    let start = Instant::now();
    while start.elapsed() < duration {
        tx.send(Message::Records(template.clone())).await?;
    }
    tx.send(Message::End { channel: 0 }).await?;
    drop(tx);
    writer.await??;
    let w = next_line().await?;
    let (records, bytes, secs): (f64, f64, f64) = (w[2].parse()?, w[3].parse()?, w[4].parse()?);
    let weir_rate = records / secs;
    let weir_bytes = bytes / secs;
    let stats = plane.stats();

    // 3. Latency at half the Weir rate, buffer timeout 1 ms.
    let rate = cli.latency_rate.unwrap_or(weir_rate / 2.0);
    let (tx, writer) = plane.open_channel_with_handle(
        weir_addr,
        bench_key(1),
        ChannelOptions {
            buffer_timeout: Duration::from_millis(1),
            ..ChannelOptions::default()
        },
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
            let stamp = now_nanos().to_le_bytes();
            value[..8].copy_from_slice(&stamp);
            for _ in 0..n {
                b.push(None, &value, 0);
            }
            tx.send(Message::Records(b)).await?;
            sent += n as u64;
        }
    }
    tx.send(Message::End { channel: 0 }).await?;
    drop(tx);
    writer.await??;
    let l = next_line().await?;
    let ms = |s: &str| -> anyhow::Result<f64> { Ok(s.parse::<f64>()? / 1e6) };
    let (n, p50, p99, p999, max) = (&l[2], ms(&l[3])?, ms(&l[4])?, ms(&l[5])?, ms(&l[6])?);

    drop(child.stdin.take());
    child.wait()?;

    let rs = cli.record_size as f64;
    println!(
        "exchange over QUIC on 127.0.0.1, two processes: {}-byte records, {} per batch, {} s per phase",
        cli.record_size, cli.batch, cli.duration
    );
    println!();
    println!(
        "{:<34} {:>14} {:>12} {:>12}",
        "path", "records/s", "MB/s", "wire MB/s"
    );
    println!(
        "{:<34} {:>14.0} {:>12.1} {:>12.1}",
        "raw quinn, 1 stream, 32 KiB writes",
        raw_rate / rs,
        raw_rate / 1e6,
        raw_rate / 1e6
    );
    println!(
        "{:<34} {:>14.0} {:>12.1} {:>12.1}",
        "Weir DataPlane (default NetConfig)",
        weir_rate,
        weir_bytes / 1e6,
        weir_rate * (rs + 16.0) / 1e6
    );
    println!(
        "{:<34} {:>13.0}%",
        "Weir / raw",
        100.0 * weir_rate / (raw_rate / rs)
    );
    println!();
    println!(
        "latency at {rate:.0} records/s, buffer timeout 1 ms ({n} records): \
         p50 {p50:.3} ms, p99 {p99:.3} ms, p99.9 {p999:.3} ms, max {max:.3} ms"
    );
    println!(
        "sender's max buffered bytes: {} (bound (4 + 1) × 32 KiB = {})",
        stats.max_buffered_bytes,
        5 * 32 * 1024
    );
    Ok(())
}
