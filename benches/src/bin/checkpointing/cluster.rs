//! The cluster the checkpointing bench drives: JobManager and TaskManager
//! daemons as child processes ([`Daemon`], [`Cluster`]), the job specs it
//! submits, and what it reads back over REST (checkpoints, restores).

use super::*;

/// A daemon: stdout lines (with the instant each arrived) on a channel,
/// stderr in a file. Killed and reaped on drop.
pub(crate) struct Daemon {
    child: Child,
    lines: mpsc::Receiver<(Instant, String)>,
    stderr: PathBuf,
}

impl Daemon {
    pub(crate) fn spawn(
        weir: &Path,
        dir: &Path,
        name: &str,
        args: &[String],
    ) -> anyhow::Result<Daemon> {
        let stderr = dir.join(format!("{name}.stderr"));
        let mut child = Command::new(weir)
            .args(args)
            .env("RUST_LOG", "info")
            .env_remove("WEIR_REST_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr)?)
            .spawn()
            .with_context(|| format!("starting {}", weir.display()))?;
        let stdout = child.stdout.take().context("piped stdout")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        Ok(Daemon {
            child,
            lines,
            stderr,
        })
    }

    /// Waits for a stdout line containing `needle`.
    pub(crate) fn wait_line(&self, needle: &str) -> anyhow::Result<(Instant, String)> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((at, line)) if line.contains(needle) => return Ok((at, line)),
                Ok(_) => {}
                Err(_) => bail!(
                    "no {needle:?} on stdout; stderr:\n{}",
                    std::fs::read_to_string(&self.stderr).unwrap_or_default()
                ),
            }
        }
    }

    /// A line containing `needle` already printed, without waiting.
    pub(crate) fn seen_line(&self, needle: &str) -> Option<Instant> {
        self.lines
            .try_iter()
            .find(|(_, line)| line.contains(needle))
            .map(|(at, _)| at)
    }

    /// SIGKILL, and reap.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A JobManager and TaskManagers of one slot each.
pub(crate) struct Cluster {
    pub(crate) weir: PathBuf,
    pub(crate) dir: PathBuf,
    pub(crate) rest: String,
    /// The JobManager's REST token file (it generates one at start).
    pub(crate) token_file: PathBuf,
    /// The token in it, for the bench's own requests.
    pub(crate) token: String,
    pub(crate) agent: ureq::Agent,
    /// Declared before `jm` so TaskManagers die first.
    pub(crate) tms: Vec<Daemon>,
    pub(crate) tm_args: Vec<Vec<String>>,
    pub(crate) restarts: usize,
    pub(crate) _jm: Daemon,
}

impl Cluster {
    pub(crate) fn start(
        weir: &Path,
        dir: &Path,
        taskmanagers: usize,
        jm_extra: &[String],
    ) -> anyhow::Result<Cluster> {
        let certs = dir.join("certs");
        let out = Command::new(weir)
            .args(["cluster", "init"])
            .arg(&certs)
            .args((1..=taskmanagers).flat_map(|n| ["--taskmanager".to_string(), format!("tm-{n}")]))
            .output()?;
        ensure!(
            out.status.success(),
            "weir cluster init: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut args: Vec<String> = [
            "jobmanager",
            "--rpc",
            "127.0.0.1:0",
            "--rest",
            "127.0.0.1:0",
        ]
        .map(String::from)
        .to_vec();
        args.extend([
            "--data-dir".into(),
            dir.join("jm").display().to_string(),
            "--certs".into(),
            certs.display().to_string(),
        ]);
        args.extend(jm_extra.iter().cloned());
        let jm = Daemon::spawn(weir, dir, "jobmanager", &args)?;
        let (_, line) = jm.wait_line("jobmanager ready")?;
        let word_after = |key: &str| {
            let words: Vec<&str> = line.split_whitespace().collect();
            words
                .iter()
                .position(|w| *w == key)
                .and_then(|i| words.get(i + 1))
                .map(|w| w.to_string())
                .with_context(|| format!("no `{key}` in {line:?}"))
        };
        let rpc = word_after("rpc")?;
        let rest = word_after("rest")?;
        let token_file = PathBuf::from(word_after("token-file")?);
        let token = std::fs::read_to_string(&token_file)
            .with_context(|| format!("token file {}", token_file.display()))?
            .trim()
            .to_owned();
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut cluster = Cluster {
            weir: weir.to_owned(),
            dir: dir.to_owned(),
            rest,
            token_file,
            token,
            agent,
            tms: Vec::new(),
            tm_args: Vec::new(),
            restarts: 0,
            _jm: jm,
        };
        for n in 1..=taskmanagers {
            let args: Vec<String> = vec![
                "taskmanager".into(),
                "--jobmanager".into(),
                rpc.clone(),
                "--slots".into(),
                "1".into(),
                "--id".into(),
                format!("tm-{n}"),
                "--data-dir".into(),
                dir.join(format!("tm-{n}")).display().to_string(),
                "--certs".into(),
                certs.display().to_string(),
            ];
            let tm = Daemon::spawn(weir, dir, &format!("tm-{n}"), &args)?;
            tm.wait_line("registered with")?;
            cluster.tms.push(tm);
            cluster.tm_args.push(args);
        }
        Ok(cluster)
    }

