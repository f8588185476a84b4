//! The REST API over TLS (`weir jobmanager --rest-tls`): a client that
//! trusts the cluster's CA (`--ca`) is served; one without it is refused
//! before connecting, one trusting another CA fails the handshake, and
//! plain HTTP gets nothing from the TLS port.

use std::process::Command;

use crate::cluster::harness::{Daemon, client_command, parse_ready};
use crate::util::describe;

fn init_certs(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let certs = dir.join(name);
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["cluster", "init"])
        .arg(&certs)
        .output()
        .expect("weir cluster init runs");
    assert!(out.status.success(), "{}", describe(&out));
    certs
}

#[test]
fn an_https_jobmanager_serves_clients_that_trust_the_cluster_ca_only() {
    let dir = tempfile::tempdir().unwrap();
    let certs = init_certs(dir.path(), "certs");
    let other = init_certs(dir.path(), "other-certs");
    let args: Vec<String> = [
        "jobmanager",
        "--rpc",
        "127.0.0.1:0",
        "--rest",
        "127.0.0.1:0",
        "--rest-tls",
        "--data-dir",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        dir.path().join("jm").display().to_string(),
        "--certs".into(),
        certs.display().to_string(),
    ])
    .collect();
    let mut jm = Daemon::spawn(dir.path(), "jobmanager", &args);
    let line = jm.wait_line("jobmanager ready");
    let (_, rest, token_file) = parse_ready(&line);
    assert!(rest.starts_with("https://"), "{line}");
    let token_file = token_file.expect("a generated token");
    let weir = |extra: &[&str]| {
        let mut cmd = client_command(dir.path());
        cmd.args(extra)
            .env("WEIR_JOBMANAGER", &rest)
            .env("WEIR_REST_TOKEN_FILE", &token_file);
        cmd.output().expect("weir runs")
    };

    // Trusting the cluster's CA: served.
    let ca = certs.join("ca.pem").display().to_string();
    let listed = weir(&["taskmanagers", "--json", "--ca", &ca]);
    assert!(listed.status.success(), "{}", describe(&listed));
    assert_eq!(String::from_utf8_lossy(&listed.stdout).trim(), "[]");

    // No CA: refused before connecting, saying what to give.
    let no_ca = weir(&["taskmanagers"]);
    assert_eq!(no_ca.status.code(), Some(2), "{}", describe(&no_ca));
    assert!(
        String::from_utf8_lossy(&no_ca.stderr).contains("--ca FILE"),
        "{}",
        describe(&no_ca)
    );

    // Another cluster's CA: the handshake fails.
    let foreign = other.join("ca.pem").display().to_string();
    let refused = weir(&["taskmanagers", "--ca", &foreign]);
    assert!(!refused.status.success(), "{}", describe(&refused));

    // Plain HTTP to the TLS port gets no answer.
    let plain = rest.replacen("https://", "http://", 1);
    let mut cmd = client_command(dir.path());
    cmd.args(["taskmanagers"])
        .env("WEIR_JOBMANAGER", &plain)
        .env("WEIR_REST_TOKEN_FILE", &token_file);
    let http = cmd.output().expect("weir runs");
    assert!(!http.status.success(), "{}", describe(&http));

    jm.terminate();
}
