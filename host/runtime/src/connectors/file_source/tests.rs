//! The file source's tests: splits, positions, formats, compression,
//! continuous mode, on real files in temporary folders.

use super::*;
use std::io::Write;

type Records = Vec<(Option<Vec<u8>>, Vec<u8>, i64)>;

fn drain(src: &mut dyn Source, max: usize) -> Result<Records, ConnectorError> {
    let mut out = Vec::new();
    while let Some(b) = src.next_batch(max)? {
        assert!(b.len() <= max);
        for r in b.iter() {
            out.push((r.key.map(<[u8]>::to_vec), r.value.to_vec(), r.timestamp));
        }
    }
    Ok(out)
}

#[test]
fn file_source_reads_lines_without_endings() {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(b"one\r\ntwo\n\nthree").unwrap();
    let mut src = FileSource::open(&roots_of(f.path()), f.path(), FileFormat::Lines).unwrap();
    let values: Vec<_> = drain(&mut src, 2)
        .unwrap()
        .into_iter()
        .map(|r| r.1)
        .collect();
    assert_eq!(
        values,
        vec![
            b"one".to_vec(),
            b"two".to_vec(),
            b"".to_vec(),
            b"three".to_vec()
        ]
    );
}

#[test]
fn json_lines_take_key_and_timestamp_and_name_bad_lines() {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(b"{\"a\":\"x\",\"t\":5}\n{\"a\":7,\"t\":6}\n{oops\n")
        .unwrap();
    let format = FileFormat::JsonLines {
        key_field: Some("a".into()),
        timestamp_field: Some("t".into()),
        value_field: None,
    };
    let mut src = FileSource::open(&roots_of(f.path()), f.path(), format).unwrap();
    let err = drain(&mut src, 10).unwrap_err().to_string();
    assert!(err.contains(":3: invalid JSON"), "{err}");
    let mut f2 = tempfile::NamedTempFile::new().unwrap();
    f2.write_all(b"{\"a\":\"x\",\"t\":5}\n{\"a\":7,\"t\":6}\n")
        .unwrap();
    let format = FileFormat::JsonLines {
        key_field: Some("a".into()),
        timestamp_field: Some("t".into()),
        value_field: None,
    };
    let mut src = FileSource::open(&roots_of(f2.path()), f2.path(), format).unwrap();
    let got = drain(&mut src, 10).unwrap();
    assert_eq!(got[0].0.as_deref(), Some(&b"x"[..]));
    assert_eq!(got[1].0.as_deref(), Some(&b"7"[..]));
    assert_eq!((got[0].2, got[1].2), (5, 6));
    assert_eq!(got[0].1, br#"{"a":"x","t":5}"#);
}

#[test]
fn a_value_field_becomes_the_value_and_a_missing_one_is_named() {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(b"{\"k\":\"a\",\"x\":-12}\n{\"k\":\"b\",\"x\":\"text\"}\n{\"k\":\"c\"}\n")
        .unwrap();
    let format = FileFormat::JsonLines {
        key_field: Some("k".into()),
        timestamp_field: None,
        value_field: Some("x".into()),
    };
    let mut src = FileSource::open(&roots_of(f.path()), f.path(), format).unwrap();
    let mut got = Vec::new();
    let err = loop {
        match src.next_batch(1) {
            Ok(Some(b)) => got.extend(b.iter().map(|r| r.value.to_vec())),
            Ok(None) => panic!("the third line has no `x`"),
            Err(e) => break e.to_string(),
        }
    };
    assert_eq!(got, [b"-12".to_vec(), b"text".to_vec()]);
    assert!(err.contains(":3: missing value field `x`"), "{err}");
}

#[test]
fn missing_file_is_an_error_naming_it() {
    let roots = AllowedRoots::new(["/"]).unwrap();
    let err = FileSource::open(
        &roots,
        Path::new("/nonexistent/weir.txt"),
        FileFormat::Lines,
    )
    .unwrap_err();
    assert!(err.to_string().contains("/nonexistent/weir.txt"));
}

#[test]
fn a_file_outside_the_roots_is_refused() {
    let f = tempfile::NamedTempFile::new().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let roots = AllowedRoots::new([elsewhere.path()]).unwrap();
    let err = FileSource::open(&roots, f.path(), FileFormat::Lines).unwrap_err();
    assert!(matches!(err, ConnectorError::Confined(_)), "{err}");
    assert!(err.to_string().contains("outside"), "{err}");
}

#[test]
fn a_line_over_the_cap_fails_naming_file_and_line() {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    let long = "x".repeat(100);
    write!(
        f,
        "short\n{}\n{long}\n{long}x\nnever read\n",
        "y".repeat(99)
    )
    .unwrap();
    let mut src = FileSource::open(&roots_of(f.path()), f.path(), FileFormat::Lines)
        .unwrap()
        .with_max_record_bytes(100);
    let err = drain(&mut src, 1).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(
            err,
            ConnectorError::RecordTooLong {
                line: 4,
                limit: 100,
                ..
            }
        ),
        "{text}"
    );
    assert!(
        text.contains(&format!("{}:4:", f.path().display())),
        "{text}"
    );
    assert!(text.contains("max_record_bytes"), "{text}");
    // Lines up to the cap (and with \r\n or no ending) are fine.
    let mut g = tempfile::NamedTempFile::new().unwrap();
    write!(g, "{long}\n{long}").unwrap();
    let mut src = FileSource::open(&roots_of(g.path()), g.path(), FileFormat::Lines)
        .unwrap()
        .with_max_record_bytes(100);
    assert_eq!(drain(&mut src, 10).unwrap().len(), 2);
}

