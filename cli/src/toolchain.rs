//! `weir toolchain install|list`: the per-language toolchains that build
//! operators into components, and the SDKs embedded in this binary.
//!
//! Owns the tools directory, `$WEIR_TOOLS_DIR` (default
//! `~/.cache/weir/tools`), laid out as the language SDKs' own scripts expect:
//!
//! ```text
//! python/venv/       a virtualenv with componentize-py (pinned by sdk/python/requirements.txt)
//! js/node_modules/   componentize-js and jco (pinned by sdk/js/tools/package{,-lock}.json), `npm ci`
//! c/                 what sdk/c/install-tools.sh installs (wasm-tools, the WASI reactor adapter)
//! sdk/<version>/     the embedded SDKs, written out in the repository's layout:
//!                    wit/operator.wit, sdk/{Cargo.toml,src} (Rust), sdk/python, sdk/js, sdk/c
//! ```
//!
//! Key types: [`Lang`], [`Installed`]. Invariants: an install is idempotent
//! (a second one checks the pins it recorded and returns); the SDK copy is
//! rewritten file by file, atomically, only where its bytes differ, so
//! concurrent `weir` processes can share it. The embedded files come from
//! `build.rs` (the pin files, FILES lists and build scripts are the language
//! maintainers'; this module runs them and does not reinterpret them).

use std::fmt;
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use clap::{Subcommand, ValueEnum};

use crate::{Failure, bad_input, failed};

/// The SDK files compiled into this binary (see `build.rs`).
mod embedded {
    include!(concat!(env!("OUT_DIR"), "/embedded_sdk.rs"));
}

/// The Wasm target Rust operators are built for.
pub const RUST_TARGET: &str = "wasm32-wasip2";

/// A language operators can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    /// Rust, with the `weir-sdk` crate.
    Rust,
    /// Python, with componentize-py.
    Python,
    /// JavaScript, with componentize-js / jco.
    Js,
    /// C, with clang, wit-bindgen's C bindings and wasm-tools.
    C,
}

impl Lang {
    /// Every language, in the order `list` shows them.
    pub const ALL: [Lang; 4] = [Lang::Rust, Lang::Python, Lang::Js, Lang::C];

    /// The name on the command line and in paths (`sdk/<name>`).
    pub fn name(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Js => "js",
            Lang::C => "c",
        }
    }
}

impl fmt::Display for Lang {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Subcommand)]
pub enum ToolchainCommand {
    /// Install the toolchain that builds operators in a language, into
    /// $WEIR_TOOLS_DIR (default ~/.cache/weir/tools), from the versions
    /// pinned in this binary. Does nothing when they are already there.
    ///
    /// rust: `rustup target add wasm32-wasip2`. python: a virtualenv with
    /// componentize-py (pip). js: componentize-js and jco (`npm ci`).
    /// c: clang-19, lld-19 and the WASI sysroot (apt), wasm-tools (pip) and
    /// the WASI reactor adapter.
    Install {
        /// The languages.
        #[arg(required = true, value_enum)]
        langs: Vec<Lang>,
    },
    /// Show which toolchains are installed, with their versions.
    List,
}

/// An installed toolchain.
#[derive(Debug, Clone)]
pub struct Installed {
    /// The tools and their versions, e.g. `componentize-py 0.17.2`.
    pub versions: Vec<String>,
    /// Where it lives.
    pub location: PathBuf,
}

/// `weir toolchain ...`.
pub fn run(command: ToolchainCommand) -> Result<(), Failure> {
    match command {
        ToolchainCommand::Install { langs } => {
            for lang in langs {
                install(lang).map_err(failed)?;
            }
            Ok(())
        }
        ToolchainCommand::List => {
            println!("tools dir: {}", tools_dir().display());
            println!("{:<8} {:<10} {:<50} LOCATION", "LANG", "STATE", "VERSIONS");
            for lang in Lang::ALL {
                match status(lang) {
                    Ok(i) => println!(
                        "{:<8} {:<10} {:<50} {}",
                        lang.name(),
                        "installed",
                        i.versions.join(", "),
                        i.location.display()
                    ),
                    Err(why) => println!("{:<8} {:<10} {why}", lang.name(), "missing"),
                }
            }
            println!(
                "SDKs in this binary: rust {} (written out to {})",
                embedded::LANGUAGES.join(" "),
                sdk_root().display()
            );
            Ok(())
        }
    }
}

