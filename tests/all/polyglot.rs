//! Operators in other languages (issue 5): the same jobs with the Rust,
//! Python, JavaScript and C operators give the same bytes; the SDKs share the
//! state encoding; `weir new` + `weir build` + `weir run` work from a clean
//! folder in every language; a guest exception fails the job with its
//! message.
//!
//! Everything goes through the `weir` binary, as a user would: `weir
//! toolchain install LANG` (once per test run, into `$WEIR_TOOLS_DIR`, else
//! `~/.cache/weir/tools`, so CI reuses it and a fresh machine installs it),
//! `weir build` (each component once per test run, see [`built`]), `weir
//! run`. Nothing is skipped: a toolchain that cannot be installed fails the
//! tests that need it, with the installer's output.
//!
//! Components and compiled code are shared by the tests through
//! `$CARGO_TARGET_TMPDIR/polyglot` (one compiled-component cache, so an
//! 18 MB Python component is compiled by its `weir build` and only loaded by
//! the runs).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

use weir_sdk::StateCodec;
use weir_tests::artifacts;

use crate::fraud::{fraud_spec, read_alerts, read_transactions, reference as fraud_reference};
use crate::util::{assert_fails_with, describe, kjv, read_sink, toml_path, weir};
use crate::word_count::{expected_counts, word_count_spec_with};

/// The repository root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ is inside the repository")
        .to_path_buf()
}

/// Where the tests keep what they share: components, the compiled cache,
/// the Rust scaffolds' target dir. Emptied once per test run.
fn work() -> &'static Path {
    static WORK: OnceLock<PathBuf> = OnceLock::new();
    WORK.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("polyglot");
        // Keep the Rust scaffolds' target dir (compiled dependencies);
        // everything else is made afresh.
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                if e.file_name() != "rust-target" {
                    let p = e.path();
                    let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
                }
            }
        }
        std::fs::create_dir_all(&dir).unwrap();
        dir
    })
}

/// The compiled-component cache every run here shares.
fn cache() -> PathBuf {
    work().join("cache")
}

/// Runs `cmd`, returning its output.
fn output(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// Process-wide once-per-key cells (of toolchains, of components).
type Cells<T> = OnceLock<Mutex<HashMap<String, &'static OnceLock<T>>>>;

/// The cell of `key`: made once, kept for the whole test run.
fn once<T: 'static + Send + Sync>(cells: &'static Cells<T>, key: &str) -> &'static OnceLock<T> {
    let map = cells.get_or_init(Default::default);
    let mut m = map.lock().unwrap_or_else(|e| e.into_inner());
    m.entry(key.to_string())
        .or_insert_with(|| Box::leak(Box::new(OnceLock::new())))
}

/// Installs `lang`'s toolchain with `weir toolchain install`, once per test
/// run; panics with the installer's output if it fails.
fn toolchain(lang: &str) {
    static DONE: Cells<Result<(), String>> = OnceLock::new();
    let cell = once(&DONE, lang);
    let result = cell.get_or_init(|| {
        let out = output(weir(&cache()).args(["toolchain", "install", lang]));
        if out.status.success() {
            Ok(())
        } else {
            Err(describe(&out))
        }
    });
    if let Err(why) = result {
        panic!("`weir toolchain install {lang}` failed:\n{why}");
    }
}

/// `weir build DIR -o <work>/<name>.wasm`, once per test run per `name`.
fn built(lang: &str, dir: &Path, name: &str) -> PathBuf {
    static BUILT: Cells<Result<PathBuf, String>> = OnceLock::new();
    toolchain(lang);
    let cell = once(&BUILT, name);
    let result = cell.get_or_init(|| {
        let wasm = work().join("components").join(format!("{name}.wasm"));
        let started = std::time::Instant::now();
        let out = output(weir(&cache()).arg("build").arg(dir).arg("-o").arg(&wasm));
        eprintln!(
            "polyglot: weir build {name} ({lang}): {:.1} s",
            started.elapsed().as_secs_f64()
        );
        if out.status.success() && wasm.is_file() {
            Ok(wasm)
        } else {
            Err(describe(&out))
        }
    });
    match result {
        Ok(wasm) => wasm.clone(),
        Err(why) => panic!("`weir build {}` failed:\n{why}", dir.display()),
    }
}

