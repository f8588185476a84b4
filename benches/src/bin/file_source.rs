//! The parallel file source's throughput: a folder of files read by a job
//! (file source → blackhole, on the embedded cluster `weir run` starts) at
//! parallelism 1 and 2, beside, in the same run, a plain `BufRead` count of
//! the same files' lines on 1 and 2 threads (the ceiling: reading lines and
//! nothing else).
//!
//! ```sh
//! cargo run --release --workspace --bin file-source -- --files 8 --lines 500000
//! ```

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;

#[derive(Parser)]
struct Args {
    /// Files in the folder.
    #[arg(long, default_value_t = 8)]
    files: usize,
    /// Lines per file (about 60 bytes each).
    #[arg(long, default_value_t = 500_000)]
    lines: usize,
    /// Runs of each case; the best is reported.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Parallelisms of the job.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    parallelism: Vec<u32>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dir = tempfile::tempdir_in(std::env::temp_dir())?;
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data)?;
    let mut files = Vec::new();
    let mut bytes = 0u64;
    for f in 0..args.files {
        let path = data.join(format!("part-{f:03}.txt"));
        let mut w = std::io::BufWriter::new(std::fs::File::create(&path)?);
        for i in 0..args.lines {
            writeln!(w, "file {f:03} line {i:09} {}", "abcdefghij".repeat(4))?;
        }
        w.into_inner()?.sync_all()?;
        bytes += std::fs::metadata(&path)?.len();
        files.push(path);
    }
    let total = (args.files * args.lines) as u64;
    println!(
        "{} files, {} lines, {:.1} MB (page cache warm after the first read)",
        args.files,
        total,
        bytes as f64 / 1e6
    );
    // Warm the page cache once, so every case reads from memory.
    let _ = count_lines(&files, 1)?;
    println!("{:<44} {:>12} {:>10}", "case", "lines/s", "vs p=1 BufRead");
    let mut rows = Vec::new();
    for threads in [1usize, 2] {
        let best = best_of(args.repeat, || {
            let start = Instant::now();
            let n = count_lines(&files, threads)?;
            anyhow::ensure!(n == total, "counted {n} lines, wrote {total}");
            Ok(start.elapsed().as_secs_f64())
        })?;
        rows.push((
            format!("BufRead::read_until line count, {threads} thread(s)"),
            total as f64 / best,
        ));
    }
    for &p in &args.parallelism {
        let best = best_of(args.repeat, || {
            let (lines, secs) = run_job(&data, p)?;
            anyhow::ensure!(lines == total, "the job read {lines} lines, wrote {total}");
            Ok(secs)
        })?;
        rows.push((
            format!("weir file source → blackhole, p={p}"),
            total as f64 / best,
        ));
    }
    let base = rows[0].1;
    for (name, rate) in &rows {
        println!("{name:<44} {:>12.0} {:>9.2}x", rate, rate / base);
    }
    Ok(())
}

fn best_of(n: usize, mut f: impl FnMut() -> anyhow::Result<f64>) -> anyhow::Result<f64> {
    let mut best = f64::MAX;
    for _ in 0..n.max(1) {
        best = best.min(f()?);
    }
    Ok(best)
}

/// Lines of `files`, counted by `threads` threads (file `i` by thread
/// `i % threads`), each reading with `read_until` into a reused buffer.
fn count_lines(files: &[PathBuf], threads: usize) -> anyhow::Result<u64> {
    let counts: Vec<anyhow::Result<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || -> anyhow::Result<u64> {
                    let mut n = 0;
                    let mut line = Vec::new();
                    for f in files.iter().skip(t).step_by(threads) {
                        let mut r = BufReader::with_capacity(256 << 10, std::fs::File::open(f)?);
                        loop {
                            line.clear();
                            if r.read_until(b'\n', &mut line)? == 0 {
                                break;
                            }
                            n += 1;
                        }
                    }
                    Ok(n)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    counts.into_iter().sum()
}

/// Runs file source (`data`, parallelism `p`) → blackhole on an embedded
/// cluster; the lines the source emitted and the job's wall time (submit to
/// end, as the JobManager recorded them).
fn run_job(data: &Path, p: u32) -> anyhow::Result<(u64, f64)> {
    let (detail, elapsed) = weir_benches::embedded::run_spec(&format!(
        "[job]\nname = \"file-source\"\nparallelism = {p}\nstate_backend = \"heap\"\n\n\
             [[source]]\nid = \"files\"\ntype = \"file\"\npath = {data:?}\nsplit_bytes = 16777216\n\n\
             [[sink]]\nid = \"null\"\ntype = \"blackhole\"\n\n\
             [[edge]]\nfrom = \"files\"\nto = \"null\"\n",
        data = data.display().to_string(),
    ))?;
    let lines = detail
        .vertices
        .iter()
        .filter(|v| v.role == "source")
        .map(|v| v.records_out)
        .sum();
    Ok((lines, elapsed.as_secs_f64()))
}