/// `$WEIR_TOOLS_DIR`, else `~/.cache/weir/tools` (the languages' scripts use
/// the same rule).
pub fn tools_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("WEIR_TOOLS_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache/weir/tools")
}

/// The embedded copy of a file, by repository path (`sdk/python/build.sh`).
pub fn embedded_file(path: &str) -> Option<&'static [u8]> {
    embedded::FILES
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(_, bytes)| *bytes)
}

/// True if this binary embeds the SDK of `lang`.
pub fn sdk_embedded(lang: Lang) -> bool {
    lang == Lang::Rust || embedded::LANGUAGES.contains(&lang.name())
}

/// Where [`materialize_sdk`] writes the SDKs: `$WEIR_TOOLS_DIR/sdk/<version>`.
pub fn sdk_root() -> PathBuf {
    tools_dir().join("sdk").join(env!("CARGO_PKG_VERSION"))
}

/// Writes the embedded SDKs to `$WEIR_TOOLS_DIR/sdk/<version>/` (where they
/// differ) and returns that directory: a tree shaped like this repository.
pub fn materialize_sdk() -> anyhow::Result<PathBuf> {
    let root = sdk_root();
    for (rel, bytes) in embedded::FILES {
        let path = root.join(rel);
        if std::fs::read(&path).is_ok_and(|old| old == *bytes) {
            continue;
        }
        let dir = path.parent().expect("embedded paths have a parent");
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        // Write then rename, so a concurrent reader sees the old or the new file.
        let tmp = dir.join(format!(
            ".{}.{}.tmp",
            path.file_name().unwrap().to_string_lossy(),
            std::process::id()
        ));
        std::fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
        if rel.ends_with(".sh") {
            set_executable(&tmp)?;
        }
        std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(root)
}

#[cfg(unix)]
fn set_executable(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot chmod {}", path.display()))
}

#[cfg(not(unix))]
fn set_executable(_path: &Path) -> anyhow::Result<()> {
    Ok(())
}

/// Whether `lang`'s toolchain is installed, at the pinned versions; `Err`
/// says what is missing or out of date.
pub fn status(lang: Lang) -> Result<Installed, String> {
    let tools = tools_dir();
    match lang {
        Lang::Rust => {
            let rustc = capture(Command::new("rustc").arg("--version"))
                .map_err(|e| format!("rustc not found ({e}); install rustup"))?;
            let sysroot = capture(Command::new("rustc").args(["--print", "sysroot"]))
                .map_err(|e| format!("rustc --print sysroot failed: {e}"))?;
            if !Path::new(&sysroot)
                .join("lib/rustlib")
                .join(RUST_TARGET)
                .is_dir()
            {
                return Err(format!("{rustc} lacks the {RUST_TARGET} target"));
            }
            Ok(Installed {
                versions: vec![rustc, format!("target {RUST_TARGET}")],
                location: PathBuf::from(sysroot),
            })
        }
        Lang::Python => {
            let venv = tools.join("python/venv");
            let tool = venv.join("bin/componentize-py");
            let pinned = python_pin().ok_or("this binary embeds no sdk/python/requirements.txt")?;
            let version = capture(Command::new(&tool).arg("--version"))
                .map_err(|_| format!("no componentize-py in {}", venv.display()))?;
            if version != format!("componentize-py {pinned}") {
                return Err(format!(
                    "{version} in {} is not the pinned {pinned}",
                    venv.display()
                ));
            }
            let python =
                capture(Command::new(venv.join("bin/python")).arg("--version")).unwrap_or_default();
            Ok(Installed {
                versions: vec![version, python],
                location: venv,
            })
        }
        Lang::Js => {
            let dir = tools.join("js");
            let lock = embedded_file("sdk/js/tools/package-lock.json")
                .ok_or("this binary embeds no sdk/js/tools/package-lock.json")?;
            match std::fs::read(dir.join(".weir-installed")) {
                Ok(installed) if installed == lock => {}
                Ok(_) => {
                    return Err(format!(
                        "{} holds another version of the pinned tools",
                        dir.display()
                    ));
                }
                Err(_) => return Err(format!("nothing installed in {}", dir.display())),
            }
            let mut versions = Vec::new();
            for package in [
                "@bytecodealliance/componentize-js",
                "componentize-qjs",
                "@bytecodealliance/jco",
            ] {
                let manifest = dir.join("node_modules").join(package).join("package.json");
                let text = std::fs::read_to_string(&manifest)
                    .map_err(|_| format!("no {}", manifest.display()))?;
                let json: serde_json::Value = serde_json::from_str(&text)
                    .map_err(|e| format!("{}: {e}", manifest.display()))?;
                versions.push(format!(
                    "{package} {}",
                    json["version"].as_str().unwrap_or("?")
                ));
            }
            let node = capture(Command::new("node").arg("--version"))
                .map_err(|e| format!("node not found ({e}): apt-get install nodejs npm"))?;
            versions.push(format!("node {node}"));
            Ok(Installed {
                versions,
                location: dir,
            })
        }
        Lang::C => {
            let dir = tools.join("c");
            // The script knows what it installs: ask it.
            let script = materialize_sdk()
                .map_err(|e| format!("{e:#}"))?
                .join("sdk/c/install-tools.sh");
            if !script.is_file() {
                return Err("this binary embeds no sdk/c/install-tools.sh".into());
            }
            capture(Command::new("bash").arg(&script).arg("--check"))
                .map_err(|e| e.replace("weir c toolchain: ", "").replace('\n', "; "))?;
            let clang = capture(Command::new("clang-19").arg("--version")).unwrap_or_default();
            let wasm_tools =
                capture(Command::new(dir.join("venv/bin/wasm-tools")).arg("--version"))
                    .unwrap_or_default();
            Ok(Installed {
                versions: vec![clang.lines().next().unwrap_or("").to_string(), wasm_tools],
                location: dir,
            })
        }
    }
}

/// The componentize-py version pinned by the embedded requirements.txt.
fn python_pin() -> Option<String> {
    let text = std::str::from_utf8(embedded_file("sdk/python/requirements.txt")?).ok()?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("componentize-py=="))
        .and_then(|v| v.split_whitespace().next())
        .map(str::to_string)
}