/// Runs `weir run SPEC`, asserting success.
fn run_job(spec: &Path) {
    let started = std::time::Instant::now();
    let out = output(weir(&cache()).arg("run").arg(spec));
    assert!(out.status.success(), "{}", describe(&out));
    eprintln!(
        "polyglot: weir run {}: {:.1} s: {}",
        spec.display(),
        started.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
    );
}

// --- word count -------------------------------------------------------------

#[test]
fn word_count_is_byte_identical_in_rust_python_js_and_c() {
    let udfs = repo().join("udfs");
    let counters = [
        ("rust", PathBuf::from(artifacts::WORD_COUNT)),
        (
            "python",
            built(
                "python",
                &udfs.join("python/word-count"),
                "python-word-count",
            ),
        ),
        (
            "js",
            built("js", &udfs.join("js/word-count"), "js-word-count"),
        ),
        ("c", built("c", &udfs.join("c/word-count"), "c-word-count")),
    ];
    let dir = tempfile::tempdir().unwrap();
    let input = kjv();
    let mut outputs = Vec::new();
    for (lang, counter) in &counters {
        let out = dir.path().join(format!("{lang}.txt"));
        let spec = dir.path().join(format!("{lang}.toml"));
        std::fs::write(&spec, word_count_spec_with(&input, counter, &out)).unwrap();
        run_job(&spec);
        outputs.push((*lang, std::fs::read(&out).unwrap()));
    }

    // Equal to a count made here, without Weir.
    let expected = expected_counts(&std::fs::read_to_string(&input).unwrap());
    let mut got = HashMap::new();
    for line in read_sink(&dir.path().join("rust.txt")) {
        let (word, count) = line.rsplit_once('\t').expect("word<TAB>count");
        let count: u64 = count.parse().expect("a count");
        assert!(
            got.insert(word.to_string(), count).is_none(),
            "{word} twice"
        );
    }
    assert!(expected.len() > 10_000, "the text has a real vocabulary");
    assert!(
        got == expected,
        "the Rust counts differ from the expected ones"
    );

    // And the same bytes in every language.
    let (_, rust) = &outputs[0];
    for (lang, bytes) in &outputs[1..] {
        if bytes != rust {
            let first = rust
                .split(|b| *b == b'\n')
                .zip(bytes.split(|b| *b == b'\n'))
                .position(|(a, b)| a != b);
            panic!(
                "the {lang} word count differs from the Rust one ({} vs {} bytes); first differing line: {first:?}",
                bytes.len(),
                rust.len()
            );
        }
    }
}

// --- fraud detection --------------------------------------------------------

