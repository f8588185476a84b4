//! File connectors are confined to allowed directories: a job spec cannot
//! read or write a file elsewhere, through a symlink out, a FIFO or a
//! device, whether it runs with `weir run` or on a cluster (refused at
//! submit by the JobManager, and again by the TaskManager that would open
//! the file). What sinks create is not readable by other users, and a line
//! longer than a source's cap fails the job instead of filling memory.
//! Network connectors (NATS, Kafka) likewise reach only the addresses
//! allowed with `--allow-address`, and a refused one is never contacted.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::cluster::harness::Cluster;
use crate::util::{assert_fails_with, describe, toml_path, weir};

/// file source `lines` → file sink `out`: no operator, so no module to load.
fn copy_spec(input: &Path, output: &Path) -> String {
    format!(
        r#"
[job]
name = "copy"

[[source]]
id = "lines"
type = "file"
path = {input}

[[sink]]
id = "out"
type = "file"
path = {output}

[[edge]]
from = "lines"
to = "out"
"#,
        input = toml_path(input),
        output = toml_path(output),
    )
}

/// Writes `spec` to `dir/job.toml` and runs `weir run` on it with `extra`
/// arguments; gives up (killing it) after two minutes: a FIFO must not hang.
fn run(dir: &Path, spec: &str, extra: &[&str]) -> Output {
    let path = dir.join("job.toml");
    std::fs::write(&path, spec).unwrap();
    let mut child = weir(&dir.join("cache"))
        .arg("run")
        .arg(&path)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("weir starts");
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("weir run did not end within 2 minutes\n{}", describe(&out));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// A job folder and, beside it, a folder with a secret that no root allows.
struct Setup {
    job: tempfile::TempDir,
    elsewhere: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        let setup = Setup {
            job: tempfile::tempdir().unwrap(),
            elsewhere: tempfile::tempdir().unwrap(),
        };
        std::fs::write(setup.job.path().join("in.txt"), "one\ntwo\n").unwrap();
        std::fs::write(setup.secret(), "the secret\n").unwrap();
        setup
    }

    fn dir(&self) -> &Path {
        self.job.path()
    }

    fn secret(&self) -> std::path::PathBuf {
        self.elsewhere.path().join("ca.key")
    }

    /// The names in the job's folder, but for the spec and the cache.
    fn outputs(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !["job.toml", "cache", "in.txt"].contains(&n.as_str()))
            .collect();
        names.sort();
        names
    }
}