/// Installs `lang`'s toolchain, printing progress on stderr.
pub fn install(lang: Lang) -> anyhow::Result<()> {
    if !sdk_embedded(lang) {
        bail!("this weir binary was built without the {lang} SDK (sdk/{lang}/FILES was missing)");
    }
    let tools = tools_dir();
    let sdk = materialize_sdk()?;
    if let Ok(installed) = status(lang) {
        eprintln!(
            "weir: {lang}: already installed: {} ({})",
            installed.versions.join(", "),
            installed.location.display()
        );
        return Ok(());
    }
    let started = Instant::now();
    eprintln!(
        "weir: installing the {lang} toolchain into {}",
        tools.display()
    );
    match lang {
        Lang::Rust => {
            run_step(
                "rustup target add",
                Command::new("rustup").args(["target", "add", RUST_TARGET]),
            )?;
        }
        Lang::Python => {
            // What sdk/python/build.sh does when the pin is missing.
            let venv = tools.join("python/venv");
            run_step(
                "python3 -m venv",
                Command::new("python3").args(["-m", "venv"]).arg(&venv),
            )?;
            run_step(
                "pip install -r requirements.txt",
                Command::new(venv.join("bin/pip"))
                    .args([
                        "install",
                        "--disable-pip-version-check",
                        "--require-hashes",
                        "-r",
                    ])
                    .arg(sdk.join("sdk/python/requirements.txt")),
            )?;
        }
        Lang::Js => {
            run_step(
                "sdk/js/install-tools.sh (npm ci)",
                Command::new("bash")
                    .arg(sdk.join("sdk/js/install-tools.sh"))
                    .arg(tools.join("js")),
            )?;
        }
        Lang::C => {
            run_step(
                "sdk/c/install-tools.sh (apt, pip, npm pack)",
                Command::new("bash").arg(sdk.join("sdk/c/install-tools.sh")),
            )?;
        }
    }
    let installed = status(lang).map_err(|why| {
        anyhow!("the {lang} install finished but the toolchain is still missing: {why}")
    })?;
    eprintln!(
        "weir: {lang}: installed {} in {:.0} s",
        installed.versions.join(", "),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Runs a command and returns its trimmed stdout, or why it failed.
fn capture(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Runs one step of an install or a build, showing progress: a spinner
/// with the elapsed time on a terminal, else a line every 10 s. The step's
/// output is kept and printed if it fails (or as it comes, with `-v`).
pub fn run_step(what: &str, cmd: &mut Command) -> anyhow::Result<()> {
    let started = Instant::now();
    eprintln!("weir: running {what}: {}", shown(cmd));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {}", cmd.get_program().to_string_lossy()))?;
    // Both pipes into one log, read on threads so neither fills up.
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let mut readers = Vec::new();
    let pipes: Vec<Box<dyn Read + Send>> = vec![
        Box::new(child.stdout.take().expect("piped")),
        Box::new(child.stderr.take().expect("piped")),
    ];
    for mut pipe in pipes {
        let tx = tx.clone();
        readers.push(std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        }));
    }
    drop(tx);
    let verbose = tracing::enabled!(tracing::Level::DEBUG);
    let spinner = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_message(what.to_string());
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    });
    let mut log = Vec::new();
    let mut next_note = Duration::from_secs(10);
    let status: ExitStatus = loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(chunk) => {
                if verbose {
                    let _ = std::io::stderr().write_all(&chunk);
                }
                log.extend_from_slice(&chunk);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break child.wait()?,
        }
        let elapsed = started.elapsed();
        if let Some(bar) = &spinner {
            bar.set_message(format!("{what} ({} s)", elapsed.as_secs()));
        } else if elapsed >= next_note {
            eprintln!("weir: {what}: still running ({} s)", elapsed.as_secs());
            next_note += Duration::from_secs(10);
        }
    };
    for r in readers {
        let _ = r.join();
    }
    if let Some(bar) = spinner {
        bar.finish_and_clear();
    }
    if !status.success() {
        let text = String::from_utf8_lossy(&log);
        bail!(
            "{what} failed ({status}) after {:.1} s:\n{}",
            started.elapsed().as_secs_f64(),
            text.trim_end()
        );
    }
    eprintln!(
        "weir: {what}: done in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// A command line as a user would type it.
pub fn shown(cmd: &Command) -> String {
    let mut parts = vec![cmd.get_program().to_string_lossy().into_owned()];
    parts.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    parts.join(" ")
}

/// The exit-2 error for a missing toolchain: what to run, what it installs
/// where.
pub fn missing(lang: Lang, why: &str) -> Failure {
    let what = match lang {
        Lang::Rust => format!(
            "the {RUST_TARGET} target for the Rust toolchain rustup uses here (`rustup target add {RUST_TARGET}`)"
        ),
        Lang::Python => format!(
            "componentize-py, pinned, into a virtualenv at {}",
            tools_dir().join("python/venv").display()
        ),
        Lang::Js => format!(
            "componentize-js and jco, pinned, with `npm ci` into {}",
            tools_dir().join("js").display()
        ),
        Lang::C => format!(
            "clang-19, lld-19 and the WASI sysroot with apt, and wasm-tools and the WASI reactor adapter into {}",
            tools_dir().join("c").display()
        ),
    };
    bad_input(anyhow!(
        "the {lang} toolchain is missing ({why}).\n  run: weir toolchain install {lang}\n  it installs {what}"
    ))
}
