//! The compiled-component cache: a second load of the same component is a
//! cache hit, in the library and across `weir run` processes.

use std::path::Path;

use weir_host::wasm::{CacheOutcome, Runtime, RuntimeConfig};
use weir_tests::artifacts;

use crate::util::{describe, run_weir, toml_path};

#[test]
fn second_load_hits_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let config = RuntimeConfig {
        cache_dir: Some(dir.path().to_path_buf()),
    };
    let first = Runtime::new(config.clone()).unwrap();
    let m = first.load(Path::new(artifacts::UPPERCASE)).unwrap();
    assert_eq!(m.cache_outcome(), CacheOutcome::Miss);
    drop(first);
    let second = Runtime::new(config).unwrap();
    let m = second.load(Path::new(artifacts::UPPERCASE)).unwrap();
    assert_eq!(m.cache_outcome(), CacheOutcome::Hit);
    // The cached code works.
    assert!(!second.describe(&m).unwrap().keyed);
}

#[test]
fn corrupt_cache_entry_is_recompiled() {
    let dir = tempfile::tempdir().unwrap();
    let config = RuntimeConfig {
        cache_dir: Some(dir.path().to_path_buf()),
    };
    Runtime::new(config.clone())
        .unwrap()
        .load(Path::new(artifacts::UPPERCASE))
        .unwrap();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        std::fs::write(entry.unwrap().path(), b"garbage").unwrap();
    }
    let rt = Runtime::new(config).unwrap();
    let m = rt.load(Path::new(artifacts::UPPERCASE)).unwrap();
    assert_eq!(m.cache_outcome(), CacheOutcome::Miss);
    rt.describe(&m).unwrap();
}

#[test]
fn second_run_of_a_job_does_not_recompile() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("job.toml");
    std::fs::write(
        &spec,
        format!(
            r#"
[job]
name = "cached"

[[source]]
id = "gen"
type = "generator"
kind = "sequence"
count = 1000

[[operator]]
id = "up"
module = {m}

[[sink]]
id = "out"
type = "blackhole"

[[edge]]
from = "gen"
to = "up"

[[edge]]
from = "up"
to = "out"
"#,
            m = toml_path(Path::new(artifacts::UPPERCASE))
        ),
    )
    .unwrap();
    let cache = dir.path().join("cache");
    let modules = |out: &std::process::Output| -> (u64, u64) {
        assert!(out.status.success(), "{}", describe(out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (
            v["modules"]["cached"].as_u64().unwrap(),
            v["modules"]["compiled"].as_u64().unwrap(),
        )
    };
    let args = ["run", spec.to_str().unwrap(), "--json"];
    assert_eq!(modules(&run_weir(&cache, &args)), (0, 1));
    assert_eq!(modules(&run_weir(&cache, &args)), (1, 0));
}
