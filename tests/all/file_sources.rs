//! File sources that scale: a folder of files split over parallel
//! subtasks (`weir run`, and a cluster with checkpoints and TaskManagers
//! killed), continuous mode picking up a file added while the job runs,
//! CSV, gzip and zstd input, and the errors of a truncated file or a
//! pattern that matches nothing. Expected outputs are the generated inputs,
//! computed here.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use crate::cluster::harness::{Cluster, wait_for};
use crate::exactly_once::{committed_lines, kill_repeatedly};
use crate::util::{assert_fails_with, describe, read_sink, run_weir, toml_path};

/// The multiset of `lines`.
fn multiset<S: AsRef<str>>(lines: impl IntoIterator<Item = S>) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for l in lines {
        *m.entry(l.as_ref().to_owned()).or_default() += 1;
    }
    m
}

/// Writes `files` files of lines of varied length into `dir`; returns
/// every line written. Some lines repeat across files (a multiset, not a
/// set, is compared) and one file lacks its final line ending.
fn write_files(dir: &Path, files: usize, lines: usize) -> Vec<String> {
    std::fs::create_dir_all(dir).unwrap();
    let mut all = Vec::new();
    for f in 0..files {
        let mut text = String::new();
        for i in 0..lines + f * 13 {
            let line = if i % 50 == 0 {
                "the same line in every file".to_owned()
            } else {
                format!("file {f} line {i} {}", "x".repeat((i * 31 + f) % 97))
            };
            text.push_str(&line);
            text.push('\n');
            all.push(line);
        }
        if f == 3 {
            text.pop();
        }
        std::fs::write(dir.join(format!("part-{f}.txt")), text).unwrap();
    }
    all
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn zstd(data: &[u8]) -> Vec<u8> {
    ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
}

/// source (file) → sink (file), at `parallelism`; `source_extra` is added
/// to the source table.
fn copy_spec(name: &str, path: &Path, source_extra: &str, out: &Path, job_extra: &str) -> String {
    format!(
        r#"
[job]
name = "{name}"
{job_extra}

[[source]]
id = "files"
type = "file"
path = {path}
{source_extra}

[[sink]]
id = "out"
type = "file"
path = {out}

[[edge]]
from = "files"
to = "out"
"#,
        path = toml_path(path),
        out = toml_path(out),
    )
}

/// Eight files at parallelism 4 through `weir run`, cut into small splits:
/// every line once, and every subtask read some.
#[test]
fn a_folder_of_eight_files_at_parallelism_four_reads_every_line_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let expected = write_files(&data, 8, 2000);
    let out = dir.path().join("out.txt");
    let spec = dir.path().join("job.toml");
    std::fs::write(
        &spec,
        copy_spec(
            "folder",
            &data,
            "split_bytes = 65536",
            &out,
            "parallelism = 4",
        ),
    )
    .unwrap();
    let result = run_weir(
        &dir.path().join("cache"),
        &["run", spec.to_str().unwrap(), "--json"],
    );
    assert!(result.status.success(), "{}", describe(&result));
    let summary: serde_json::Value = serde_json::from_slice(&result.stdout).unwrap();
    let source = summary["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == "files")
        .unwrap_or_else(|| panic!("{summary}"));
    assert_eq!(source["parallelism"], 4, "{summary}");
    let got = read_sink(&out);
    assert_eq!(got.len(), expected.len());
    assert!(
        multiset(&got) == multiset(&expected),
        "lines differ from the input"
    );
    // Forward edges: sink subtask i got what source subtask i read.
    for i in 1..4 {
        let part = std::fs::read_to_string(format!("{}.{i}", out.display())).unwrap();
        assert!(!part.is_empty(), "source subtask {i} read nothing");
    }
}

/// The same on a cluster with checkpoints: a throttled read of eight files
/// at parallelism 4 over two TaskManagers, which are killed and restarted
/// while it runs; the committed output holds every line exactly once.
#[test]
fn a_parallel_file_source_restores_its_splits_after_taskmanager_kills() {
    let mut cluster = Cluster::start(2, 2, &[]);
    let data = cluster.dir.path().join("data");
    let expected = write_files(&data, 8, 3000);
    let out = cluster.dir.path().join("out.txt");
    let spec = cluster.dir.path().join("job.toml");
    // ~24.4 K lines at 2000 lines/s: about 12 s of reading, ~2 splits a file.
    std::fs::write(
        &spec,
        copy_spec(
            "folder-restore",
            &data,
            "split_bytes = 100000\nrate = 2000",
            &out,
            "parallelism = 4\nbuffer_timeout_ms = 5\n\n[job.checkpoints]\ninterval_ms = 300\n\n\
             [job.restart]\nstrategy = \"fixed-delay\"\nattempts = 100\ndelay_ms = 200",
        ),
    )
    .unwrap();
    let id = cluster.submit(&spec);
    kill_repeatedly(&mut cluster, &id, 2);
    let job = cluster.wait_job(&id, |s| s == "finished" || s == "failed");
    assert_eq!(job["state"], "finished", "{job}");
    let got = committed_lines(&out);
    let (want, have) = (multiset(&expected), multiset(&got));
    let missing = want.iter().filter(|(l, n)| have.get(*l) < Some(n)).count();
    let extra = have.iter().filter(|(l, n)| want.get(*l) < Some(n)).count();
    assert!(
        missing == 0 && extra == 0 && got.len() == expected.len(),
        "{} lines committed for {}: {missing} lines short, {extra} too often",
        got.len(),
        expected.len()
    );
}

/// Continuous mode: the job keeps watching the folder; a file renamed in
/// while it runs is read, then the job is canceled.
#[test]
fn continuous_mode_picks_up_a_file_added_while_the_job_runs() {
    let cluster = Cluster::start(1, 2, &[]);
    let data = cluster.dir.path().join("incoming");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("first.txt"), "first 1\nfirst 2\n").unwrap();
    let out = cluster.dir.path().join("out.txt");
    let spec = cluster.dir.path().join("job.toml");
    std::fs::write(
        &spec,
        copy_spec(
            "continuous",
            &data,
            "monitor_interval_ms = 100",
            &out,
            "parallelism = 2\n\n[job.checkpoints]\ninterval_ms = 200",
        ),
    )
    .unwrap();
    let id = cluster.submit(&spec);
    let committed = |want: usize| {
        wait_for(&format!("{want} lines committed"), || {
            let (_, job) = cluster.get(&format!("/v1/jobs/{id}"));
            assert_eq!(job["state"], "running", "{job}");
            let lines = committed_lines(&out);
            (lines.len() >= want).then_some(lines)
        })
    };
    let lines = committed(2);
    assert_eq!(multiset(&lines), multiset(["first 1", "first 2"]));
    // Written under a hidden name, renamed into the folder.
    std::fs::write(data.join(".second.tmp"), "second 1\nsecond 2\nsecond 3\n").unwrap();
    std::fs::rename(data.join(".second.tmp"), data.join("second.txt")).unwrap();
    let lines = committed(5);
    assert_eq!(
        multiset(&lines),
        multiset(["first 1", "first 2", "second 1", "second 2", "second 3"])
    );
    let cancel = cluster.weir(&["cancel", &id]);
    assert!(cancel.status.success(), "{}", describe(&cancel));
    let job = cluster.wait_job(&id, |s| s == "canceled" || s == "failed");
    assert_eq!(job["state"], "canceled", "{job}");
}

