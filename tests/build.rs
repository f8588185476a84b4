//! Builds the example operators in `udfs/` to Wasm components and tells the
//! tests and benches where they are (wasmtime's test-programs/artifacts
//! pattern: no prebuilt binary in git, a fresh clone just works).
//!
//! Runs `cargo build --release --target wasm32-wasip2` on the separate
//! `udfs/` workspace, into `udfs/target`, with the environment that the
//! outer build gives a build script cleaned of whatever would leak into the
//! nested build (target dir, target triple, rustflags, jobserver, clippy's
//! wrapper, ...). Then writes `$OUT_DIR/artifacts.rs`: one
//! `pub const NAME: &str = "/abs/path/name.wasm"` per crate (the crate name in
//! SCREAMING_SNAKE_CASE) and `ALL`, every `(crate name, path)`.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The target the operators are built for.
const TARGET: &str = "wasm32-wasip2";

/// Environment variables that Cargo sets for a build script (or that a user
/// set for the outer build) and that would change or break the nested build.
const REMOVED_VARS: &[&str] = &[
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET",
    "CARGO_BUILD_TARGET_DIR",
    "CARGO_BUILD_RUSTFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_ENCODED_RUSTDOCFLAGS",
    "RUSTFLAGS",
    "RUSTDOCFLAGS",
    // `cargo clippy` lints the workspace through this wrapper; the guests
    // are linted in their own workspace.
    "RUSTC_WORKSPACE_WRAPPER",
    // The outer build's jobserver; the nested cargo makes its own.
    "CARGO_MAKEFLAGS",
    "MAKEFLAGS",
    "MFLAGS",
    // Set by Cargo for this build script only.
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_MANIFEST_LINKS",
    "TARGET",
    "HOST",
    "OUT_DIR",
    "PROFILE",
    "OPT_LEVEL",
    "DEBUG",
    "NUM_JOBS",
    "RUSTC_LINKER",
];

/// Prefixes of further such variables (per-target linkers and rustflags,
/// profile overrides, cfg and feature values, package metadata).
const REMOVED_PREFIXES: &[&str] = &[
    "CARGO_TARGET_",
    "CARGO_PROFILE_",
    "CARGO_CFG_",
    "CARGO_FEATURE_",
    "CARGO_PKG_",
    "DEP_",
];

/// One guest crate of the `udfs/` workspace.
struct Udf {
    /// The package name, e.g. `word-count`.
    name: String,
    /// Its one-line description, if any.
    description: Option<String>,
    /// Its directory.
    dir: PathBuf,
}

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let repo = manifest_dir
        .parent()
        .expect("tests/ is inside the repository")
        .to_path_buf();
    let udfs_dir = repo.join("udfs");
    let target_dir = udfs_dir.join("target");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));

    let udfs = find_udfs(&udfs_dir);
    rerun_if_changed(&repo, &udfs);
    build(&udfs_dir, &target_dir);

    let release_dir = target_dir.join(TARGET).join("release");
    let mut code = String::new();
    let mut all = String::new();
    for udf in &udfs {
        let wasm = release_dir.join(format!("{}.wasm", udf.name.replace('-', "_")));
        if !wasm.is_file() {
            panic!(
                "the udfs build succeeded but {} is missing: is `{}` a member of udfs/Cargo.toml \
                 with `crate-type = [\"cdylib\"]`?",
                wasm.display(),
                udf.name
            );
        }
        let wasm = wasm.to_str().expect("artifact paths are UTF-8");
        let constant = shouty_snake_case(&udf.name);
        let description = udf.description.as_deref().unwrap_or("an example operator");
        writeln!(code, "/// `{}`: {description}.", udf.name).unwrap();
        writeln!(code, "pub const {constant}: &str = {wasm:?};").unwrap();
        writeln!(all, "    ({:?}, {constant}),", udf.name).unwrap();
    }
    writeln!(
        code,
        "/// Every example operator, as `(crate name, component path)`."
    )
    .unwrap();
    writeln!(code, "pub const ALL: &[(&str, &str)] = &[\n{all}];").unwrap();
    fs::write(out_dir.join("artifacts.rs"), code).expect("write artifacts.rs");
}

