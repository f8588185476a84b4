//! Real daemons as separate processes: a JobManager and TaskManagers started
//! from the `weir` binary on 127.0.0.1 with port 0, readiness awaited from
//! the lines they print, REST queried over HTTP. Every process is killed
//! (and reaped) when its handle drops, so a failing test leaves none behind.
//!
//! The JobManager requires a REST token (by default the one it generates
//! into its data dir and names in its readiness line): the harness reads it
//! from there, sends it with its own requests and points the `weir` client
//! commands at the file (`WEIR_REST_TOKEN_FILE`), never at the token.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Generous: the test machine is a loaded 2-core box.
pub const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// A daemon process with its stdout lines on a channel and stderr in a file.
pub struct Daemon {
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr: PathBuf,
    /// Every stdout line seen so far.
    pub seen: Vec<String>,
}

impl Daemon {
    /// Starts `weir args...`; `name` names its stderr file in `dir`.
    pub fn spawn(dir: &Path, name: &str, args: &[String]) -> Daemon {
        let stderr = dir.join(format!("{name}.stderr"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(args)
            .env("RUST_LOG", "info")
            .env_remove("WEIR_REST_TOKEN")
            .env_remove("WEIR_REST_TOKEN_FILE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("weir starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Daemon {
            child,
            lines,
            stderr,
            seen: Vec::new(),
        }
    }

    /// Waits for a stdout line containing `needle`; returns it.
    pub fn wait_line(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "no line containing {needle:?} on stdout within {READY_TIMEOUT:?}; \
                     stdout so far: {:?}\n--- stderr\n{}",
                    self.seen,
                    self.stderr_text()
                ),
            }
        }
    }

    /// Its stderr so far.
    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits until its stderr contains `needle`.
    pub fn wait_stderr(&self, needle: &str) -> String {
        wait_for(&format!("{needle:?} on stderr"), || {
            let text = self.stderr_text();
            text.contains(needle).then_some(text)
        })
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, and wait for the exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        self.child.wait().expect("daemon exits")
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Polls `check` until it yields a value (a readiness condition, checked
/// every 50 ms), panicking after [`READY_TIMEOUT`].
pub fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The `--allow-path` and `--allow-address` flags every daemon of a
/// [`Cluster`] gets: its temporary directory (job outputs), the bundled
/// data, and any port on 127.0.0.1 (the tests' NATS servers and Kafka
/// brokers).
fn allow_paths(dir: &Path) -> Vec<String> {
    vec![
        "--allow-path".into(),
        dir.display().to_string(),
        "--allow-path".into(),
        crate::util::data_dir().display().to_string(),
        "--allow-address".into(),
        "127.0.0.1".into(),
    ]
}

/// Lines of each daemon's stderr a failed test prints.
const FAILURE_LOG_LINES: usize = 60;

/// A test that fails on a cluster prints the end of every daemon's stderr
/// (the folder that holds them goes with the cluster), so a failure on CI
/// says what the JobManager and the TaskManagers did.
impl Drop for Cluster {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for (name, daemon) in std::iter::once(("jobmanager".to_owned(), &self.jm)).chain(
            self.tms
                .iter()
                .enumerate()
                .map(|(i, tm)| (format!("taskmanager {i}"), tm)),
        ) {
            let text = daemon.stderr_text();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(FAILURE_LOG_LINES)..];
            eprintln!(
                "--- the last {} stderr lines of the {name}:\n{}",
                tail.len(),
                tail.join("\n")
            );
        }
    }
}

/// A JobManager with TaskManagers, each a process.
pub struct Cluster {
    /// Holds certificates, data dirs, stderr files and job outputs.
    pub dir: tempfile::TempDir,
    /// The JobManager.
    pub jm: Daemon,
    /// Its RPC address.
    pub rpc: String,
    /// Its REST base URL.
    pub rest: String,
    /// The token its REST API requires (`None` with
    /// `--rest-insecure-loopback`).
    pub token: Option<String>,
    /// The file it generated the token into (`None` when the token was
    /// given with `--rest-token`, or there is none).
    pub token_file: Option<PathBuf>,
    /// TaskManagers, in start order.
    pub tms: Vec<Daemon>,
    agent: ureq::Agent,
    next_tm: usize,
    /// The command line of each TaskManager (to restart it).
    tm_args: Vec<(String, Vec<String>)>,
    /// The JobManager's command line (to restart it).
    jm_args: Vec<String>,
    /// How often the JobManager was restarted.
    jm_restarts: usize,
}

impl Cluster {
    /// Starts a JobManager (with `jm_args` added) and `taskmanagers`
    /// TaskManagers of `slots` slots each, and waits until all registered.
    /// Every daemon allows file connectors in the cluster's directory and
    /// the bundled data ([`allow_paths`]).
    pub fn start(taskmanagers: usize, slots: u32, jm_args: &[&str]) -> Cluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let certs = dir.path().join("certs");
        let out = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["cluster", "init"])
            .arg(&certs)
            .output()
            .expect("weir cluster init runs");
        assert!(out.status.success(), "{}", crate::util::describe(&out));
        let mut args: Vec<String> = [
            "jobmanager",
            "--rpc",
            "127.0.0.1:0",
            "--rest",
            "127.0.0.1:0",
            "--heartbeat-interval-ms",
            "200",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push("--data-dir".into());
        args.push(dir.path().join("jm").display().to_string());
        args.push("--certs".into());
        args.push(certs.display().to_string());
        args.extend(allow_paths(dir.path()));
        args.extend(jm_args.iter().map(|s| s.to_string()));
        let jm_args = args.clone();
        let mut jm = Daemon::spawn(dir.path(), "jobmanager", &args);
        let line = jm.wait_line("jobmanager ready");
        let (rpc, rest, token_file) = parse_ready(&line);
        let token = match &token_file {
            Some(file) => Some(read_token(file)),
            None => jm_args
                .iter()
                .position(|a| *a == "--rest-token")
                .map(|i| jm_args[i + 1].to_owned()),
        };
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut cluster = Cluster {
            dir,
            jm,
            rpc,
            rest,
            token,
            token_file,
            tms: Vec::new(),
            agent,
            next_tm: 0,
            tm_args: Vec::new(),
            jm_args,
            jm_restarts: 0,
        };
        for _ in 0..taskmanagers {
            cluster.add_taskmanager(slots, &[]);
        }
        cluster
    }