#[test]
fn weir_run_refuses_a_source_outside_the_allowed_directories() {
    let s = Setup::new();
    let secret = s.secret();
    let out = run(s.dir(), &copy_spec(&secret, &s.dir().join("out.txt")), &[]);
    assert_fails_with(
        &out,
        2,
        &[
            "source `lines`",
            &secret.display().to_string(),
            "outside the directories allowed",
            "--allow-path",
        ],
    );
    assert_eq!(s.outputs(), Vec::<String>::new(), "nothing written");

    // Allowed with --allow-path.
    let elsewhere = s.elsewhere.path().display().to_string();
    let out = run(
        s.dir(),
        &copy_spec(&secret, &s.dir().join("out.txt")),
        &["--allow-path", &elsewhere],
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(
        std::fs::read_to_string(s.dir().join("out.txt")).unwrap(),
        "the secret\n"
    );
}

#[test]
fn weir_run_refuses_a_sink_outside_the_allowed_directories() {
    let s = Setup::new();
    let target = s.elsewhere.path().join("sub/stolen.txt");
    let out = run(s.dir(), &copy_spec(&s.dir().join("in.txt"), &target), &[]);
    assert_fails_with(
        &out,
        2,
        &[
            "sink `out`",
            &target.display().to_string(),
            "outside the directories allowed",
        ],
    );
    assert!(
        !s.elsewhere.path().join("sub").exists(),
        "no directory made"
    );
    // A `..` that climbs out is the same.
    let climb = s
        .dir()
        .join("..")
        .join(s.elsewhere.path().file_name().unwrap())
        .join("x.txt");
    let out = run(s.dir(), &copy_spec(&s.dir().join("in.txt"), &climb), &[]);
    assert_fails_with(&out, 2, &["sink `out`", "outside the directories allowed"]);
    assert!(!s.elsewhere.path().join("x.txt").exists());
}

#[test]
fn weir_run_refuses_a_symlink_out_of_the_allowed_directories() {
    let s = Setup::new();
    let link = s.dir().join("innocent.txt");
    std::os::unix::fs::symlink(s.secret(), &link).unwrap();
    let out = run(s.dir(), &copy_spec(&link, &s.dir().join("out.txt")), &[]);
    assert_fails_with(
        &out,
        2,
        &[
            "source `lines`",
            &link.display().to_string(),
            "outside the directories allowed",
        ],
    );
    assert_eq!(s.outputs(), vec!["innocent.txt".to_owned()]);

    // A sink never writes through a symlink, even one that stays inside.
    let alias = s.dir().join("alias.txt");
    std::os::unix::fs::symlink(s.dir().join("in.txt"), &alias).unwrap();
    let out = run(s.dir(), &copy_spec(&s.dir().join("in.txt"), &alias), &[]);
    assert_fails_with(&out, 2, &["sink `out`", "symbolic link"]);
    assert_eq!(
        std::fs::read_to_string(s.dir().join("in.txt")).unwrap(),
        "one\ntwo\n"
    );
}

#[test]
fn weir_run_refuses_a_fifo_source_without_hanging() {
    let s = Setup::new();
    let fifo = s.dir().join("pipe");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let out = run(s.dir(), &copy_spec(&fifo, &s.dir().join("out.txt")), &[]);
    assert_fails_with(&out, 2, &["source `lines`", "pipe", "a FIFO"]);
    assert_eq!(s.outputs(), vec!["pipe".to_owned()]);
    // A device: the same, even when its folder is allowed.
    let out = run(
        s.dir(),
        &copy_spec(Path::new("/dev/zero"), &s.dir().join("out.txt")),
        &["--allow-path", "/dev"],
    );
    assert_fails_with(&out, 2, &["source `lines`", "/dev/zero", "a device"]);
}

#[test]
fn sink_output_is_not_world_readable_and_a_rerun_replaces_it() {
    let s = Setup::new();
    let target = s.dir().join("out/copy.txt");
    let spec = copy_spec(&s.dir().join("in.txt"), &target);
    let out = run(s.dir(), &spec, &[]);
    assert!(out.status.success(), "{}", describe(&out));
    let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & 0o007, 0, "others may not read it: {mode:o}");
    assert_eq!(mode & 0o022, 0, "nobody else may write it: {mode:o}");

    // Run again on other input: the output is replaced, not appended to.
    std::fs::write(s.dir().join("in.txt"), "three\n").unwrap();
    let out = run(s.dir(), &spec, &[]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "three\n");
    let names: Vec<_> = std::fs::read_dir(s.dir().join("out"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["copy.txt"], "no temporary file left behind");
}

#[test]
fn a_line_over_max_record_bytes_fails_the_job_naming_source_file_and_line() {
    let s = Setup::new();
    let input = s.dir().join("long.txt");
    std::fs::write(&input, format!("short\n{}\nrest\n", "x".repeat(64))).unwrap();
    let out = run(
        s.dir(),
        &copy_spec(&input, &s.dir().join("out.txt")),
        &["--set", "source.lines.max_record_bytes=32"],
    );
    assert_fails_with(
        &out,
        1,
        &[
            "lines",
            &format!("{}:2:", input.display()),
            "longer than 32 bytes",
            "max_record_bytes",
        ],
    );
}

/// A cluster whose JobManager allows one more directory than its
/// TaskManager: a file outside both is refused at submit; a file the
/// JobManager allows but the TaskManager does not fails the job there.
#[test]
fn a_cluster_refuses_files_outside_its_allowed_directories() {
    let s = Setup::new();
    let jm_only = tempfile::tempdir().unwrap();
    let jm_only_path = jm_only.path().display().to_string();
    let cluster = Cluster::start(1, 1, &["--allow-path", &jm_only_path]);

    // Outside every root: refused at submit, exit 2, naming vertex and path.
    let spec = cluster.dir.path().join("steal.toml");
    let output = cluster.dir.path().join("stolen.txt");
    std::fs::write(&spec, copy_spec(&s.secret(), &output)).unwrap();
    let out = cluster.weir(&["submit", &spec.display().to_string()]);
    assert_fails_with(
        &out,
        2,
        &[
            "source `lines`",
            &s.secret().display().to_string(),
            "outside the directories allowed",
        ],
    );
    assert!(!output.exists());
    let (_, jobs) = cluster.get("/v1/jobs");
    assert_eq!(jobs.as_array().map(Vec::len), Some(0), "{jobs}");

    // Allowed by the JobManager only: the TaskManager refuses to open it.
    let input = jm_only.path().join("data.txt");
    std::fs::write(&input, "x\n").unwrap();
    std::fs::write(&spec, copy_spec(&input, &output)).unwrap();
    let id = cluster.submit(&spec);
    let job: Value = cluster.wait_job(&id, |s| s == "failed");
    let failure = job["failure"].as_str().unwrap_or_default();
    assert!(
        failure.contains("source `lines`")
            && failure.contains(&input.display().to_string())
            && failure.contains("outside the directories allowed"),
        "{job}"
    );
    assert!(!output.exists());
}

/// A NATS source `orders` and a Kafka sink `copies`, both at `host:port`.
fn network_spec(host: &str, port: u16) -> String {
    format!(
        r#"
[job]
name = "reach"

[[source]]
id = "orders"
type = "nats"
url = "nats://{host}:{port}"
stream = "ORDERS"

[[sink]]
id = "copies"
type = "kafka"
bootstrap_servers = "{host}:{port}"
topic = "copies"

[[edge]]
from = "orders"
to = "copies"
"#
    )
}

/// A listener nothing should connect to, and its port.
fn untouched_listener(host: &str) -> (std::net::TcpListener, u16) {
    let listener = std::net::TcpListener::bind((host, 0)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

fn assert_never_contacted(listener: &std::net::TcpListener) {
    let contacted = listener.accept();
    assert!(
        contacted
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        "something connected to the refused address: {contacted:?}"
    );
}

/// Network connectors reach only the addresses the cluster allows: the
/// test cluster allows 127.0.0.1 (`--allow-address`), so a job whose NATS
/// source and Kafka sink are at 127.0.0.2 is refused at submit, naming
/// both, and the JobManager never connects there (not even to probe).
#[test]
fn a_cluster_refuses_network_connectors_at_addresses_it_does_not_allow() {
    let (listener, port) = untouched_listener("127.0.0.2");
    let cluster = Cluster::start(1, 1, &[]);
    let spec = cluster.dir.path().join("reach.toml");
    std::fs::write(&spec, network_spec("127.0.0.2", port)).unwrap();
    let out = cluster.weir(&["submit", &spec.display().to_string()]);
    let refused = format!("`127.0.0.2:{port}` is not an address network connectors may reach");
    assert_fails_with(
        &out,
        2,
        &[
            &format!("source `orders`: {refused}"),
            &format!("sink `copies`: {refused}"),
            "--allow-address",
        ],
    );
    let (_, jobs) = cluster.get("/v1/jobs");
    assert_eq!(jobs.as_array().map(Vec::len), Some(0), "{jobs}");
    assert_never_contacted(&listener);
}

/// `weir run` allows any address unless told otherwise; with
/// `--allow-address` only those given.
#[test]
fn weir_run_with_allow_address_refuses_other_addresses() {
    let s = Setup::new();
    let (listener, port) = untouched_listener("127.0.0.1");
    let out = run(
        s.dir(),
        &network_spec("127.0.0.1", port),
        &[
            "--allow-address",
            "127.0.0.1:1",
            "--allow-address",
            "nats.example",
        ],
    );
    assert_fails_with(
        &out,
        2,
        &[
            &format!("source `orders`: `127.0.0.1:{port}` is not an address"),
            "--allow-address",
        ],
    );
    assert_never_contacted(&listener);
    // A rule that does not parse is an error naming it, before anything runs.
    let out = run(
        s.dir(),
        &network_spec("127.0.0.1", port),
        &["--allow-address", "127.0.0.1:http"],
    );
    assert_fails_with(&out, 2, &["--allow-address", "`127.0.0.1:http`", "port"]);
    assert_never_contacted(&listener);
}