#[test]
fn a_followed_file_waits_for_appended_lines_and_whole_lines() {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(b"one\ntw").unwrap();
    let mut src = FileSource::open(&roots_of(f.path()), f.path(), FileFormat::Lines)
        .unwrap()
        .with_follow(true);
    let values = |b: Option<Batch>| -> Vec<Vec<u8>> {
        b.expect("a followed file never ends")
            .iter()
            .map(|r| r.value.to_vec())
            .collect()
    };
    assert_eq!(values(src.next_batch(10).unwrap()), [b"one".to_vec()]);
    // The partial line waits for its ending; meanwhile, empty batches.
    assert!(values(src.next_batch(10).unwrap()).is_empty());
    f.write_all(b"o\nthree\n").unwrap();
    f.flush().unwrap();
    assert_eq!(
        values(src.next_batch(10).unwrap()),
        [b"two".to_vec(), b"three".to_vec()]
    );
    assert!(values(src.next_batch(10).unwrap()).is_empty());
    assert_eq!(src.position()["pending"][0]["line"], 3);
}

fn roots_of(file: &Path) -> AllowedRoots {
    AllowedRoots::new([file.parent().unwrap()]).unwrap()
}

/// Every line of `files` read by `parallelism` subtasks with `split_bytes`:
/// the values, in no particular order.
fn read_all(
    roots: &AllowedRoots,
    path: &Path,
    format: FileFormat,
    split_bytes: u64,
    parallelism: u32,
) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for s in 0..parallelism {
        let mut config = FileSourceConfig::new(path, format.clone());
        config.split_bytes = split_bytes;
        let mut src = FileSource::new(roots, config, s, parallelism).unwrap();
        out.extend(drain(&mut src, 7).unwrap().into_iter().map(|r| r.1));
    }
    out.sort();
    out
}

fn sorted_lines(texts: &[&str]) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = texts
        .iter()
        .flat_map(|t| t.lines().map(|l| l.as_bytes().to_vec()))
        .collect();
    v.sort();
    v
}

#[test]
fn byte_range_splits_read_every_line_exactly_once_at_any_split_size_and_parallelism() {
    let d = tempfile::tempdir().unwrap();
    let mut texts = Vec::new();
    for f in 0..5 {
        // Lines of varied length, one file without a final line ending,
        // one empty, one with empty lines.
        let mut text = String::new();
        for i in 0..(f * 37) {
            text.push_str(&format!("f{f}-line{i}-{}\n", "x".repeat((i * 7 + f) % 23)));
        }
        if f == 2 {
            text.push_str("\n\nlast-no-newline");
        }
        std::fs::write(d.path().join(format!("part-{f}.txt")), &text).unwrap();
        texts.push(text);
    }
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let expected = sorted_lines(&texts);
    let roots = AllowedRoots::new([d.path()]).unwrap();
    for split_bytes in [1, 2, 5, 16, 64, 1000, 1 << 20] {
        for parallelism in [1, 2, 3, 4] {
            let got = read_all(
                &roots,
                d.path(),
                FileFormat::Lines,
                split_bytes,
                parallelism,
            );
            assert_eq!(
                got, expected,
                "split_bytes {split_bytes}, parallelism {parallelism}"
            );
        }
    }
}

