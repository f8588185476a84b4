//! Tests of [`super`] (`modules.rs`).

use super::*;

fn store() -> (tempfile::TempDir, ModuleStore) {
    let dir = tempfile::tempdir().unwrap();
    let s = ModuleStore::open(&dir.path().join("modules")).unwrap();
    (dir, s)
}

#[test]
fn put_resolve_and_list() {
    let (_d, s) = store();
    let (a, created) = s.put(b"alpha", "tokenize", Some("1.0")).unwrap();
    assert!(created);
    assert_eq!(a.name, "tokenize");
    assert_eq!(a.version, "1.0");
    assert_eq!(a.hash, sha256_ref(b"alpha"));
    assert_eq!(a.size, 5);
    assert!(a.uploaded_at_ms > 0);
    let (b, _) = s.put(b"beta", "count", None).unwrap();
    assert_eq!(s.resolve("tokenize@1.0").unwrap(), a);
    assert_eq!(s.resolve("tokenize").unwrap(), a);
    assert_eq!(s.resolve(&b.hash).unwrap(), b);
    let names: Vec<String> = s.list().iter().map(ModuleInfo::reference).collect();
    assert_eq!(names, ["count@1", "tokenize@1.0"]);
    assert_eq!(s.read(&a.hash).unwrap(), b"alpha");
    assert_eq!(
        s.blob_path(&a.hash),
        s.dir().join("blobs").join(format!("{}.wasm", &a.hash[7..]))
    );
    assert!(matches!(
        s.resolve("tokenize@2"),
        Err(StoreError::NotFound(r)) if r == "tokenize@2"
    ));
    assert!(matches!(s.resolve("nope"), Err(StoreError::NotFound(_))));
    assert!(matches!(
        s.resolve(&sha256_ref(b"other")),
        Err(StoreError::NotFound(_))
    ));
}

#[test]
fn auto_versions_count_up_per_name() {
    let (_d, s) = store();
    let v = |bytes: &[u8], name| s.put(bytes, name, None).unwrap().0.version;
    assert_eq!(v(b"1", "a"), "1");
    assert_eq!(v(b"2", "a"), "2");
    assert_eq!(v(b"x", "b"), "1");
    s.put(b"9", "a", Some("9")).unwrap();
    s.put(b"beta", "a", Some("beta")).unwrap();
    assert_eq!(v(b"3", "a"), "10");
    // Highest version: numeric order, not byte order; named versions
    // rank below numbered ones.
    assert_eq!(s.resolve("a").unwrap().version, "10");
    let versions: Vec<String> = s
        .list()
        .into_iter()
        .filter(|m| m.name == "a")
        .map(|m| m.version)
        .collect();
    assert_eq!(versions, ["beta", "1", "2", "9", "10"]);
}

#[test]
fn version_order_is_natural() {
    use Ordering::*;
    assert_eq!(compare_versions("2", "10"), Less);
    assert_eq!(compare_versions("10", "9"), Greater);
    assert_eq!(compare_versions("1.9", "1.10"), Less);
    assert_eq!(compare_versions("v9", "v10"), Less);
    assert_eq!(compare_versions("1.0", "1.0-rc1"), Less);
    assert_eq!(compare_versions("10", "beta"), Greater);
    assert_eq!(compare_versions("01", "1"), Less);
    assert_eq!(compare_versions("007", "007"), Equal);
    let mut v = vec!["b", "10", "1.10", "a", "9", "1.9", "1"];
    v.sort_by(|a, b| compare_versions(a, b));
    assert_eq!(v, ["a", "b", "1", "1.9", "1.10", "9", "10"]);
}

#[test]
fn same_bytes_are_idempotent() {
    let (_d, s) = store();
    let (first, created) = s.put(b"wasm", "op", None).unwrap();
    assert!(created);
    let (again, created) = s.put(b"wasm", "op", None).unwrap();
    assert!(!created);
    assert_eq!(again, first);
    let (explicit, created) = s.put(b"wasm", "op", Some("1")).unwrap();
    assert!(!created);
    assert_eq!(explicit, first);
    // The same bytes under another name are another entry, one blob.
    let (other, created) = s.put(b"wasm", "alias", None).unwrap();
    assert!(created);
    assert_eq!(other.hash, first.hash);
    assert_eq!(s.list().len(), 2);
}

#[test]
fn other_bytes_under_a_taken_version_conflict() {
    let (_d, s) = store();
    s.put(b"one", "op", Some("1")).unwrap();
    let e = s.put(b"two", "op", Some("1")).unwrap_err();
    assert!(matches!(e, StoreError::Conflict { .. }), "{e}");
    assert_eq!(e.http_status(), 409);
    assert!(e.to_string().contains("op@1"), "{e}");
    assert_eq!(s.read(&s.resolve("op@1").unwrap().hash).unwrap(), b"one");
    // Without a version the new bytes get the next one.
    assert_eq!(s.put(b"two", "op", None).unwrap().0.version, "2");
}

#[test]
fn delete_keeps_a_shared_blob_until_its_last_entry_goes() {
    let (_d, s) = store();
    let (a, _) = s.put(b"shared", "a", None).unwrap();
    s.put(b"shared", "b", None).unwrap();
    let blob = s.blob_path(&a.hash);
    let removed = s.delete("a@1").unwrap();
    assert_eq!(removed, std::slice::from_ref(&a));
    assert!(blob.is_file(), "b@1 still uses the blob");
    assert_eq!(s.resolve(&a.hash).unwrap().name, "b");
    s.delete("b").unwrap();
    assert!(!blob.exists());
    assert!(s.list().is_empty());
    assert!(matches!(s.delete("b"), Err(StoreError::NotFound(_))));
    assert!(matches!(s.read(&a.hash), Err(StoreError::NotFound(_))));
}