#[test]
fn fraud_alerts_are_identical_in_rust_python_and_js() {
    let udfs = repo().join("udfs");
    let detectors = [
        ("rust", PathBuf::from(artifacts::FRAUD_DETECT)),
        (
            "python",
            built(
                "python",
                &udfs.join("python/fraud-detect"),
                "python-fraud-detect",
            ),
        ),
        (
            "js",
            built("js", &udfs.join("js/fraud-detect"), "js-fraud-detect"),
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut outputs = Vec::new();
    for (lang, module) in &detectors {
        let raw = dir.path().join(format!("{lang}-raw.jsonl"));
        let alerts = dir.path().join(format!("{lang}-alerts.jsonl"));
        let spec = dir.path().join(format!("{lang}.toml"));
        std::fs::write(&spec, fraud_spec(module, &raw, &alerts, 100_000, 1)).unwrap();
        run_job(&spec);
        outputs.push((*lang, std::fs::read(&alerts).unwrap()));
    }

    // The Rust alerts equal the reference over the stream the job wrote.
    let transactions = read_transactions(&dir.path().join("rust-raw.jsonl"));
    let expected = fraud_reference(&transactions);
    let got = read_alerts(&dir.path().join("rust-alerts.jsonl"));
    assert!(expected.len() > 50, "the stream raises alerts");
    assert_eq!(got, expected, "the Rust alerts differ from the reference");

    let (_, rust) = &outputs[0];
    for (lang, bytes) in &outputs[1..] {
        assert!(
            bytes == rust,
            "the {lang} alerts differ from the Rust ones:\n--- rust\n{}\n--- {lang}\n{}",
            String::from_utf8_lossy(&rust[..rust.len().min(600)]),
            String::from_utf8_lossy(&bytes[..bytes.len().min(600)]),
        );
    }
}

// --- the shared state encoding ----------------------------------------------

/// u64s whose encodings tell byte order, width and sign handling apart.
const U64S: [u64; 6] = [0, 1, 41, 0x0102_0304_0506_0708, 1 << 32, u64::MAX];

#[test]
fn python_and_js_sdks_encode_a_u64_count_as_the_rust_sdk() {
    let sdk = repo().join("sdk");
    let rust: Vec<String> = U64S.iter().map(|n| hex(&n.to_bytes())).collect();
    // Quoted: JavaScript numbers are not exact above 2^53.
    let list = U64S.map(|n| format!("'{n}'")).join(",");

    // Each SDK's own codec, natively: encode, and decode the Rust bytes.
    let python = output(
        Command::new("python3")
            .arg("-c")
            .arg(format!(
                "import sys\n\
                 sys.path.insert(0, {sdk:?})\n\
                 from weir_sdk import U64\n\
                 for n, rust in zip(map(int, [{list}]), sys.argv[1:]):\n\
                 \x20   assert U64.decode(bytes.fromhex(rust)) == n, (n, rust)\n\
                 \x20   print(U64.encode(n).hex())\n",
                sdk = sdk.join("python").display().to_string(),
            ))
            .args(&rust),
    );
    assert!(python.status.success(), "{}", describe(&python));
    assert_eq!(lines(&python), rust, "Python's U64 encoding");

    let js = output(
        Command::new("node")
            .arg("--input-type=module")
            .arg("-e")
            .arg(format!(
                "import {{ codecs }} from {module:?};\n\
                 const rust = process.argv.slice(1);\n\
                 [{list}].map(BigInt).forEach((n, i) => {{\n\
                   const back = codecs.u64.decode(Uint8Array.from(Buffer.from(rust[i], 'hex')));\n\
                   if (back !== n) throw new Error(`decoded ${{back}}, not ${{n}}`);\n\
                   console.log(Buffer.from(codecs.u64.encode(n)).toString('hex'));\n\
                 }});\n",
                module = format!("file://{}", sdk.join("js/weir-sdk.js").display()),
            ))
            .args(&rust),
    );
    assert!(js.status.success(), "{}", describe(&js));
    assert_eq!(lines(&js), rust, "JavaScript's u64 encoding");

    // The word counters' own tests, which read state the Rust counter wrote.
    let udfs = repo().join("udfs");
    let unittest = output(
        Command::new("python3")
            .args(["-m", "unittest", "-v"])
            .current_dir(udfs.join("python/word-count")),
    );
    assert!(unittest.status.success(), "{}", describe(&unittest));
    let node = output(
        Command::new("node")
            .arg("--test")
            .current_dir(udfs.join("js/word-count")),
    );
    assert!(node.status.success(), "{}", describe(&node));
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

// --- weir new + weir build + weir run ---------------------------------------

/// What the scaffolded jobs write into out/output.txt from their input.txt.
const MAP_OUTPUT: &str = "HELLO WEIR\nSTREAMS OF RECORDS\n";
const KEYED_OUTPUT: &str = "apple\t1\npear\t1\napple\t2\nplum\t1\npear\t2\napple\t3\n";

/// `weir new NAME --lang LANG --kind KIND` in a clean folder, the project's
/// own unit test, `weir build`, `weir run job.toml`; checks the output.
fn new_build_run(lang: &str, kind: &str, unit_test: &[&str]) {
    toolchain(lang);
    let dir = tempfile::tempdir().unwrap();
    let name = format!("my-{lang}-{kind}");
    let project = dir.path().join(&name);
    let out = output(
        weir(&cache())
            .args(["new", &name, "--lang", lang, "--kind", kind])
            .current_dir(dir.path()),
    );
    assert!(out.status.success(), "{}", describe(&out));

    let mut test = Command::new(unit_test[0]);
    test.args(&unit_test[1..]).current_dir(&project);
    // The Rust scaffolds share compiled dependencies.
    test.env("CARGO_TARGET_DIR", work_rust_target());
    let out = output(&mut test);
    assert!(
        out.status.success(),
        "{} in the new project:\n{}",
        unit_test.join(" "),
        describe(&out)
    );

    let started = std::time::Instant::now();
    let out = output(
        weir(&cache())
            .arg("build")
            .current_dir(&project)
            .env("CARGO_TARGET_DIR", work_rust_target()),
    );
    assert!(out.status.success(), "weir build:\n{}", describe(&out));
    eprintln!(
        "polyglot: weir build of a new {lang} project: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(project.join(format!("target/{name}.wasm")).is_file());

    let out = output(
        weir(&cache())
            .args(["run", "job.toml"])
            .current_dir(&project),
    );
    assert!(out.status.success(), "weir run:\n{}", describe(&out));
    let got = std::fs::read_to_string(project.join("out/output.txt")).unwrap();
    let expected = if kind == "map" {
        MAP_OUTPUT
    } else {
        KEYED_OUTPUT
    };
    assert_eq!(got, expected);
}

fn work_rust_target() -> PathBuf {
    work().join("rust-target")
}

#[test]
fn new_build_run_rust_map_and_keyed() {
    new_build_run("rust", "map", &["cargo", "test"]);
    new_build_run("rust", "keyed", &["cargo", "test"]);
}

#[test]
fn new_build_run_python_keyed() {
    new_build_run("python", "keyed", &["python3", "-m", "unittest"]);
}

#[test]
fn new_build_run_js_map() {
    new_build_run("js", "map", &["node", "--test"]);
}

#[test]
fn new_build_run_c_keyed() {
    new_build_run("c", "keyed", &["make", "test"]);
}

// --- a guest exception ------------------------------------------------------

/// Scaffolds a map in `lang`, makes it raise on the second input line with
/// `replace` (swapping the line that maps), builds and runs it: `weir run`
/// exits 1 with the guest's message as an operator error, and no panic.
fn raising(lang: &str, file: &str, maps: &str, raises: &str) {
    toolchain(lang);
    let dir = tempfile::tempdir().unwrap();
    let name = format!("raise-{lang}");
    let project = dir.path().join(&name);
    let out = output(
        weir(&cache())
            .args(["new", &name, "--lang", lang, "--kind", "map"])
            .current_dir(dir.path()),
    );
    assert!(out.status.success(), "{}", describe(&out));
    let source = project.join(file);
    let text = std::fs::read_to_string(&source).unwrap();
    assert!(
        text.contains(maps),
        "the {lang} map template changed: {text}"
    );
    std::fs::write(&source, text.replace(maps, raises)).unwrap();
    let wasm = built(lang, &project, &name);

    let spec = project.join("raise.toml");
    std::fs::write(
        &spec,
        std::fs::read_to_string(project.join("job.toml"))
            .unwrap()
            .replace(&format!("\"target/{name}.wasm\""), &toml_path(&wasm)),
    )
    .unwrap();
    let out = output(weir(&cache()).arg("run").arg(&spec));
    assert_fails_with(
        &out,
        1,
        &[
            "operator error",
            &name,
            "weir-test-raise: cannot map streams of records",
        ],
    );
}

#[test]
fn a_python_exception_fails_the_job_with_its_message() {
    raising(
        "python",
        "app.py",
        "return record.with_value(record.value_str().upper())",
        "if record.value_str() == \"streams of records\":\n\
         \x20           raise ValueError(\"weir-test-raise: cannot map \" + record.value_str())\n\
         \x20       return record",
    );
}

#[test]
fn a_js_exception_fails_the_job_with_its_message() {
    raising(
        "js",
        "index.js",
        "return record.withValue(record.valueString().toUpperCase());",
        "if (record.valueString() === 'streams of records') {\n\
         \x20     throw new Error('weir-test-raise: cannot map ' + record.valueString());\n\
         \x20   }\n\
         \x20   return record;",
    );
}

/// The SDKs share the state encoding, so a job's operator can change
/// language in place: a running job with the Python counter upgraded
/// mid-stream to the Rust one (`weir upgrade`) counts on exactly.
#[test]
fn a_python_counter_upgraded_to_the_rust_one_counts_on_exactly() {
    let python = built(
        "python",
        &repo().join("udfs/python/word-count"),
        "python-word-count",
    );
    let cluster =
        crate::cluster::harness::Cluster::start(1, 4, &["--heartbeat-timeout-ms", "10000"]);
    let dir = cluster.dir.path();
    let text = crate::util::kjv_head(15_000);
    let input = dir.join("input.txt");
    std::fs::write(&input, &text).unwrap();
    let out = dir.join("out/counts.txt");
    let spec = dir.join("job.toml");
    let job = crate::upgrade::spec(&input, &out, &python.display().to_string(), "final", 1_000);
    std::fs::write(&spec, job).unwrap();
    let id = cluster.submit(&spec);
    crate::cluster::harness::wait_for("a completed checkpoint", || {
        let (_, job) = cluster.get(&format!("/v1/jobs/{id}"));
        assert_eq!(job["state"], "running", "{job}");
        (!crate::exactly_once::completed_checkpoints(&cluster, &id).is_empty()).then_some(())
    });
    let upgraded = cluster.weir(&[
        "upgrade",
        &id,
        "--module",
        &format!("count={}", artifacts::WORD_COUNT),
    ]);
    assert!(upgraded.status.success(), "{}", describe(&upgraded));
    let (_, detail) = cluster.get(&format!("/v1/jobs/{id}"));
    let modules = detail["versions"][1]["modules"].as_array().unwrap();
    let count = modules.iter().find(|m| m["operator"] == "count").unwrap();
    assert!(
        count["module"]
            .as_str()
            .is_some_and(|m| m.starts_with("word_count@")),
        "now the Rust counter: {detail}"
    );
    let done = cluster.wait_job(&id, |s| s == "finished" || s == "failed");
    assert_eq!(done["state"], "finished", "{done}");
    let got = crate::upgrade::counts(&crate::exactly_once::committed_lines(&out));
    assert!(
        got == expected_counts(&text),
        "the counts differ from the input's"
    );
}

#[test]
fn co_process_joins_in_python_and_js_equal_the_nested_loop_join() {
    for (lang, folder) in [
        ("python", "udfs/python/pair-join"),
        ("js", "udfs/js/pair-join"),
    ] {
        let wasm = built(lang, &repo().join(folder), &format!("pair-join-{lang}"));
        let dir = tempfile::tempdir().unwrap();
        let expected = crate::joins::co_process_expected(dir.path());
        let got = crate::joins::co_process_join(dir.path(), &wasm);
        assert_eq!(got.len(), expected.len(), "{lang}: distinct pairs");
        assert!(
            got == expected,
            "{lang}: pairs differ from the nested-loop join"
        );
    }
}

#[test]
fn window_functions_in_python_js_and_c_equal_the_independent_windows() {
    for (lang, stats, top) in [
        (
            "python",
            "udfs/python/window-stats",
            "udfs/python/window-top",
        ),
        ("js", "udfs/js/window-stats", "udfs/js/window-top"),
        ("c", "udfs/c/window-stats", "udfs/c/window-top"),
    ] {
        let stats = built(lang, &repo().join(stats), &format!("window-stats-{lang}"));
        let top = built(lang, &repo().join(top), &format!("window-top-{lang}"));
        crate::window_functions::check_window_functions(lang, &stats, &top);
    }
}