    /// The certificate directory.
    pub fn certs(&self) -> PathBuf {
        self.dir.path().join("certs")
    }

    /// Starts one more TaskManager and waits for its registration.
    pub fn add_taskmanager(&mut self, slots: u32, extra: &[&str]) -> usize {
        self.next_tm += 1;
        let n = self.next_tm;
        // Its own certificate, naming its id (the JobManager checks it).
        let out = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["cluster", "issue"])
            .arg(self.certs())
            .args(["--taskmanager", &format!("tm-{n}")])
            .output()
            .expect("weir cluster issue runs");
        assert!(out.status.success(), "{}", crate::util::describe(&out));
        let mut args: Vec<String> = vec![
            "taskmanager".into(),
            "--jobmanager".into(),
            self.rpc.clone(),
            "--slots".into(),
            slots.to_string(),
            "--id".into(),
            format!("tm-{n}"),
            "--data-dir".into(),
            self.dir
                .path()
                .join(format!("tm-{n}"))
                .display()
                .to_string(),
            "--certs".into(),
            self.certs().display().to_string(),
        ];
        args.extend(allow_paths(self.dir.path()));
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut tm = Daemon::spawn(self.dir.path(), &format!("tm-{n}"), &args);
        tm.wait_line("registered with");
        self.tms.push(tm);
        self.tm_args.push((format!("tm-{n}"), args));
        self.tms.len() - 1
    }

    /// Starts TaskManager `i` again (same id, data dir and options) after
    /// it was killed, and waits for its registration.
    pub fn restart_taskmanager(&mut self, i: usize) {
        self.tms[i].kill();
        let (name, args) = self.tm_args[i].clone();
        let restarts = self.tm_args.iter().filter(|(n, _)| *n == name).count();
        let mut tm = Daemon::spawn(
            self.dir.path(),
            &format!("{name}-restart-{restarts}-{}", self.tms[i].pid()),
            &args,
        );
        tm.wait_line("registered with");
        self.tms[i] = tm;
    }

    /// Starts the JobManager again (same data dir and options, on the
    /// addresses it had) after killing it (SIGKILL, if it still runs);
    /// waits until it serves; returns its ready line. TaskManagers
    /// register again by themselves.
    pub fn restart_jobmanager(&mut self) -> String {
        self.jm.kill();
        let at = |address: &str| address.rsplit("//").next().unwrap().to_owned();
        let mut args = self.jm_args.clone();
        for (flag, address) in [("--rpc", at(&self.rpc)), ("--rest", at(&self.rest))] {
            let i = args.iter().position(|a| a == flag).unwrap();
            args[i + 1] = address;
        }
        self.jm_restarts += 1;
        self.jm = Daemon::spawn(
            self.dir.path(),
            &format!("jobmanager-restart-{}", self.jm_restarts),
            &args,
        );
        self.jm.wait_line("jobmanager ready")
    }

    /// GET a REST path with the token; (status, JSON).
    pub fn get(&self, path: &str) -> (u16, Value) {
        let (status, body) = self.get_text(path);
        (status, serde_json::from_str(&body).unwrap_or(Value::Null))
    }

    /// GET a REST path with the token; (status, body as text).
    pub fn get_text(&self, path: &str) -> (u16, String) {
        let mut request = self.agent.get(format!("{}{path}", self.rest));
        if let Some(token) = &self.token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        let mut r = request.call().expect("REST answers");
        let status = r.status().as_u16();
        (status, r.body_mut().read_to_string().unwrap_or_default())
    }

    /// `weir args...` against this cluster's REST API, finding the token
    /// as a user would: in the token file.
    pub fn weir(&self, args: &[&str]) -> Output {
        let mut cmd = client_command(self.dir.path());
        cmd.args(args).env("WEIR_JOBMANAGER", &self.rest);
        match (&self.token_file, &self.token) {
            (Some(file), _) => cmd.env("WEIR_REST_TOKEN_FILE", file),
            (None, Some(token)) => cmd.env("WEIR_REST_TOKEN", token),
            (None, None) => &mut cmd,
        };
        cmd.output().expect("weir runs")
    }

    /// Submits a spec file with `weir submit`; returns the job id.
    pub fn submit(&self, spec: &Path) -> String {
        self.submit_with(spec, &[])
    }

    /// [`Cluster::submit`] with more `weir submit` options (`--set K=V`…).
    pub fn submit_with(&self, spec: &Path, options: &[&str]) -> String {
        let spec = spec.display().to_string();
        let mut args = vec!["submit", "--json"];
        args.extend_from_slice(options);
        args.push(&spec);
        let out = self.weir(&args);
        assert!(out.status.success(), "{}", crate::util::describe(&out));
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("submit --json: {e}\n{}", crate::util::describe(&out)));
        v["id"].as_str().expect("job id").to_owned()
    }

    /// Waits until job `id` is in a state for which `done` holds; returns its detail.
    pub fn wait_job(&self, id: &str, done: impl Fn(&str) -> bool) -> Value {
        wait_for(&format!("job {id} to reach the expected state"), || {
            let (status, v) = self.get(&format!("/v1/jobs/{id}"));
            assert_eq!(status, 200, "{v}");
            done(v["state"].as_str().unwrap_or("")).then_some(v)
        })
    }

    /// Job `id` once it runs with every subtask deployed (running or
    /// finished): what savepoints and upgrades wait for. A job's state is
    /// `running` while its subtasks are still being deployed.
    pub fn wait_deployed(&self, id: &str) -> Value {
        wait_for(
            &format!("job {id} to run with every subtask deployed"),
            || {
                let (status, v) = self.get(&format!("/v1/jobs/{id}"));
                assert_eq!(status, 200, "{v}");
                let deployed = v["state"] == "running"
                    && v["vertices"].as_array().is_some_and(|vs| {
                        vs.iter().all(|vertex| {
                            vertex["subtasks"].as_array().is_some_and(|ss| {
                                ss.iter()
                                    .all(|s| s["state"] == "running" || s["state"] == "finished")
                            })
                        })
                    });
                deployed.then_some(v)
            },
        )
    }

    /// Vertex `vertex` of job `id`, as `GET /v1/jobs/{id}` shows it.
    pub fn vertex(&self, id: &str, vertex: &str) -> Option<Value> {
        let (_, job) = self.get(&format!("/v1/jobs/{id}"));
        job["vertices"]
            .as_array()?
            .iter()
            .find(|v| v["id"] == vertex)
            .cloned()
    }

    /// A TaskManager's entry of `GET /v1/taskmanagers`.
    pub fn taskmanager(&self, id: &str) -> Value {
        let (_, v) = self.get("/v1/taskmanagers");
        v.as_array()
            .and_then(|a| a.iter().find(|t| t["id"] == id).cloned())
            .unwrap_or(Value::Null)
    }
}

