//! `weir build [DIR] [-o OUT.wasm]`: builds an operator project into a
//! component and checks it against the contract.
//!
//! Detects the language from the project's files (`Cargo.toml` → Rust,
//! `package.json` → JavaScript, `pyproject.toml` or a `*.py` → Python, a
//! `*.c` or `src/*.c` → C, a `*.js`, `*.mjs` or `*.ts` → JavaScript), runs that language's documented build command (Rust: `cargo
//! build --release --target wasm32-wasip2`; the others: their SDK's
//! `build.sh PROJECT_DIR OUT.wasm`, embedded in this binary and written out
//! by [`toolchain::materialize_sdk`]), writes the component to
//! `DIR/target/NAME.wasm` unless `-o` says otherwise, and loads it with the
//! runtime (`Runtime::inspect`: compiles it, into the compiled-component
//! cache, and calls `describe`), so a component that does not fit
//! `weir:operator` fails here, not in `weir run`.
//!
//! Exit codes: 0 built and fits; 1 the build failed; 2 bad input: no
//! project, a missing toolchain (the message says what to run), or a
//! component that does not fit the contract.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, anyhow};
use clap::Args;

use crate::toolchain::{self, Lang, RUST_TARGET};
use crate::{CacheArgs, Failure, bad_input, failed, state_list};

#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The project folder.
    #[arg(default_value = ".")]
    dir: PathBuf,

    /// Where to write the component [default: DIR/target/NAME.wasm].
    #[arg(short, long, value_name = "OUT.wasm")]
    output: Option<PathBuf>,

    /// The language, if the project's files do not say.
    #[arg(long, value_enum)]
    lang: Option<Lang>,

    #[command(flatten)]
    cache: CacheArgs,
}

/// `weir build`.
pub fn build(args: BuildArgs) -> Result<(), Failure> {
    let dir = args
        .dir
        .canonicalize()
        .with_context(|| format!("no project folder {}", args.dir.display()))
        .map_err(bad_input)?;
    let lang = match args.lang {
        Some(lang) => lang,
        None => detect(&dir).map_err(bad_input)?,
    };
    let name = project_name(lang, &dir).map_err(bad_input)?;
    let out = match &args.output {
        Some(out) => absolute(out).map_err(bad_input)?,
        None => dir.join("target").join(format!("{name}.wasm")),
    };
    if let Err(why) = toolchain::status(lang) {
        return Err(toolchain::missing(lang, &why));
    }
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))
            .map_err(failed)?;
    }
    eprintln!(
        "weir: building {lang} operator `{name}` in {}",
        dir.display()
    );
    let started = Instant::now();
    match lang {
        Lang::Rust => build_rust(&dir, &name, &out),
        Lang::Python | Lang::Js | Lang::C => build_with_script(lang, &dir, &out),
    }
    .map_err(failed)?;
    let built_in = started.elapsed();

    // Load it as `weir run` would.
    let wasm = crate::runtime(&args.cache)?;
    let inspection = wasm.inspect(&out).map_err(bad_input)?;
    match inspection.contract {
        Ok(info) => {
            eprintln!(
                "weir: built in {:.1} s and checked: fits weir:operator@0.1.x",
                built_in.as_secs_f64()
            );
            println!(
                "{}  {:.1} MB  operator {} {} {}",
                out.display(),
                inspection.size as f64 / 1e6,
                info.name,
                info.version,
                state_list(&info)
            );
            Ok(())
        }
        Err(why) => Err(bad_input(anyhow!(
            "built {}, but it does not fit weir:operator@0.1.x: {why}",
            out.display()
        ))),
    }
}

/// The project's language, from its files.
fn detect(dir: &Path) -> anyhow::Result<Lang> {
    let has_ext = |dir: &Path, ext: &str| {
        std::fs::read_dir(dir).is_ok_and(|entries| {
            entries
                .flatten()
                .any(|e| e.path().extension().is_some_and(|x| x == ext))
        })
    };
    if dir.join("Cargo.toml").is_file() {
        Ok(Lang::Rust)
    } else if dir.join("package.json").is_file() {
        Ok(Lang::Js)
    } else if dir.join("pyproject.toml").is_file() || has_ext(dir, "py") {
        Ok(Lang::Python)
    } else if has_ext(dir, "c") || has_ext(&dir.join("src"), "c") {
        Ok(Lang::C)
    } else if ["js", "mjs", "ts"].iter().any(|ext| has_ext(dir, ext)) {
        Ok(Lang::Js)
    } else {
        Err(anyhow!(
            "{} is not an operator project: no Cargo.toml, package.json, pyproject.toml, *.py, *.c, src/*.c or *.js \
             (`weir new NAME --lang rust|python|js|c` makes one)",
            dir.display()
        ))
    }
}

