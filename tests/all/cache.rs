//! The compiled-component cache: a second load of the same component is a
//! cache hit, in the library and across `weir run` processes; an entry that
//! is not exactly what this cache wrote for that component is recompiled,
//! never loaded; a cache folder others can write is refused.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use weir_host::wasm::{CacheOutcome, Runtime, RuntimeConfig};
use weir_tests::artifacts;

use crate::util::{assert_fails_with, describe, run_weir, toml_path};

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

/// The cache entry of the component with content hash `hash`.
fn entry_of(dir: &Path, hash: &str) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with(hash))
        .unwrap_or_else(|| panic!("no cache entry for {hash} in {}", dir.display()))
}

#[test]
fn another_components_compiled_code_is_never_loaded() {
    // The attack: with write access to the cache, replace one module's
    // compiled code with another's; the job would run the substitute.
    let dir = tempfile::tempdir().unwrap();
    let config = RuntimeConfig {
        cache_dir: Some(dir.path().to_path_buf()),
    };
    let rt = Runtime::new(config.clone()).unwrap();
    let upper = rt.load(Path::new(artifacts::UPPERCASE)).unwrap();
    let split = rt.load(Path::new(artifacts::SPLIT)).unwrap();
    let (upper_name, split_name) = (
        rt.describe(&upper).unwrap().name,
        rt.describe(&split).unwrap().name,
    );
    assert_ne!(upper_name, split_name);
    drop(rt);
    let (a, b) = (
        entry_of(dir.path(), upper.hash()),
        entry_of(dir.path(), split.hash()),
    );
    std::fs::copy(&b, &a).unwrap();

    let rt = Runtime::new(config).unwrap();
    let m = rt.load(Path::new(artifacts::UPPERCASE)).unwrap();
    assert_eq!(
        m.cache_outcome(),
        CacheOutcome::Miss,
        "the substitute was loaded"
    );
    assert_eq!(rt.describe(&m).unwrap().name, upper_name);
    // The untouched entry still hits.
    let m = rt.load(Path::new(artifacts::SPLIT)).unwrap();
    assert_eq!(m.cache_outcome(), CacheOutcome::Hit);
}

#[test]
fn a_flipped_byte_in_compiled_code_is_recompiled() {
    let dir = tempfile::tempdir().unwrap();
    let config = RuntimeConfig {
        cache_dir: Some(dir.path().to_path_buf()),
    };
    let m = Runtime::new(config.clone())
        .unwrap()
        .load(Path::new(artifacts::UPPERCASE))
        .unwrap();
    let entry = entry_of(dir.path(), m.hash());
    let mut bytes = std::fs::read(&entry).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&entry, bytes).unwrap();
    let rt = Runtime::new(config).unwrap();
    let m = rt.load(Path::new(artifacts::UPPERCASE)).unwrap();
    assert_eq!(m.cache_outcome(), CacheOutcome::Miss);
    rt.describe(&m).unwrap();
}

#[test]
fn a_cache_folder_others_can_write_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("shared-cache");
    std::fs::create_dir(&cache).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = run_weir(&cache, &["inspect", artifacts::UPPERCASE]);
    assert_fails_with(
        &out,
        1,
        &[
            "refusing the component cache",
            "writable by group or others",
        ],
    );
    // Nothing was written into it.
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 0);
}

#[test]
fn a_new_cache_folder_is_private() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("new/cache");
    let out = run_weir(&cache, &["inspect", artifacts::UPPERCASE]);
    assert!(out.status.success(), "{}", describe(&out));
    let mode = std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    for entry in std::fs::read_dir(&cache).unwrap() {
        let mode = entry.unwrap().metadata().unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