#[test]
fn delete_by_name_removes_its_highest_version_and_by_hash_all_entries() {
    let (_d, s) = store();
    s.put(b"1", "op", None).unwrap();
    s.put(b"2", "op", None).unwrap();
    let (x, _) = s.put(b"2", "other", None).unwrap();
    let removed = s.delete("op").unwrap();
    assert_eq!(removed.len(), 1);
    assert_eq!(removed[0].version, "2");
    assert!(s.blob_path(&x.hash).is_file());
    let removed = s.delete(&x.hash).unwrap();
    assert_eq!(removed.len(), 1);
    assert!(!s.blob_path(&x.hash).exists());
    let refs: Vec<String> = s.list().iter().map(ModuleInfo::reference).collect();
    assert_eq!(refs, ["op@1"]);
}

#[test]
fn reopen_after_restart_sees_everything() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let before = {
        let s = ModuleStore::open(&path).unwrap();
        s.put(b"one", "op", None).unwrap();
        s.put(b"two", "op", None).unwrap();
        s.put(b"three", "sink-ish", Some("v3")).unwrap();
        s.delete("op@1").unwrap();
        s.list()
    };
    // A write interrupted by a crash leaves a temp file behind.
    fs::write(path.join(".index.json.999.tmp"), b"{").unwrap();
    let s = ModuleStore::open(&path).unwrap();
    assert_eq!(s.list(), before);
    assert!(!path.join(".index.json.999.tmp").exists());
    for m in &before {
        s.read(&m.hash).unwrap();
    }
    // Versions keep counting from what was stored.
    assert_eq!(s.put(b"four", "op", None).unwrap().0.version, "3");
}

#[test]
fn a_corrupt_blob_is_detected() {
    let (_d, s) = store();
    let (m, _) = s.put(b"good bytes", "op", None).unwrap();
    fs::write(s.blob_path(&m.hash), b"evil bytes").unwrap();
    let e = s.read(&m.hash).unwrap_err();
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("corrupt"), "{e}");
}

#[test]
fn a_corrupt_index_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("index.json"), b"not json").unwrap();
    let e = ModuleStore::open(dir.path()).unwrap_err();
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("index.json"), "{e}");
}

#[test]
fn bad_names_versions_and_refs_are_rejected() {
    let (_d, s) = store();
    let long = "x".repeat(65);
    for name in [
        "",
        ".hidden",
        "a/b",
        "../up",
        "a@b",
        "sp ace",
        "ünï",
        long.as_str(),
    ] {
        let e = s.put(b"x", name, None).unwrap_err();
        assert!(
            e.to_string().starts_with("bad module name `"),
            "{name}: {e}"
        );
        assert_eq!(e.http_status(), 400);
    }
    for version in ["", ".1", "1/2", "a@b"] {
        let e = s.put(b"x", "ok", Some(version)).unwrap_err();
        assert!(e.to_string().starts_with("bad module version `"), "{e}");
    }
    assert!(s.put(b"x", &"x".repeat(64), Some("1.0.0-rc_1")).is_ok());
    for r in [
        "sha256:",
        "sha256:abc",
        &format!("sha256:{}", "A".repeat(64)),
        &format!("sha256:{}", "0".repeat(65)),
        &format!("sha256:../{}", "0".repeat(61)),
        "op@",
        "@1",
        "a@b@c",
        "../etc/passwd",
    ] {
        let e = s.resolve(r).unwrap_err();
        assert!(
            e.to_string().starts_with("bad module reference `"),
            "{r}: {e}"
        );
        assert_eq!(e.http_status(), 400);
        assert!(matches!(s.delete(r), Err(StoreError::BadName(_))), "{r}");
    }
    assert!(matches!(s.read("../index"), Err(StoreError::BadName(_))));
    assert!(
        s.blob_path("../../etc/passwd")
            .starts_with(s.dir().join("blobs"))
    );
}

#[test]
fn put_blob_verifies_the_hash_and_is_idempotent() {
    let (_d, s) = store();
    let hash = sha256_ref(b"component");
    let e = s.put_blob(&hash, b"something else").unwrap_err();
    assert!(matches!(e, StoreError::HashMismatch { .. }), "{e}");
    assert!(!s.blob_path(&hash).exists());
    let p = s.put_blob(&hash, b"component").unwrap();
    assert_eq!(p, s.blob_path(&hash));
    assert_eq!(s.put_blob(&hash, b"component").unwrap(), p);
    assert_eq!(s.read(&hash).unwrap(), b"component");
    // A damaged cached blob is replaced by a fresh put_blob.
    fs::write(&p, b"damaged").unwrap();
    s.put_blob(&hash, b"component").unwrap();
    assert_eq!(s.read(&hash).unwrap(), b"component");
    // Blobs have no names: nothing to list or resolve.
    assert!(s.list().is_empty());
    assert!(matches!(
        s.put_blob("sha256:xyz", b"component"),
        Err(StoreError::BadName(_))
    ));
}

#[test]
fn the_store_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<ModuleStore>();
}
