//! Helpers shared by the tests: running the `weir` binary, writing job
//! specs, reading sink output.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The bundled public-domain text (King James Bible, 4.4 MB).
pub fn kjv() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../udfs/data/kjv.txt")
}

/// The first `lines` lines of [`kjv`], each ending in a newline: an input
/// that runs for a while at a source's `rate`.
pub fn kjv_head(lines: usize) -> String {
    std::fs::read_to_string(kjv())
        .unwrap()
        .lines()
        .take(lines)
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The repository's root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ is in the repository")
        .to_path_buf()
}

/// The folder of the bundled data (`udfs/data`).
pub fn data_dir() -> PathBuf {
    repo_root().join("udfs/data")
}

/// A `weir` command with an isolated compiled-component cache, started in
/// the repository's root as the demo is: `weir run` then lets jobs read the
/// bundled data (its current directory) as well as their spec's folder.
pub fn weir(cache: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
    cmd.env("WEIR_CACHE_DIR", cache)
        .env_remove("RUST_LOG")
        .current_dir(repo_root());
    cmd
}

/// Runs `weir` with `args`, returning its output.
pub fn run_weir(cache: &Path, args: &[&str]) -> Output {
    weir(cache).args(args).output().expect("weir runs")
}

/// Text of stdout and stderr, for assertion messages.
pub fn describe(out: &Output) -> String {
    format!(
        "status: {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Asserts a clean failure: the given exit code, a message containing each
/// of `needles`, and no panic.
pub fn assert_fails_with(out: &Output, code: i32, needles: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{}", describe(out));
    for n in needles {
        assert!(stderr.contains(n), "stderr lacks {n:?}\n{}", describe(out));
    }
    assert!(
        !stderr.contains("panicked"),
        "weir panicked\n{}",
        describe(out)
    );
}

/// A path as a TOML string literal.
pub fn toml_path(p: &Path) -> String {
    toml_str(&p.display().to_string())
}

/// A TOML basic string.
pub fn toml_str(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// All lines written by a file sink of any parallelism (`path`, `path.1`, …).
pub fn read_sink(path: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    let mut i = 0;
    loop {
        let p = if i == 0 {
            path.to_path_buf()
        } else {
            PathBuf::from(format!("{}.{i}", path.display()))
        };
        match std::fs::read_to_string(&p) {
            Ok(text) => lines.extend(text.lines().map(str::to_string)),
            Err(_) if i > 0 => break,
            Err(e) => panic!("cannot read sink output {}: {e}", p.display()),
        }
        i += 1;
    }
    lines
}

/// An endless job: a sequence generator at `rate` records/s → the operator
/// `module` (uid `op`) → a blackhole. `job_extra` is TOML placed right
/// after the job's name (settings of `[job]`, then e.g. a `[job.limits]`
/// table).
pub fn endless_spec(name: &str, job_extra: &str, module: &Path, rate: u64) -> String {
    format!(
        r#"
[job]
name = {name}
{job_extra}

[[source]]
id = "gen"
type = "generator"
kind = "sequence"
rate = {rate}

[[operator]]
id = "op"
module = {m}

[[sink]]
id = "null"
type = "blackhole"

[[edge]]
from = "gen"
to = "op"

[[edge]]
from = "op"
to = "null"
"#,
        name = toml_str(name),
        m = toml_path(module)
    )
}

/// The status code of a raw HTTP/1.1 answer (`HTTP/1.1 408 …`), if it has
/// a status line.
pub fn http_status(answer: &str) -> Option<u16> {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|w| w.parse().ok())
}