/// A `weir` client command with no token from the test runner's
/// environment, and a data home (where the CLI looks for a default token
/// file) inside `dir`, so that only what a test gives it counts.
pub fn client_command(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
    cmd.env_remove("RUST_LOG")
        .env_remove("WEIR_REST_TOKEN")
        .env_remove("WEIR_REST_TOKEN_FILE")
        .env_remove("WEIR_CA")
        .env("XDG_DATA_HOME", dir.join("xdg-data"));
    cmd
}

/// The token in a token file (its only line).
pub fn read_token(file: &Path) -> String {
    let text = std::fs::read_to_string(file)
        .unwrap_or_else(|e| panic!("token file {}: {e}", file.display()));
    text.trim().to_owned()
}

/// The word after `key` in a readiness line.
pub fn word_after(line: &str, key: &str) -> Option<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    words
        .iter()
        .position(|w| *w == key)
        .and_then(|i| words.get(i + 1))
        .map(|w| w.to_string())
}

/// `jobmanager ready: rpc ADDR rest URL [token-file FILE]` → (ADDR, URL,
/// FILE).
pub fn parse_ready(line: &str) -> (String, String, Option<PathBuf>) {
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = |key: &str| {
        words
            .iter()
            .position(|w| *w == key)
            .and_then(|i| words.get(i + 1))
            .unwrap_or_else(|| panic!("no `{key}` in {line:?}"))
            .to_string()
    };
    (
        at("rpc"),
        at("rest"),
        word_after(line, "token-file").map(PathBuf::from),
    )
}