#[test]
fn a_restored_position_continues_without_loss_or_duplicates() {
    let d = tempfile::tempdir().unwrap();
    let mut all = Vec::new();
    for f in 0..3 {
        let text: String = (0..50).map(|i| format!("{f}:{i}\n")).collect();
        std::fs::write(d.path().join(format!("{f}.txt")), &text).unwrap();
        all.push(text);
    }
    let roots = AllowedRoots::new([d.path()]).unwrap();
    let texts: Vec<&str> = all.iter().map(String::as_str).collect();
    for (parallelism, cut) in [(1, 3), (2, 1), (2, 5), (3, 2)] {
        let mut got = Vec::new();
        for s in 0..parallelism {
            let config = || {
                let mut c = FileSourceConfig::new(d.path(), FileFormat::Lines);
                c.split_bytes = 100;
                c
            };
            let mut src = FileSource::new(&roots, config(), s, parallelism).unwrap();
            for _ in 0..cut {
                if let Some(b) = src.next_batch(9).unwrap() {
                    got.extend(b.iter().map(|r| r.value.to_vec()));
                }
            }
            let position = src.position();
            // Lines read after the checkpoint are lost with the failure.
            let _ = src.next_batch(9).unwrap();
            let mut restored = FileSource::new(&roots, config(), s, parallelism).unwrap();
            restored.seek(&position).unwrap();
            got.extend(drain(&mut restored, 9).unwrap().into_iter().map(|r| r.1));
        }
        got.sort();
        assert_eq!(
            got,
            sorted_lines(&texts),
            "parallelism {parallelism}, cut {cut}"
        );
    }
}