/// gzip, zstd and CSV input read by `weir run` (a glob over both
/// compressed files at parallelism 2; a CSV with a header, key and
/// timestamp columns and a quoted field).
#[test]
fn gzip_zstd_and_csv_files_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let a: Vec<String> = (0..5000).map(|i| format!("gz {i}")).collect();
    let b: Vec<String> = (0..5000).map(|i| format!("zst {i}")).collect();
    std::fs::write(
        data.join("a.log.gz"),
        gzip((a.join("\n") + "\n").as_bytes()),
    )
    .unwrap();
    std::fs::write(
        data.join("b.log.zst"),
        zstd((b.join("\n") + "\n").as_bytes()),
    )
    .unwrap();
    std::fs::write(data.join("c.txt"), "not matched\n").unwrap();
    let out = dir.path().join("out.txt");
    let spec = dir.path().join("job.toml");
    std::fs::write(
        &spec,
        copy_spec(
            "compressed",
            &data.join("*.log.*"),
            "",
            &out,
            "parallelism = 2",
        ),
    )
    .unwrap();
    let cache = dir.path().join("cache");
    let result = run_weir(&cache, &["run", spec.to_str().unwrap()]);
    assert!(result.status.success(), "{}", describe(&result));
    let got = read_sink(&out);
    assert!(
        multiset(&got) == multiset(a.iter().chain(&b)),
        "lines differ"
    );

    let csv = data.join("payments.csv");
    std::fs::write(
        &csv,
        "account,ts,amount,note\nacc-1,1000,12.5,plain\nacc-2,2000,-3,\"with, comma\"\n",
    )
    .unwrap();
    let out = dir.path().join("csv.txt");
    std::fs::write(
        &spec,
        copy_spec(
            "csv",
            &csv,
            "format = \"csv\"\nkey_field = \"account\"\ntimestamp_field = \"ts\"",
            &out,
            "",
        )
        .replace(
            "id = \"out\"\ntype = \"file\"",
            "id = \"out\"\ntype = \"file\"\nformat = \"json\"",
        ),
    )
    .unwrap();
    let result = run_weir(&cache, &["run", spec.to_str().unwrap()]);
    assert!(result.status.success(), "{}", describe(&result));
    let got: Vec<serde_json::Value> = read_sink(&out)
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[1]["key"], "acc-2");
    assert_eq!(got[1]["timestamp"], 2000);
    let value: serde_json::Value = serde_json::from_str(got[1]["value"].as_str().unwrap()).unwrap();
    assert_eq!(
        value,
        serde_json::json!({"account":"acc-2","ts":"2000","amount":"-3","note":"with, comma"})
    );
}