/// The guest crates: every directory of `udfs/` with a `Cargo.toml`, by name.
fn find_udfs(udfs_dir: &Path) -> Vec<Udf> {
    let entries = fs::read_dir(udfs_dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", udfs_dir.display()));
    let mut udfs = Vec::new();
    for entry in entries {
        let dir = entry.expect("read udfs/ entry").path();
        let manifest = dir.join("Cargo.toml");
        if dir.file_name().is_some_and(|n| n == "target") || !manifest.is_file() {
            continue;
        }
        let text = fs::read_to_string(&manifest)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", manifest.display()));
        let name = manifest_field(&text, "name")
            .unwrap_or_else(|| panic!("no package name in {}", manifest.display()));
        let description = manifest_field(&text, "description");
        udfs.push(Udf {
            name,
            description,
            dir,
        });
    }
    udfs.sort_by(|a, b| a.name.cmp(&b.name));
    udfs
}

/// The string value of `field` in a manifest's `[package]` table. A tiny
/// reader, enough for our own manifests: `field = "value"` on one line.
fn manifest_field(manifest: &str, field: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
            continue;
        }
        if !in_package {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if key.trim() == field {
            let value = value.trim();
            return value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .map(str::to_owned);
        }
    }
    None
}

/// Rebuild when a guest, the SDK or the contract changes. Never the whole of
/// `udfs/`: it holds `udfs/target`, which the build itself changes.
fn rerun_if_changed(repo: &Path, udfs: &[Udf]) {
    let mut paths = vec![
        repo.join("udfs/Cargo.toml"),
        repo.join("udfs/Cargo.lock"),
        repo.join("sdk/Cargo.toml"),
        repo.join("sdk/src"),
        repo.join("wit"),
    ];
    paths.extend(udfs.iter().map(|u| u.dir.clone()));
    for path in paths {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

/// Runs the nested `cargo build`, failing the outer build with a clear
/// message if it fails.
fn build(udfs_dir: &Path, target_dir: &Path) {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.arg("build")
        .arg("--release")
        .arg("--target")
        .arg(TARGET)
        .arg("--manifest-path")
        .arg(udfs_dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir)
        .current_dir(udfs_dir)
        // Our stdout is read by Cargo for `cargo:` lines: keep the nested
        // build's output on stderr, which Cargo shows when we fail.
        .stdout(Stdio::from(std::io::stderr()));
    for (var, _) in env::vars_os() {
        let Some(var) = var.to_str() else { continue };
        if REMOVED_VARS.contains(&var) || REMOVED_PREFIXES.iter().any(|p| var.starts_with(p)) {
            cmd.env_remove(var);
        }
    }
    eprintln!("running: {cmd:?}");
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo to build udfs/: {e}"));
    if status.success() {
        return;
    }
    if !target_installed() {
        panic!("building udfs/ failed: the {TARGET} target is missing: rustup target add {TARGET}");
    }
    panic!(
        "building udfs/ failed ({status}); the cargo output above says why \
         (reproduce with: cargo build --release --target {TARGET} --manifest-path udfs/Cargo.toml)"
    );
}

/// True if the compiler's sysroot has the standard library for [`TARGET`].
fn target_installed() -> bool {
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let Ok(output) = Command::new(rustc).args(["--print", "sysroot"]).output() else {
        return true; // cannot tell: let the cargo output speak
    };
    let sysroot = String::from_utf8_lossy(&output.stdout);
    Path::new(sysroot.trim())
        .join("lib/rustlib")
        .join(TARGET)
        .is_dir()
}

/// `word-count` -> `WORD_COUNT`.
fn shouty_snake_case(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}