#[test]
fn the_single_file_position_of_earlier_versions_is_accepted() {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(b"one\ntwo\nthree\n").unwrap();
    let mut src = FileSource::open(&roots_of(f.path()), f.path(), FileFormat::Lines).unwrap();
    src.seek(&serde_json::json!({ "offset": 4, "line": 1 }))
        .unwrap();
    let got: Vec<_> = drain(&mut src, 10)
        .unwrap()
        .into_iter()
        .map(|r| r.1)
        .collect();
    assert_eq!(got, [b"two".to_vec(), b"three".to_vec()]);
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn zstd(data: &[u8]) -> Vec<u8> {
    ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
}

#[test]
fn gzip_and_zstd_files_are_decoded_by_extension_and_resume_mid_file() {
    let d = tempfile::tempdir().unwrap();
    let a: String = (0..3000).map(|i| format!("gz-{i}\n")).collect();
    let b: String = (0..3000).map(|i| format!("zst-{i}\n")).collect();
    // Two gzip members and two zstd frames: concatenated streams are one file.
    let mut gz = gzip(&a.as_bytes()[..5000]);
    gz.extend(gzip(&a.as_bytes()[5000..]));
    std::fs::write(d.path().join("a.txt.gz"), gz).unwrap();
    let mut zs = zstd(&b.as_bytes()[..7000]);
    zs.extend(zstd(&b.as_bytes()[7000..]));
    std::fs::write(d.path().join("b.txt.zst"), zs).unwrap();
    let roots = AllowedRoots::new([d.path()]).unwrap();
    let expected = sorted_lines(&[&a, &b]);
    // Split size does not cut a compressed file.
    assert_eq!(
        read_all(&roots, d.path(), FileFormat::Lines, 10, 2),
        expected
    );
    // A position mid-file: the decoder skips to it.
    let mut src = FileSource::new(
        &roots,
        FileSourceConfig::new(d.path(), FileFormat::Lines),
        0,
        1,
    )
    .unwrap();
    let mut got: Vec<Vec<u8>> = Vec::new();
    for _ in 0..5 {
        got.extend(
            src.next_batch(1000)
                .unwrap()
                .unwrap()
                .iter()
                .map(|r| r.value.to_vec()),
        );
    }
    let position = src.position();
    let mut src = FileSource::new(
        &roots,
        FileSourceConfig::new(d.path(), FileFormat::Lines),
        0,
        1,
    )
    .unwrap();
    src.seek(&position).unwrap();
    got.extend(drain(&mut src, 1000).unwrap().into_iter().map(|r| r.1));
    got.sort();
    assert_eq!(got, expected);
}

#[test]
fn a_truncated_or_corrupt_compressed_file_fails_naming_it() {
    let d = tempfile::tempdir().unwrap();
    let text: String = (0..20000).map(|i| format!("line {i}\n")).collect();
    let roots = AllowedRoots::new([d.path()]).unwrap();
    let gz = gzip(text.as_bytes());
    let zs = zstd(text.as_bytes());
    let mut corrupt = zs.clone();
    let mid = corrupt.len() / 2;
    corrupt[mid] ^= 0xff;
    corrupt[mid + 1] ^= 0x55;
    for (name, bytes) in [
        ("cut.txt.gz", &gz[..gz.len() / 2]),
        ("cut-trailer.txt.gz", &gz[..gz.len() - 4]),
        ("cut.txt.zst", &zs[..zs.len() / 2]),
        ("bad.txt.zst", &corrupt[..]),
    ] {
        let path = d.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let mut src = FileSource::open(&roots, &path, FileFormat::Lines).unwrap();
        let err = drain(&mut src, 1000).unwrap_err().to_string();
        assert!(err.contains(&path.display().to_string()), "{name}: {err}");
    }
}

#[test]
fn csv_rows_map_columns_to_key_timestamp_and_value() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("t.csv");
    std::fs::write(
        &path,
        "account,ts,amount,note\na1,1000,12.5,\"two\nlines\"\nb2,2000,-3,\"a, b\"\n",
    )
    .unwrap();
    let roots = AllowedRoots::new([d.path()]).unwrap();
    let format = CsvFormat {
        header: true,
        delimiter: b',',
        key_field: Some("account".into()),
        timestamp_field: Some("ts".into()),
        value_field: None,
    };
    let mut src = FileSource::open(&roots, &path, FileFormat::Csv(format.clone())).unwrap();
    let got = drain(&mut src, 10).unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].0.as_deref(), Some(&b"a1"[..]));
    assert_eq!((got[0].2, got[1].2), (1000, 2000));
    let row: serde_json::Value = serde_json::from_slice(&got[0].1).unwrap();
    assert_eq!(
        row,
        serde_json::json!({"account":"a1","ts":"1000","amount":"12.5","note":"two\nlines"})
    );
    // value_field picks a column; without a header columns are numbers.
    let mut src = FileSource::open(
        &roots,
        &path,
        FileFormat::Csv(CsvFormat {
            value_field: Some("amount".into()),
            ..format.clone()
        }),
    )
    .unwrap();
    let values: Vec<_> = drain(&mut src, 10)
        .unwrap()
        .into_iter()
        .map(|r| r.1)
        .collect();
    assert_eq!(values, [b"12.5".to_vec(), b"-3".to_vec()]);
    let tsv = d.path().join("t.tsv");
    std::fs::write(&tsv, "x\t1\ny\t2\n").unwrap();
    let mut src = FileSource::open(
        &roots,
        &tsv,
        FileFormat::Csv(CsvFormat {
            header: false,
            delimiter: b'\t',
            key_field: Some("0".into()),
            timestamp_field: Some("1".into()),
            value_field: None,
        }),
    )
    .unwrap();
    let got = drain(&mut src, 10).unwrap();
    assert_eq!(got[1].0.as_deref(), Some(&b"y"[..]));
    assert_eq!(got[1].1, br#"["y","2"]"#);
    assert_eq!(got[1].2, 2);
    // A missing column and a bad row name the file and the line.
    let mut src = FileSource::open(
        &roots,
        &path,
        FileFormat::Csv(CsvFormat {
            key_field: Some("acount".into()),
            ..format.clone()
        }),
    )
    .unwrap();
    let err = drain(&mut src, 10).unwrap_err().to_string();
    assert!(err.contains("t.csv:1: no column `acount`"), "{err}");
    let bad = d.path().join("bad.csv");
    std::fs::write(&bad, "account,ts\na,1\nb,2,extra\n").unwrap();
    let mut src = FileSource::open(&roots, &bad, FileFormat::Csv(format.clone())).unwrap();
    let err = drain(&mut src, 10).unwrap_err().to_string();
    assert!(err.contains("bad.csv:3:"), "{err}");
    let bad_ts = d.path().join("bad-ts.csv");
    std::fs::write(&bad_ts, "account,ts\na,1\nb,soon\n").unwrap();
    let mut src = FileSource::open(&roots, &bad_ts, FileFormat::Csv(format)).unwrap();
    let err = drain(&mut src, 10).unwrap_err().to_string();
    assert!(err.contains("bad-ts.csv:3: timestamp column `ts`"), "{err}");
}

