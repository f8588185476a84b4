//! Embeds the SDKs into the `weir` binary, so that `weir new`, `weir build`
//! and `weir toolchain install` work outside this repository.
//!
//! Writes `$OUT_DIR/embedded_sdk.rs`: `FILES`, every embedded file as
//! `(path relative to the repository root, bytes)`, and `LANGUAGES`, the
//! languages whose SDK was found (their `sdk/<lang>/FILES` exists). The files
//! are:
//!
//! - the contract, `wit/operator.wit`;
//! - the Rust SDK: `sdk/src/*.rs` and a standalone `sdk/Cargo.toml` written
//!   here (the repository's inherits from the workspace, which the
//!   materialized copy does not have);
//! - for each of `python`, `js`, `c`: every file listed in
//!   `sdk/<lang>/FILES` (one path per line, relative to `sdk/<lang>/`; `#`
//!   starts a comment), the list itself, and the pin and build files that
//!   `weir toolchain install` and `weir build` run ([`EXTRA`]).
//!
//! The runtime side is `src/toolchain.rs`, which writes these files under
//! `$WEIR_TOOLS_DIR/sdk/<version>/` in the same layout as the repository, so
//! that relative paths inside the scripts (`../../wit`) keep working.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

/// The SDKs written by their own maintainers, each under `sdk/<lang>/`.
const LANGUAGES: &[&str] = &["python", "js", "c"];

/// Files embedded for a language besides those its `FILES` lists, when they
/// exist: the toolchain pins, install and build scripts, and its page.
const EXTRA: &[&str] = &[
    "FILES",
    "README.md",
    "build.sh",
    "requirements.txt",
    "install-tools.sh",
    "tools/package.json",
    "tools/package-lock.json",
];

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let repo = manifest_dir
        .parent()
        .expect("cli/ is inside the repository")
        .to_path_buf();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));

    // (repository-relative path, absolute path on this machine)
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    let mut generated: Vec<(String, String)> = Vec::new();

    watch(&repo.join("wit/operator.wit"));
    files.push(("wit/operator.wit".into(), repo.join("wit/operator.wit")));

    watch(&repo.join("sdk/src"));
    watch(&repo.join("sdk/Cargo.toml"));
    let mut sources: Vec<PathBuf> = fs::read_dir(repo.join("sdk/src"))
        .expect("read sdk/src")
        .map(|e| e.expect("sdk/src entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    sources.sort();
    for path in sources {
        let name = path
            .file_name()
            .unwrap()
            .to_str()
            .expect("UTF-8 file names");
        files.push((format!("sdk/src/{name}"), path));
    }
    generated.push(("sdk/Cargo.toml".into(), rust_sdk_manifest(&repo)));

    let mut languages = Vec::new();
    for lang in LANGUAGES {
        let dir = repo.join("sdk").join(lang);
        let list = dir.join("FILES");
        if !list.is_file() {
            // Not there yet: rebuild when it appears (a directory is
            // watched recursively; `sdk/` exists).
            watch(&repo.join("sdk"));
            continue;
        }
        watch(&list);
        languages.push(*lang);
        let text = fs::read_to_string(&list).expect("read FILES");
        let mut names: Vec<String> = text
            .lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        for extra in EXTRA {
            if dir.join(extra).is_file() {
                names.push((*extra).to_owned());
            }
        }
        names.sort();
        names.dedup();
        for name in names {
            let path = dir.join(&name);
            if !path.is_file() {
                // The SDK is being written while this builds: say so, but
                // do not break everyone's build over it.
                println!(
                    "cargo:warning={} lists {name}, which does not exist",
                    list.display()
                );
                watch(&repo.join("sdk"));
                continue;
            }
            watch(&path);
            files.push((format!("sdk/{lang}/{name}"), path));
        }
    }

    let mut code = String::new();
    writeln!(
        code,
        "/// Every embedded SDK file: (path relative to the repository root, bytes)."
    )
    .unwrap();
    writeln!(code, "pub const FILES: &[(&str, &[u8])] = &[").unwrap();
    for (rel, path) in &files {
        let abs = path.canonicalize().expect("canonical path");
        writeln!(
            code,
            "    ({rel:?}, include_bytes!({:?})),",
            abs.to_str().expect("UTF-8 paths")
        )
        .unwrap();
    }
    for (rel, text) in &generated {
        writeln!(code, "    ({rel:?}, {:?}.as_bytes()),", text).unwrap();
    }
    writeln!(code, "];").unwrap();
    writeln!(
        code,
        "/// The languages besides Rust whose SDK is embedded."
    )
    .unwrap();
    writeln!(code, "pub const LANGUAGES: &[&str] = &{languages:?};").unwrap();
    fs::write(out_dir.join("embedded_sdk.rs"), code).expect("write embedded_sdk.rs");
}

fn watch(path: &Path) {
    println!("cargo:rerun-if-changed={}", path.display());
}

/// A manifest for the Rust SDK that builds on its own: the repository's
/// `sdk/Cargo.toml` with the workspace's values filled in.
fn rust_sdk_manifest(repo: &Path) -> String {
    let workspace = fs::read_to_string(repo.join("Cargo.toml")).expect("read Cargo.toml");
    let sdk = fs::read_to_string(repo.join("sdk/Cargo.toml")).expect("read sdk/Cargo.toml");
    let field = |text: &str, key: &str| -> String {
        text.lines()
            .find_map(|l| {
                let (k, v) = l.split_once('=')?;
                (k.trim() == key).then(|| v.trim().to_owned())
            })
            .unwrap_or_else(|| panic!("no `{key}` in a manifest"))
    };
    format!(
        "# Written by `weir` from its embedded copy of the Rust SDK; do not edit.\n\
         [package]\n\
         name = \"weir-sdk\"\n\
         description = {description}\n\
         version = {version}\n\
         edition = {edition}\n\
         rust-version = {rust_version}\n\
         license = {license}\n\
         publish = false\n\
         \n\
         [dependencies]\n\
         {dependencies}",
        description = field(&sdk, "description"),
        version = field(&workspace, "version"),
        edition = field(&workspace, "edition"),
        rust_version = field(&workspace, "rust-version"),
        license = field(&workspace, "license"),
        dependencies = sdk_dependencies(&sdk)
            .into_iter()
            .map(|name| format!("{name} = {}\n", field(&workspace, &name)))
            .collect::<String>(),
    )
}

/// The names of the SDK's dependencies (`name.workspace = true` lines of
/// its `[dependencies]`): the standalone manifest takes each one's
/// version and features from the workspace.
fn sdk_dependencies(sdk: &str) -> Vec<String> {
    let mut in_dependencies = false;
    let mut names = Vec::new();
    for line in sdk.lines().map(str::trim) {
        if line.starts_with('[') {
            in_dependencies = line == "[dependencies]";
            continue;
        }
        if !in_dependencies || line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.split_once(".workspace") {
            Some((name, rest)) if rest.trim_start().starts_with('=') => {
                names.push(name.trim().to_owned());
            }
            _ => panic!(
                "sdk/Cargo.toml: `{line}`: the SDK's dependencies must come from the \
                 workspace (`name.workspace = true`), so `weir new` can copy them"
            ),
        }
    }
    names
}
