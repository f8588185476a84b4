//! Nexmark under kill -9 (issue 16): q5 (sliding windows) and q7 (tumbling
//! windows) run on a two-TaskManager cluster with checkpoints while
//! TaskManagers are killed with SIGKILL and restarted, three times per
//! query; the committed output must equal DuckDB's over the same events,
//! line for line: no window lost, none counted twice, none fired early.
//!
//! The jobs are the committed specs of `udfs/jobs/nexmark/`, changed only by
//! `weir submit --set` (checkpoints, restarts, a throttle so the kills land
//! mid-run, the sink's path): what a user would submit.

use std::path::Path;

use super::cluster::harness::Cluster;
use crate::exactly_once::{committed_lines, kill_repeatedly, restores};
use crate::nexmark::{EVENTS, assert_same_lines, nexmark_dir, oracle, run_job};

const KILLS: usize = 3;

/// Submits the committed spec `query.toml` with checkpoints every 300 ms,
/// unlimited restarts and the generator throttled to `rate` events/s;
/// returns the job id.
fn submit(cluster: &Cluster, query: &str, out: &Path, rate: u64) -> String {
    let spec = nexmark_dir().join(format!("{query}.toml"));
    let sets = [
        format!("source.events.count={EVENTS}"),
        format!("source.events.rate={rate}"),
        "job.parallelism=2".to_owned(),
        "job.checkpoints.interval_ms=300".to_owned(),
        "job.restart.strategy=fixed-delay".to_owned(),
        "job.restart.attempts=100".to_owned(),
        "job.restart.delay_ms=200".to_owned(),
        format!("sink.out.path={}", out.display()),
    ];
    let options: Vec<&str> = sets.iter().flat_map(|s| ["--set", s.as_str()]).collect();
    cluster.submit_with(&spec, &options)
}

#[test]
fn q5_and_q7_under_taskmanager_kills_equal_duckdb() {
    let mut cluster = Cluster::start(2, 2, &["--heartbeat-timeout-ms", "2000"]);
    let dir = cluster.dir.path().to_owned();
    let events = dir.join("events.jsonl");
    run_job(&dir, "generate", &events, &[]);
    for query in ["q5", "q7"] {
        let out = dir.join(format!("out/{query}.txt"));
        // 100,000 events at 4,000/s: 25 s of input, time for three kills.
        let id = submit(&cluster, query, &out, 4_000);
        kill_repeatedly(&mut cluster, &id, KILLS);
        let job = cluster.wait_job(&id, |s| s == "finished" || s == "failed");
        assert_eq!(job["state"], "finished", "{query}: {job}");
        assert!(
            restores(&cluster, &id) >= KILLS,
            "{query}: restored fewer than {KILLS} times"
        );
        let mut got = committed_lines(&out);
        got.sort();
        let want = oracle(&events, query);
        assert!(
            want.len() >= 10,
            "{query}: the oracle found {} windows",
            want.len()
        );
        assert_same_lines(query, &got, &want);
    }
}