#[test]
fn a_csv_position_resumes_after_the_header_and_quoted_newlines() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("t.csv.gz");
    let mut text = String::from("k,v\n");
    for i in 0..100 {
        text.push_str(&format!("k{i},\"v\n{i}\"\n"));
    }
    std::fs::write(&path, gzip(text.as_bytes())).unwrap();
    let roots = AllowedRoots::new([d.path()]).unwrap();
    let format = FileFormat::Csv(CsvFormat {
        header: true,
        delimiter: b',',
        key_field: Some("k".into()),
        timestamp_field: None,
        value_field: Some("v".into()),
    });
    let mut src = FileSource::open(&roots, &path, format.clone()).unwrap();
    let mut got: Vec<Vec<u8>> = src
        .next_batch(30)
        .unwrap()
        .unwrap()
        .iter()
        .map(|r| r.value.to_vec())
        .collect();
    let position = src.position();
    assert_eq!(position["pending"][0]["line"], 61);
    let mut src = FileSource::open(&roots, &path, format).unwrap();
    src.seek(&position).unwrap();
    got.extend(drain(&mut src, 7).unwrap().into_iter().map(|r| r.1));
    let expected: Vec<Vec<u8>> = (0..100).map(|i| format!("v\n{i}").into_bytes()).collect();
    assert_eq!(got, expected);
}

#[test]
fn a_bad_line_in_a_split_that_starts_mid_file_is_named_by_its_line_number() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("x.jsonl");
    let mut text: String = (0..100).map(|i| format!("{{\"i\":{i}}}\n")).collect();
    text.push_str("{oops\n");
    std::fs::write(&path, &text).unwrap();
    let roots = AllowedRoots::new([d.path()]).unwrap();
    let format = FileFormat::JsonLines {
        key_field: None,
        timestamp_field: None,
        value_field: None,
    };
    let mut config = FileSourceConfig::new(&path, format);
    config.split_bytes = 64;
    let mut errors = Vec::new();
    for s in 0..3 {
        let mut src = FileSource::new(&roots, config.clone(), s, 3).unwrap();
        if let Err(e) = drain(&mut src, 10) {
            errors.push(e.to_string());
        }
    }
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("x.jsonl:101: invalid JSON"),
        "{errors:?}"
    );
}

#[test]
fn a_continuous_source_reads_new_files_once_and_remembers_them() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("a.txt"), "a1\na2\n").unwrap();
    let roots = AllowedRoots::new([d.path()]).unwrap();
    let mut config = FileSourceConfig::new(d.path().join("*.txt"), FileFormat::Lines);
    config.monitor_interval = Some(Duration::from_millis(1));
    let mut src = FileSource::new(&roots, config.clone(), 0, 1).unwrap();
    let mut got = Vec::new();
    let read = |src: &mut FileSource, got: &mut Vec<Vec<u8>>, want: usize| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while got.len() < want {
            assert!(Instant::now() < deadline, "only {got:?}");
            let b = src
                .next_batch(10)
                .unwrap()
                .expect("a continuous source never ends");
            got.extend(b.iter().map(|r| r.value.to_vec()));
        }
    };
    read(&mut src, &mut got, 2);
    // Written under a hidden name and renamed in: never seen half written.
    std::fs::write(d.path().join(".b.txt"), "b1\n").unwrap();
    std::fs::rename(d.path().join(".b.txt"), d.path().join("b.txt")).unwrap();
    read(&mut src, &mut got, 3);
    assert_eq!(got, [b"a1".to_vec(), b"a2".to_vec(), b"b1".to_vec()]);
    // Restored, it reads neither file again, and still sees new ones.
    let position = src.position();
    let mut src = FileSource::new(&roots, config.clone(), 0, 1).unwrap();
    src.seek(&position).unwrap();
    std::fs::write(d.path().join("c.txt"), "c1\n").unwrap();
    read(&mut src, &mut got, 4);
    assert_eq!(got[3], b"c1");
    for _ in 0..5 {
        assert!(src.next_batch(10).unwrap().unwrap().is_empty());
    }
    // A pattern that matches nothing: an error unless continuous.
    let none = d.path().join("*.csv");
    let err = FileSource::open(&roots, &none, FileFormat::Lines)
        .unwrap_err()
        .to_string();
    assert!(err.contains("*.csv: matches no files"), "{err}");
    config.path = none;
    assert!(FileSource::new(&roots, config, 0, 1).is_ok());
}
