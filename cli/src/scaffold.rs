//! `weir new NAME --lang L [--kind map|keyed]`: scaffolds an operator project.
//!
//! A project is a folder with the operator's source (a working operator: an
//! uppercasing map, or a keyed counter), its build file, a unit test in the
//! language's own test tool, `input.txt` and a `job.toml` that runs the
//! operator over it with `weir run` (file source → operator → file sink
//! `out/output.txt`). The templates are in `cli/templates/`, compiled into
//! the binary; the SDK they use is written out of the binary into the tools
//! dir ([`toolchain::materialize_sdk`]), and the project refers to it there.
//!
//! Must not touch: an existing non-empty folder (it refuses), the network
//! (installing toolchains is `weir toolchain install`'s job).

use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use clap::{Args, ValueEnum};

use crate::toolchain::{self, Lang};
use crate::{Failure, bad_input, failed};

/// What the scaffolded operator does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    /// A map: uppercases each record's value.
    Map,
    /// A keyed process function: counts records per key in value state.
    Keyed,
}

#[derive(Debug, Args)]
pub struct NewArgs {
    /// The operator's name: lowercase letters, digits, `-` and `_`,
    /// starting with a letter. Also the folder's name.
    name: String,

    /// The language.
    #[arg(long, value_enum)]
    lang: Lang,

    /// What the operator does.
    #[arg(long, value_enum, default_value = "map")]
    kind: Kind,

    /// Where to create the project [default: ./NAME].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// A template: its path in the project and its text (with `{{name}}`,
/// `{{id}}`, `{{module}}`, `{{sdk}}` placeholders).
type Template = (&'static str, &'static str);

macro_rules! template {
    ($path:literal) => {
        include_str!(concat!("../templates/", $path))
    };
}

/// Files every project has.
fn common(kind: Kind) -> Vec<Template> {
    match kind {
        Kind::Map => vec![
            ("job.toml", template!("common/map-job.toml")),
            ("input.txt", template!("common/map-input.txt")),
        ],
        Kind::Keyed => vec![
            ("job.toml", template!("common/keyed-job.toml")),
            ("input.txt", template!("common/keyed-input.txt")),
        ],
    }
}

/// The language's files.
fn language(lang: Lang, kind: Kind) -> Vec<Template> {
    match (lang, kind) {
        (Lang::Rust, kind) => vec![
            ("Cargo.toml", template!("rust/Cargo.toml")),
            (
                "src/lib.rs",
                match kind {
                    Kind::Map => template!("rust/map.rs"),
                    Kind::Keyed => template!("rust/keyed.rs"),
                },
            ),
            (".gitignore", template!("rust/gitignore")),
        ],
        (Lang::Python, kind) => vec![
            ("pyproject.toml", template!("python/pyproject.toml")),
            (
                "app.py",
                match kind {
                    Kind::Map => template!("python/map.py"),
                    Kind::Keyed => template!("python/keyed.py"),
                },
            ),
            (
                "test_app.py",
                match kind {
                    Kind::Map => template!("python/test_map.py"),
                    Kind::Keyed => template!("python/test_keyed.py"),
                },
            ),
            (".gitignore", template!("python/gitignore")),
        ],
        (Lang::Js, kind) => vec![
            ("package.json", template!("js/package.json")),
            (
                "index.js",
                match kind {
                    Kind::Map => template!("js/map.js"),
                    Kind::Keyed => template!("js/keyed.js"),
                },
            ),
            (
                "index.test.js",
                match kind {
                    Kind::Map => template!("js/map.test.js"),
                    Kind::Keyed => template!("js/keyed.test.js"),
                },
            ),
            (".gitignore", template!("js/gitignore")),
        ],
        (Lang::C, kind) => vec![
            ("Makefile", template!("c/Makefile")),
            (
                "src/{{module}}.c",
                match kind {
                    Kind::Map => template!("c/map.c"),
                    Kind::Keyed => template!("c/keyed.c"),
                },
            ),
            (
                "test/test_{{module}}.c",
                match kind {
                    Kind::Map => template!("c/test_map.c"),
                    Kind::Keyed => template!("c/test_keyed.c"),
                },
            ),
            (".gitignore", template!("c/gitignore")),
        ],
    }
}

/// How to run the project's unit tests, for the closing message.
fn test_command(lang: Lang) -> &'static str {
    match lang {
        Lang::Rust => "cargo test",
        Lang::Python => "python3 -m unittest",
        Lang::Js => "node --test",
        Lang::C => "make test",
    }
}

/// `weir new`.
pub fn new(args: NewArgs) -> Result<(), Failure> {
    check_name(&args.name).map_err(bad_input)?;
    if !toolchain::sdk_embedded(args.lang) {
        return Err(bad_input(anyhow!(
            "this weir binary was built without the {} SDK",
            args.lang
        )));
    }
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    if dir.exists()
        && std::fs::read_dir(&dir)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        return Err(bad_input(anyhow!(
            "{} already exists and is not empty",
            dir.display()
        )));
    }
    let sdk = toolchain::materialize_sdk().map_err(failed)?;
    let sdk = sdk
        .to_str()
        .ok_or_else(|| failed(anyhow!("the tools dir {} is not UTF-8", sdk.display())))?;
    let id = args.name.replace('_', "-");
    let module = args.name.replace('-', "_");
    let files: Vec<Template> = language(args.lang, args.kind)
        .into_iter()
        .chain(common(args.kind))
        .collect();
    let fill = |text: &str| {
        text.replace("{{name}}", &args.name)
            .replace("{{id}}", &id)
            .replace("{{module}}", &module)
            .replace("{{sdk}}", sdk)
    };
    for (rel, text) in files {
        write(&dir.join(fill(rel)), &fill(text)).map_err(failed)?;
    }
    let kind = match args.kind {
        Kind::Map => "map",
        Kind::Keyed => "keyed",
    };
    let cd = dir.display();
    println!(
        "created {cd}: a {} {kind} operator `{}`\n\
         \n  cd {cd}\
         \n  {:<26}# the unit test\
         \n  {:<26}# builds target/{}.wasm{}\
         \n  {:<26}# runs it over input.txt into out/output.txt",
        args.lang,
        args.name,
        test_command(args.lang),
        "weir build",
        args.name,
        if toolchain::status(args.lang).is_err() {
            format!(" (first: weir toolchain install {})", args.lang)
        } else {
            String::new()
        },
        "weir run job.toml",
    );
    Ok(())
}

/// Names must work as a Cargo package, a Python module (after `-` → `_`),
/// an npm package, a file name and a job vertex id.
fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(anyhow!(
            "bad name {name:?}: use lowercase letters, digits, `-` and `_`, starting with a letter (at most 64)"
        ))
    }
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}
