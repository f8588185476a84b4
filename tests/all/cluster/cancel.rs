//! Cancel reaches into a running guest call: a spinning operator with the
//! longest allowed deadline is interrupted by the cancel, not by its
//! deadline, and its slot comes back.

use std::path::Path;

use weir_tests::artifacts;

use super::harness::{Cluster, wait_for};
use crate::util::{describe, endless_spec};

/// The largest `call_timeout_ms` a job may ask for: without the cancel
/// check at every epoch tick the spinner would hold its slot this long.
const DEADLINE_MS: u64 = 60_000;

#[test]
fn cancel_interrupts_a_spinning_operator_and_frees_its_slot() {
    let cluster = Cluster::start(1, 1, &[]);
    let spec = cluster.dir.path().join("spin.toml");
    std::fs::write(
        &spec,
        endless_spec(
            "spinner",
            &format!("[job.limits]\ncall_timeout_ms = {DEADLINE_MS}"),
            Path::new(artifacts::SPIN),
            1000,
        ),
    )
    .unwrap();
    let id = cluster.submit(&spec);
    // The source has handed records to the chained spinner.
    wait_for("the source to emit", || {
        let (_, job) = cluster.get(&format!("/v1/jobs/{id}"));
        let source = job["vertices"]
            .as_array()?
            .iter()
            .find(|v| v["id"] == "gen")?
            .clone();
        (source["records_out"].as_u64()? > 0).then_some(())
    });
    assert_eq!(cluster.taskmanager("tm-1")["slots_free"], 0);

    let cancel = cluster.weir(&["cancel", &id]);
    assert!(cancel.status.success(), "{}", describe(&cancel));
    let job = cluster.wait_job(&id, |s| s == "canceled" || s == "failed");
    assert_eq!(job["state"], "canceled", "{job}");
    wait_for("the slot to be free again", || {
        (cluster.taskmanager("tm-1")["slots_free"] == 1).then_some(())
    });
    // Ordering, not speed: the call ended because of the cancel. Had it run
    // to its deadline, the TaskManager would have logged `out of time`.
    let log = cluster.tms[0].stderr_text();
    assert!(
        !log.contains("out of time") && !log.contains("longer than its deadline"),
        "the spinner ran to its deadline instead of being interrupted:\n{log}"
    );
}