/// A truncated gzip file fails the job, naming the source and the file.
#[test]
fn a_truncated_gzip_file_fails_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let text: String = (0..50_000).map(|i| format!("line {i}\n")).collect();
    let gz = gzip(text.as_bytes());
    let bad = dir.path().join("cut.txt.gz");
    std::fs::write(&bad, &gz[..gz.len() / 2]).unwrap();
    let spec = dir.path().join("job.toml");
    let out = dir.path().join("out.txt");
    std::fs::write(&spec, copy_spec("truncated", &bad, "", &out, "")).unwrap();
    let result = run_weir(&dir.path().join("cache"), &["run", spec.to_str().unwrap()]);
    assert!(!result.status.success(), "{}", describe(&result));
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(
        stderr.contains("files") && stderr.contains(&bad.display().to_string()),
        "{}",
        describe(&result)
    );
}

/// A pattern that matches nothing (not continuous) is refused before the
/// job starts, naming the source and the pattern; so is an option of
/// another format.
#[test]
fn a_pattern_matching_no_files_and_a_misplaced_option_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pattern = dir.path().join("*.nothing");
    let spec = dir.path().join("job.toml");
    std::fs::write(
        &spec,
        copy_spec("none", &pattern, "", &dir.path().join("o.txt"), ""),
    )
    .unwrap();
    let result = run_weir(&dir.path().join("cache"), &["run", spec.to_str().unwrap()]);
    assert_fails_with(
        &result,
        2,
        &[
            "source `files`",
            &pattern.display().to_string(),
            "matches no files",
        ],
    );
    std::fs::write(dir.path().join("x.txt"), "x\n").unwrap();
    std::fs::write(
        &spec,
        copy_spec(
            "misplaced",
            &dir.path().join("x.txt"),
            "header = false",
            &dir.path().join("o.txt"),
            "",
        ),
    )
    .unwrap();
    let result = run_weir(&dir.path().join("cache"), &["run", spec.to_str().unwrap()]);
    assert_fails_with(&result, 2, &["source[0] \"files\".header", "csv only"]);
}
