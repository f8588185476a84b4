//! How the client prints: tables of modules, jobs and TaskManagers, the
//! job report of `weir status`, and the human forms of bytes, durations
//! and times. Pure: the tests cover them without a server.

use super::*;

/// `name@version  sha256:…  size`.
pub(super) fn module_line(m: &ModuleInfo) -> String {
    format!(
        "{}@{}  {}  {}",
        m.name,
        m.version,
        m.hash,
        human_bytes(m.size)
    )
}

pub(super) fn modules_table(modules: &[ModuleInfo]) -> String {
    let rows = modules
        .iter()
        .map(|m| {
            let hex = m.hash.strip_prefix("sha256:").unwrap_or(&m.hash);
            vec![
                m.name.clone(),
                m.version.clone(),
                hex.chars().take(12).collect(),
                human_bytes(m.size),
                utc_time(m.uploaded_at_ms),
            ]
        })
        .collect();
    table(
        &["NAME", "VERSION", "HASH", "SIZE", "UPLOADED (UTC)"],
        &[
            Align::Left,
            Align::Left,
            Align::Left,
            Align::Right,
            Align::Left,
        ],
        rows,
    )
}

pub(super) fn jobs_table(jobs: &[JobSummary], now_ms: u64) -> String {
    let rows = jobs
        .iter()
        .map(|j| {
            vec![
                j.id.clone(),
                j.name.clone(),
                j.state.as_str().to_owned(),
                utc_time(j.submitted_at_ms),
                job_duration(j, now_ms),
            ]
        })
        .collect();
    table(
        &["ID", "NAME", "STATE", "SUBMITTED (UTC)", "DURATION"],
        &[
            Align::Left,
            Align::Left,
            Align::Left,
            Align::Left,
            Align::Right,
        ],
        rows,
    )
}

pub(super) fn job_duration(j: &JobSummary, now_ms: u64) -> String {
    let end = j.ended_at_ms.unwrap_or(now_ms);
    human_duration(end.saturating_sub(j.submitted_at_ms))
}