    /// Starts TaskManager `i` again (same id and data dir) without waiting
    /// for its registration.
    pub(crate) fn respawn_taskmanager(&mut self, i: usize) -> anyhow::Result<()> {
        self.restarts += 1;
        let name = format!("tm-{}-restart-{}", i + 1, self.restarts);
        self.tms[i] = Daemon::spawn(&self.weir, &self.dir, &name, &self.tm_args[i])?;
        Ok(())
    }

    /// The JobManager's stderr (its log).
    pub(crate) fn jm_log(&self) -> PathBuf {
        self.dir.join("jobmanager.stderr")
    }

    pub(crate) fn get(&self, path: &str) -> anyhow::Result<Value> {
        let mut r = self
            .agent
            .get(format!("{}{path}", self.rest))
            .header("Authorization", format!("Bearer {}", self.token))
            .call()?;
        let status = r.status().as_u16();
        let v: Value = r.body_mut().read_json()?;
        ensure!(status == 200, "GET {path}: {status} {v}");
        Ok(v)
    }

    pub(crate) fn cancel(&self, id: &str) -> anyhow::Result<()> {
        self.agent
            .post(format!("{}/v1/jobs/{id}/cancel", self.rest))
            .header("Authorization", format!("Bearer {}", self.token))
            .send_empty()?;
        self.wait_job(id, |job| {
            matches!(
                job["state"].as_str(),
                Some("canceled" | "failed" | "finished")
            )
        })?;
        Ok(())
    }

    /// Submits a spec with `weir submit` (which uploads its modules).
    pub(crate) fn submit(&self, spec: &str) -> anyhow::Result<String> {
        let path = self.dir.join("job.toml");
        std::fs::write(&path, spec)?;
        let out = Command::new(&self.weir)
            .args(["submit", "--json"])
            .arg(&path)
            .env("WEIR_JOBMANAGER", &self.rest)
            .env("WEIR_REST_TOKEN_FILE", &self.token_file)
            .env_remove("WEIR_REST_TOKEN")
            .env_remove("RUST_LOG")
            .output()?;
        ensure!(
            out.status.success(),
            "weir submit: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout)?;
        Ok(v["id"].as_str().context("job id")?.to_owned())
    }

    pub(crate) fn job(&self, id: &str) -> anyhow::Result<Value> {
        self.get(&format!("/v1/jobs/{id}"))
    }

    pub(crate) fn checkpoints(&self, id: &str) -> anyhow::Result<Value> {
        self.get(&format!("/v1/jobs/{id}/checkpoints"))
    }

    /// Polls job `id` until `done` holds; returns the job.
    pub(crate) fn wait_job(
        &self,
        id: &str,
        done: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let job = self.job(id)?;
            if done(&job) {
                return Ok(job);
            }
            ensure!(
                job["state"] != "failed",
                "job {id} failed: {}",
                job["failure"]
            );
            ensure!(Instant::now() < deadline, "timed out waiting on job {id}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

pub(crate) fn toml_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

/// generator (keys, unthrottled or `rate`) → word_count (keyed, RocksDB) →
/// blackhole, parallelism 2, with `extra` appended to `[job]`.
pub(crate) fn job_spec(keys: u64, rate: u64, record_bytes: u64, extra: &str) -> String {
    let rate = if rate > 0 {
        format!("rate = {rate}\n")
    } else {
        String::new()
    };
    format!(
        r#"[job]
name = "checkpointing"
parallelism = 2
{extra}
[[source]]
id = "seq"
type = "generator"
kind = "sequence"
keys = {keys}
record_bytes = {record_bytes}
{rate}
[[operator]]
id = "count"
module = {module}
key_by = "key"
config = {{ emit = "updates" }}

[[sink]]
id = "out"
type = "blackhole"

[[edge]]
from = "seq"
to = "count"

[[edge]]
from = "count"
to = "out"
"#,
        module = toml_str(artifacts::WORD_COUNT),
    )
}

pub(crate) fn checkpoints_section(interval_ms: u64) -> String {
    format!("\n[job.checkpoints]\ninterval_ms = {interval_ms}\ntimeout_ms = 60000\nretain = 2\n")
}

/// The source vertex's `records_out`, summed over its subtasks.
pub(crate) fn source_out(job: &Value) -> u64 {
    job["vertices"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["id"] == "seq"))
        .and_then(|v| v["records_out"].as_u64())
        .unwrap_or(0)
}

/// The job runs and so does every subtask of every vertex.
pub(crate) fn all_running(job: &Value) -> bool {
    job["state"] == "running"
        && job["vertices"].as_array().is_some_and(|vs| {
            vs.iter().all(|v| {
                v["subtasks"]
                    .as_array()
                    .is_some_and(|ss| ss.iter().all(|s| s["state"] == "running"))
            })
        })
}

pub(crate) fn completed(checkpoints: &Value) -> Vec<&Value> {
    checkpoints["history"]
        .as_array()
        .map(|h| h.iter().filter(|c| c["status"] == "completed").collect())
        .unwrap_or_default()
}

pub(crate) fn latest_completed_id(checkpoints: &Value) -> u64 {
    completed(checkpoints)
        .iter()
        .filter_map(|c| c["id"].as_u64())
        .max()
        .unwrap_or(0)
}

pub(crate) fn restores(checkpoints: &Value) -> Vec<Value> {
    checkpoints["restores"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}