/// The operator's name: the package's name, else the folder's.
fn project_name(lang: Lang, dir: &Path) -> anyhow::Result<String> {
    let folder = || {
        dir.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "operator".into())
    };
    Ok(match lang {
        Lang::Rust => {
            let path = dir.join("Cargo.toml");
            let manifest: toml::Table = toml::from_str(&read(&path)?)
                .with_context(|| format!("{} is not valid TOML", path.display()))?;
            manifest
                .get("package")
                .and_then(|p| p.get("name"))
                .and_then(|n| n.as_str())
                .ok_or_else(|| {
                    anyhow!(
                        "{} has no [package] name (a workspace? build one of its members)",
                        path.display()
                    )
                })?
                .to_string()
        }
        Lang::Js => {
            let path = dir.join("package.json");
            let manifest: serde_json::Value = serde_json::from_str(&read(&path)?)
                .with_context(|| format!("{} is not valid JSON", path.display()))?;
            match manifest["name"].as_str() {
                // `@scope/name` → `name`
                Some(n) => n.rsplit('/').next().unwrap_or(n).to_string(),
                None => folder(),
            }
        }
        Lang::Python => {
            let path = dir.join("pyproject.toml");
            match std::fs::read_to_string(&path) {
                Ok(text) => {
                    let manifest: toml::Table = toml::from_str(&text)
                        .with_context(|| format!("{} is not valid TOML", path.display()))?;
                    manifest
                        .get("project")
                        .and_then(|p| p.get("name"))
                        .and_then(|n| n.as_str())
                        .map(str::to_owned)
                        .unwrap_or_else(folder)
                }
                Err(_) => folder(),
            }
        }
        Lang::C => folder(),
    })
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    Ok(std::env::current_dir()
        .context("no current directory")?
        .join(path))
}

/// `cargo build --release --target wasm32-wasip2`, then copies the
/// artifact from Cargo's target dir (wherever `CARGO_TARGET_DIR` or a
/// workspace puts it) to `out`.
fn build_rust(dir: &Path, name: &str, out: &Path) -> anyhow::Result<()> {
    let manifest = dir.join("Cargo.toml");
    toolchain::run_step(
        "cargo build",
        Command::new("cargo")
            .args([
                "build",
                "--release",
                "--target",
                RUST_TARGET,
                "--manifest-path",
            ])
            .arg(&manifest)
            .current_dir(dir),
    )?;
    let metadata = Command::new("cargo")
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--manifest-path",
        ])
        .arg(&manifest)
        .current_dir(dir)
        .output()
        .context("cannot run cargo metadata")?;
    if !metadata.status.success() {
        anyhow::bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&metadata.stderr)
        );
    }
    let metadata: serde_json::Value =
        serde_json::from_slice(&metadata.stdout).context("cargo metadata printed bad JSON")?;
    let target_dir = metadata["target_directory"]
        .as_str()
        .ok_or_else(|| anyhow!("cargo metadata has no target_directory"))?;
    let artifact = Path::new(target_dir)
        .join(RUST_TARGET)
        .join("release")
        .join(format!("{}.wasm", name.replace('-', "_")));
    if !artifact.is_file() {
        anyhow::bail!(
            "cargo built no {}: is the crate a `cdylib` (`[lib] crate-type = [\"cdylib\"]`)?",
            artifact.display()
        );
    }
    if artifact != out {
        std::fs::copy(&artifact, out)
            .with_context(|| format!("cannot copy {} to {}", artifact.display(), out.display()))?;
    }
    Ok(())
}

/// `bash <sdk>/sdk/<lang>/build.sh DIR OUT`: the command each language's
/// README documents, run from the SDK copy this binary wrote out.
fn build_with_script(lang: Lang, dir: &Path, out: &Path) -> anyhow::Result<()> {
    let sdk = toolchain::materialize_sdk()?;
    let script = sdk.join("sdk").join(lang.name()).join("build.sh");
    if !script.is_file() {
        anyhow::bail!("this weir binary embeds no sdk/{lang}/build.sh");
    }
    toolchain::run_step(
        &format!("{lang} build"),
        Command::new("bash")
            .arg(&script)
            .arg(dir)
            .arg(out)
            .current_dir(dir),
    )
}
