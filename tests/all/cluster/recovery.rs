//! A JobManager killed and started again takes its jobs back: each running
//! job restarts from its latest checkpoint once the TaskManagers have
//! registered again, with its output still exactly once; ended jobs stay
//! ended; metadata the JobManager did not write is not restored.

use serde_json::Value;

use super::harness::{Cluster, wait_for};
use crate::exactly_once::{assert_exactly_once, assert_storage_holds_only_retained, sequence_spec};

/// The newest checkpoint of job `id` whose metadata is in storage, if any.
fn latest(cluster: &Cluster, id: &str) -> Option<u64> {
    let (_, v) = cluster.get(&format!("/v1/jobs/{id}/checkpoints"));
    v["latest"].as_u64()
}

/// Waits until job `id` runs with a checkpoint newer than `after` in
/// storage; returns it.
fn running_with_checkpoint_after(cluster: &Cluster, id: &str, after: u64) -> u64 {
    wait_for(
        &format!("job {id} running with a checkpoint after {after}"),
        || {
            let (_, job) = cluster.get(&format!("/v1/jobs/{id}"));
            assert_ne!(job["state"], "failed", "the job failed: {job}");
            assert_ne!(
                job["state"], "finished",
                "the job finished too soon; make it longer"
            );
            let running = job["state"] == "running"
                && job["vertices"]
                    .as_array()?
                    .iter()
                    .all(|v| v["state"] == "running");
            latest(cluster, id).filter(|n| running && *n > after)
        },
    )
}

/// The checkpoint job `id`'s newest restore started from (`None`: from
/// scratch), once it has one.
fn restored_from(cluster: &Cluster, id: &str) -> Option<u64> {
    wait_for(&format!("job {id} restored"), || {
        let (status, v) = cluster.get(&format!("/v1/jobs/{id}/checkpoints"));
        assert_eq!(status, 200, "job {id} is known again: {v}");
        let restore = v["restores"].as_array()?.last()?.clone();
        Some(restore["checkpoint"].as_u64())
    })
}

/// The acceptance test: SIGKILL the JobManager twice while a checkpointed
/// job runs on two TaskManagers. Each time the restarted JobManager takes
/// the job back from the checkpoint it last stored (never from scratch);
/// every record is committed exactly once and the per-key sequence checker
/// never saw a gap or a repeat; storage holds only the retained
/// checkpoints. A job canceled before the kill stays canceled-and-gone.
#[test]
fn a_killed_jobmanager_takes_its_running_jobs_back_exactly_once() {
    let mut cluster = Cluster::start(2, 2, &["--heartbeat-timeout-ms", "3000"]);
    let out = cluster.dir.path().join("out/seq.txt");
    let alerts = cluster.dir.path().join("out/alerts.txt");
    let spec = cluster.dir.path().join("job.toml");
    let count = 80_000;
    std::fs::write(&spec, sequence_spec(&out, &alerts, count, 26, 4_000)).unwrap();
    let id = cluster.submit(&spec);

    // Another job, canceled: a restarted JobManager does not run it again.
    let other_out = cluster.dir.path().join("out/other.txt");
    let other_alerts = cluster.dir.path().join("out/other-alerts.txt");
    let other_spec = cluster.dir.path().join("other.toml");
    std::fs::write(
        &other_spec,
        sequence_spec(&other_out, &other_alerts, 1_000_000, 2, 100),
    )
    .unwrap();
    let other = cluster.submit(&other_spec);
    cluster.wait_deployed(&other);
    let canceled = cluster.weir(&["cancel", &other]);
    assert!(
        canceled.status.success(),
        "{}",
        crate::util::describe(&canceled)
    );
    cluster.wait_job(&other, |s| s == "canceled");

    let mut seen = 0;
    for round in 0..2 {
        seen = running_with_checkpoint_after(&cluster, &id, seen);
        let ready = cluster.restart_jobmanager();
        assert!(ready.contains("jobmanager ready"), "{ready}");
        let from = restored_from(&cluster, &id);
        assert!(
            from.is_some_and(|n| n >= seen),
            "round {round}: restored from {from:?}, the newest stored checkpoint was {seen}"
        );
        let stderr = cluster.jm.stderr_text();
        assert!(
            stderr.contains(&format!("job {id} (exactly-once) taken back")),
            "{stderr}"
        );
    }
    let job = cluster.wait_job(&id, |s| s == "finished" || s == "failed");
    assert_eq!(job["state"], "finished", "{job}");
    assert_exactly_once(&out, &alerts, count);
    assert_storage_holds_only_retained(&cluster, &id);

    let (status, _) = cluster.get(&format!("/v1/jobs/{other}"));
    assert_eq!(status, 404, "the canceled job is not taken back");
    let (_, jobs) = cluster.get("/v1/jobs");
    let listed: Vec<&Value> = jobs.as_array().unwrap().iter().collect();
    assert_eq!(listed.len(), 1, "{jobs}");
    // Its record is gone with it: nothing is left for a third start.
    let records = std::fs::read_dir(cluster.dir.path().join("jm/jobs"))
        .unwrap()
        .count();
    assert_eq!(records, 0, "a finished job's record is deleted");
}

/// Metadata rewritten in checkpoint storage while the JobManager was down
/// (storage TaskManagers can write to) does not match the tag made with
/// the JobManager's key: the restarted JobManager restores the checkpoint
/// before it, and says why.
#[test]
fn a_restarted_jobmanager_does_not_restore_metadata_it_did_not_write() {
    let mut cluster = Cluster::start(1, 2, &[]);
    let out = cluster.dir.path().join("out/seq.txt");
    let alerts = cluster.dir.path().join("out/alerts.txt");
    let spec = cluster.dir.path().join("job.toml");
    std::fs::write(&spec, sequence_spec(&out, &alerts, 10_000_000, 2, 2_000)).unwrap();
    let id = cluster.submit(&spec);
    let first = running_with_checkpoint_after(&cluster, &id, 0);
    let newest = running_with_checkpoint_after(&cluster, &id, first);

    // Killed: a TaskManager-side writer swaps one subtask's part for one of
    // an older checkpoint, in otherwise well-formed metadata.
    cluster.jm.kill();
    let chk = cluster.dir.path().join(format!("jm/checkpoints/{id}"));
    let newest = (newest..newest + 50)
        .rev()
        .find(|n| chk.join(format!("chk-{n}/_metadata")).exists())
        .unwrap();
    let path = chk.join(format!("chk-{newest}/_metadata"));
    let mut metadata: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    metadata["completed_at_ms"] = Value::from(metadata["completed_at_ms"].as_u64().unwrap() + 1);
    std::fs::write(&path, serde_json::to_vec(&metadata).unwrap()).unwrap();

    cluster.restart_jobmanager();
    let from = restored_from(&cluster, &id);
    assert!(
        from.is_some_and(|n| n < newest),
        "restored from {from:?}, not from the rewritten {newest}"
    );
    let stderr = cluster.jm.stderr_text();
    assert!(stderr.contains("does not match its tag"), "{stderr}");
    let canceled = cluster.weir(&["cancel", &id]);
    assert!(
        canceled.status.success(),
        "{}",
        crate::util::describe(&canceled)
    );
}