pub(super) fn job_report(detail: &JobDetail, now_ms: u64) -> String {
    let job = &detail.summary;
    let mut out = format!(
        "job {} `{}`: {} (submitted {} UTC, {}{})\n",
        job.id,
        job.name,
        job.state.as_str(),
        utc_time(job.submitted_at_ms),
        if job.ended_at_ms.is_some() {
            "ran "
        } else {
            "running for "
        },
        job_duration(job, now_ms),
    );
    if let Some(f) = &job.failure {
        let _ = writeln!(out, "failure: {f}");
    }
    if let Some(b) = &detail.bottleneck {
        let _ = writeln!(out, "why this speed: {}", b.message);
    }
    // Earlier failures (the current one is above), newest first.
    let earlier: Vec<_> = detail
        .exceptions
        .iter()
        .filter(|x| job.failure.as_deref() != Some(x.root_cause.as_str()))
        .take(MAX_EXCEPTIONS_SHOWN)
        .collect();
    if !earlier.is_empty() {
        let _ = writeln!(
            out,
            "exceptions ({} in all, newest first):",
            detail.exceptions.len()
        );
        for x in earlier {
            let _ = writeln!(
                out,
                "  {} UTC attempt {}: {}",
                utc_time(x.time_ms),
                x.attempt,
                x.root_cause
            );
        }
    }
    if let Some(from) = &detail.from_savepoint {
        let _ = writeln!(out, "started from savepoint {from}");
    }
    for sp in &detail.savepoints {
        let _ = writeln!(
            out,
            "savepoint {}{}: {} ({}){}",
            sp.dir,
            if sp.stop { " (stop)" } else { "" },
            sp.status.as_str(),
            human_bytes(sp.bytes),
            sp.failure
                .as_deref()
                .map(|f| format!(": {f}"))
                .unwrap_or_default()
        );
    }
    if let Some(current) = detail.versions.last().filter(|_| detail.versions.len() > 1) {
        let _ = writeln!(
            out,
            "version {} since {} UTC (upgrade {}): {}",
            current.version,
            utc_time(current.since_ms),
            current.upgrade.unwrap_or(0),
            current
                .modules
                .iter()
                .map(|m| format!("{}={} ({})", m.operator, m.module, m.version))
                .collect::<Vec<_>>()
                .join(", ")
        );
    } else if let Some(first) = detail.versions.first() {
        let _ = writeln!(
            out,
            "modules: {}",
            first
                .modules
                .iter()
                .map(|m| format!("{}={} ({})", m.operator, m.module, m.version))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for up in &detail.upgrades {
        let _ = writeln!(
            out,
            "upgrade {}: {}{}{}",
            up.id,
            up.status.as_str(),
            up.downtime_ms
                .map(|d| format!(", down {d} ms"))
                .unwrap_or_default(),
            up.failure
                .as_deref()
                .map(|f| format!(": {f}"))
                .unwrap_or_default()
        );
    }
    if detail.vertices.is_empty() {
        return out;
    }
    out.push('\n');
    let rows = detail
        .vertices
        .iter()
        .map(|v| {
            // The last seconds' shares while the job runs (what the
            // diagnosis above judged), else the attempt's.
            let total = v.busy_ms + v.backpressured_ms + v.idle_ms;
            let share = |recent: Option<f64>, part: u64| match recent {
                Some(r) => format!("{:.0}", r * 100.0),
                None => percent(part, total),
            };
            vec![
                v.id.clone(),
                v.role.clone(),
                v.parallelism.to_string(),
                v.state.as_str().to_owned(),
                v.records_in.to_string(),
                v.records_out.to_string(),
                share(v.busy_ratio, v.busy_ms),
                share(v.backpressured_ratio, v.backpressured_ms),
                watermark(v.watermark),
            ]
        })
        .collect();
    use Align::*;
    out.push_str(&table(
        &[
            "VERTEX",
            "ROLE",
            "PAR",
            "STATE",
            "IN",
            "OUT",
            "BUSY%",
            "BACKPRESSURED%",
            "WATERMARK",
        ],
        &[Left, Left, Right, Left, Right, Right, Right, Right, Right],
        rows,
    ));
    let rows: Vec<Vec<String>> = detail
        .vertices
        .iter()
        .flat_map(|v| {
            v.subtasks.iter().map(|s| {
                vec![
                    format!("{}[{}]", v.id, s.index),
                    s.taskmanager.clone(),
                    s.state.as_str().to_owned(),
                ]
            })
        })
        .collect();
    if !rows.is_empty() {
        out.push('\n');
        out.push_str(&table(
            &["SUBTASK", "TASKMANAGER", "STATE"],
            &[Left, Left, Left],
            rows,
        ));
    }
    out
}

/// Earlier failures `weir status` lists (the UI shows them all).
const MAX_EXCEPTIONS_SHOWN: usize = 5;

pub(super) fn percent(part: u64, total: u64) -> String {
    if total == 0 {
        "-".into()
    } else {
        format!("{:.0}", part as f64 * 100.0 / total as f64)
    }
}

pub(super) fn taskmanagers_table(tms: &[TaskManagerInfo]) -> String {
    let rows = tms
        .iter()
        .map(|t| {
            vec![
                t.id.clone(),
                t.data_address.clone(),
                format!("{}/{}", t.slots_free, t.slots_total),
                t.state.clone(),
                format!("{} ago", human_duration(t.last_heartbeat_ms_ago)),
            ]
        })
        .collect();
    table(
        &["ID", "ADDRESS", "SLOTS", "STATE", "LAST-HEARTBEAT"],
        &[
            Align::Left,
            Align::Left,
            Align::Right,
            Align::Left,
            Align::Right,
        ],
        rows,
    )
}

/// Column alignment in [`table`].
#[derive(Debug, Clone, Copy)]
pub(super) enum Align {
    Left,
    Right,
}

/// A plain-text table: columns two spaces apart, each as wide as its widest
/// cell, no trailing spaces.
pub(super) fn table(headers: &[&str], align: &[Align], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            let pad = widths[i].saturating_sub(cell.chars().count());
            match align.get(i).copied().unwrap_or(Align::Left) {
                Align::Left => {
                    line.push_str(cell);
                    line.extend(std::iter::repeat_n(' ', pad));
                }
                Align::Right => {
                    line.extend(std::iter::repeat_n(' ', pad));
                    line.push_str(cell);
                }
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `512 B`, `1.5 KiB`, `12.0 MiB`.
pub(crate) fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// `850ms`, `12.3s`, `4m05s`, `2h03m`, `3d04h`.
pub(super) fn human_duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        _ if ms < 1000 => format!("{ms}ms"),
        0..60 => format!("{:.1}s", ms as f64 / 1000.0),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// Unix ms as `YYYY-MM-DD HH:MM:SS` in UTC (`-` for 0, "unknown").
pub(super) fn utc_time(ms: u64) -> String {
    if ms == 0 {
        return "-".into();
    }
    let secs = ms / 1000;
    let (days, rem) = (secs / 86400, secs % 86400);
    // Howard Hinnant's civil_from_days, for days since 1970-01-01.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A watermark for people: `-` before the first, `end` after the last,
/// else its milliseconds since the epoch.
fn watermark(w: Option<i64>) -> String {
    match w {
        None | Some(i64::MIN) => "-".to_owned(),
        Some(i64::MAX) => "end".to_owned(),
        Some(ms) => ms.to_string(),
    }
}
