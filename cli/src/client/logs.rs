//! `weir logs JOB [--operator OP] [--subtask N] [--follow]`: what a job's
//! operators logged, from the JobManager (`GET /v1/jobs/{id}/logs`), one
//! line each with its time, level, operator and subtask.

use std::fmt::Write as _;

use super::*;
use weir_host::jobmanager::{JobLogsView, LogLineView};

/// How often `--follow` asks for new lines: about as often as
/// TaskManagers ship them (with their heartbeats).
const FOLLOW_INTERVAL: Duration = Duration::from_secs(1);

/// `weir logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The job's id (as `weir list` and `weir submit` print it).
    pub job: String,

    /// Only this operator's lines (its `id` in the job spec).
    #[arg(long, value_name = "OP")]
    pub operator: Option<String>,

    /// Only this subtask's lines (numbered from 0; with --operator, one
    /// of that operator's subtasks).
    #[arg(long, value_name = "N")]
    pub subtask: Option<u32>,

    /// Keep printing new lines as they arrive, until the job ends (or
    /// Ctrl-C).
    #[arg(long, short = 'f')]
    pub follow: bool,

    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// The request path for `args`, asking for lines after `after`.
pub(super) fn logs_path(args: &LogsArgs, after: u64) -> String {
    let mut path = format!("/v1/jobs/{}/logs?after={after}", path_segment(&args.job));
    if let Some(op) = &args.operator {
        let _ = write!(path, "&operator={}", path_segment(op));
    }
    if let Some(s) = args.subtask {
        let _ = write!(path, "&subtask={s}");
    }
    path
}

/// One line as `weir logs` prints it:
/// `2026-12-01 21:50:00.123 INFO  tokenize[0] the message`.
pub(super) fn log_line(l: &LogLineView) -> String {
    let ms = u64::try_from(l.time_ms).unwrap_or(0);
    format!(
        "{}.{:03} {:<5} {}[{}] {}",
        utc_time(ms),
        ms % 1000,
        l.level.as_str().to_uppercase(),
        l.operator,
        l.subtask,
        l.message
    )
}

/// Prints `view`'s lines, each as a line of text or (`json`) of JSON.
fn print_lines(view: &JobLogsView, json: bool) {
    for line in &view.lines {
        if json {
            println!(
                "{}",
                serde_json::to_string(line).expect("a log line serializes")
            );
        } else {
            println!("{}", log_line(line));
        }
    }
}

pub(super) fn logs(args: LogsArgs) -> Result<(), Failure> {
    let rest = args.connect.rest()?;
    let mut after = 0u64;
    let mut dropped = 0u64;
    loop {
        let v = rest.get(&logs_path(&args, after))?;
        let view: JobLogsView = decode(v.clone(), "log lines")?;
        if args.connect.json && !args.follow {
            print_json(&v);
            return Ok(());
        }
        print_lines(&view, args.connect.json);
        after = view.next;
        if view.dropped > dropped {
            eprintln!(
                "({} line(s) of these subtasks were dropped: logged faster than their rate \
                 limit, or pushed out of their TaskManager's ring before they were sent)",
                view.dropped - dropped
            );
            dropped = view.dropped;
        }
        if view.more {
            continue;
        }
        if !args.follow {
            return Ok(());
        }
        let job: JobSummary = decode(
            rest.get(&format!("/v1/jobs/{}", path_segment(&args.job)))?,
            "job",
        )?;
        if job.state.is_terminal() {
            // The last lines arrive with the final reports, before the
            // job ends: one more look, then done.
            let v = rest.get(&logs_path(&args, after))?;
            let view: JobLogsView = decode(v, "log lines")?;
            print_lines(&view, args.connect.json);
            return Ok(());
        }
        std::thread::sleep(FOLLOW_INTERVAL);
    }
}
