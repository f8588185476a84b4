//! Identities bound to certificates (issue 10, finding 8): a TaskManager
//! registers only under the id its certificate names, so another
//! TaskManager's certificate cannot take over a registered id and disturb
//! the jobs running under it.

use std::path::Path;

use weir_host::net::tls::{JOBMANAGER_NAME, NodeIdentity, endpoint};
use weir_host::rpc::{ToJobManager, ToTaskManager, read_frame, write_frame};
use weir_tests::artifacts;

use super::harness::{Cluster, Daemon, wait_for};
use crate::util::describe;

/// What the second TaskManager hears when it registers as `id` with the
/// certificate `node` in `certs`: it speaks the protocol itself, as an
/// attacker holding that certificate would, so that no check of the
/// `weir` binary's own stands in the way.
fn register_as(certs: &Path, node: &str, rpc: &str, id: &str) -> ToTaskManager {
    let identity = NodeIdentity::load(certs, node).expect("certificate");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let ep = endpoint("127.0.0.1:0".parse().unwrap(), &identity).unwrap();
        let conn = ep
            .connect(rpc.parse().unwrap(), JOBMANAGER_NAME)
            .unwrap()
            .await
            .expect("the handshake succeeds: the certificate is the cluster's");
        let (mut send, mut recv) = conn.open_bi().await.unwrap();
        write_frame(
            &mut send,
            &ToJobManager::Register {
                id: id.to_owned(),
                slots: 1,
                data_address: ep.local_addr().unwrap(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
            },
        )
        .await
        .unwrap();
        read_frame::<_, ToTaskManager>(&mut recv)
            .await
            .expect("an answer")
            .expect("an answer")
    })
}

#[test]
fn a_second_taskmanager_cannot_take_over_a_registered_id() {
    let cluster = Cluster::start(1, 1, &[]);
    let spec = cluster.dir.path().join("endless.toml");
    std::fs::write(
        &spec,
        crate::util::endless_spec("endless", "", Path::new(artifacts::UPPERCASE), 1000),
    )
    .unwrap();
    let id = cluster.submit(&spec);
    cluster.wait_job(&id, |s| s == "running");
    let emitted = || {
        let (_, job) = cluster.get(&format!("/v1/jobs/{id}"));
        job["vertices"]
            .as_array()
            .and_then(|v| v.iter().find(|v| v["id"] == "gen"))
            .and_then(|v| v["records_out"].as_u64())
            .unwrap_or(0)
    };
    wait_for("the job to make progress", || (emitted() > 0).then_some(()));

    // Another TaskManager's certificate, from the same CA.
    let certs = cluster.certs();
    let out = cluster.weir(&[
        "cluster",
        "issue",
        &certs.display().to_string(),
        "--taskmanager",
        "tm-2",
    ]);
    assert!(out.status.success(), "{}", describe(&out));

    // The `weir` binary will not even try.
    let args: Vec<String> = [
        "taskmanager",
        "--jobmanager",
        &cluster.rpc,
        "--id",
        "tm-1",
        "--node-name",
        "taskmanager-tm-2",
        "--data-dir",
        &cluster.dir.path().join("impostor").display().to_string(),
        "--certs",
        &certs.display().to_string(),
    ]
    .map(str::to_owned)
    .to_vec();
    let impostor = Daemon::spawn(cluster.dir.path(), "impostor", &args);
    impostor.wait_stderr("the certificate is TaskManager `tm-2`'s");

    // A client of its own making is refused by the JobManager, twice.
    for _ in 0..2 {
        match register_as(&certs, "taskmanager-tm-2", &cluster.rpc, "tm-1") {
            ToTaskManager::Rejected { reason } => assert!(
                reason.contains("TaskManager `tm-2`'s certificate cannot register as `tm-1`"),
                "{reason}"
            ),
            other => panic!("registered: {other:?}"),
        }
    }
    // So is the JobManager's own certificate: it is no TaskManager's.
    assert!(
        std::panic::catch_unwind(|| register_as(&certs, "jobmanager", &cluster.rpc, "tm-1"))
            .is_err(),
        "the JobManager's certificate is a server certificate only"
    );

    // tm-1 and its job are undisturbed: still registered (never lost, never
    // replaced), and the job still running and making progress.
    let before = emitted();
    wait_for("the job to make more progress", || {
        (emitted() > before).then_some(())
    });
    let (_, job) = cluster.get(&format!("/v1/jobs/{id}"));
    assert_eq!(job["state"], "running", "{job}");
    let tm = cluster.taskmanager("tm-1");
    assert_eq!(tm["state"], "active", "{tm}");
    // The JobManager logs the refusal once the rejection was delivered,
    // so after the client saw it: wait for the line, do not race it.
    let jm = cluster.jm.wait_stderr("cannot register as `tm-1`");
    assert!(!jm.contains("lost"), "{jm}");
}
