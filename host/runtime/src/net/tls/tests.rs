//! Tests of [`super`] (`tls.rs`).

use super::*;

fn tm(id: &str) -> Role {
    Role::TaskManager(id.to_string())
}

#[test]
fn init_then_load_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let written = init_cluster_dir(dir.path(), &["edge-1".to_string()], 30, &[]).unwrap();
    let names: Vec<_> = written
        .iter()
        .map(|p| p.file_name().unwrap().to_str().unwrap().to_string())
        .collect();
    for expected in [
        "ca.pem",
        "ca.key",
        "jobmanager.pem",
        "jobmanager.key",
        "taskmanager-edge-1.pem",
        "taskmanager-edge-1.key",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} in {names:?}"
        );
    }
    assert!(!names.iter().any(|n| n == "taskmanager.pem"), "{names:?}");
    let id = NodeIdentity::load(dir.path(), "taskmanager-edge-1").unwrap();
    assert_eq!(id.role(), Some(tm("edge-1")));
    let jm = NodeIdentity::load(dir.path(), "jobmanager").unwrap();
    assert_eq!(jm.role(), Some(Role::JobManager));
    let ca = ClusterCa::load(dir.path()).unwrap();
    assert_eq!(id.ca_pem, ca.cert_pem);
    // The loaded CA issues certificates that configure cleanly.
    quic_configs(&ca.issue_taskmanager("late-node").unwrap()).unwrap();
    quic_configs(&id).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for key in ["ca.key", "jobmanager.key", "taskmanager-edge-1.key"] {
            let mode = fs::metadata(dir.path().join(key))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{key}");
        }
    }
}

#[test]
fn init_refuses_to_overwrite_a_ca() {
    let dir = tempfile::tempdir().unwrap();
    init_cluster_dir(dir.path(), &[], 1, &[]).unwrap();
    let err = init_cluster_dir(dir.path(), &[], 1, &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("ca.key"), "{err}");
}

#[test]
fn issue_adds_and_renews_nodes_from_the_same_ca() {
    let dir = tempfile::tempdir().unwrap();
    init_cluster_dir(dir.path(), &["tm-1".to_string()], 1, &[]).unwrap();
    let before = fs::read_to_string(dir.path().join("taskmanager-tm-1.pem")).unwrap();
    let written =
        issue_in_cluster_dir(dir.path(), false, &["tm-1".into(), "tm-2".into()], 90, &[]).unwrap();
    assert_eq!(written.len(), 4, "{written:?}");
    let after = fs::read_to_string(dir.path().join("taskmanager-tm-1.pem")).unwrap();
    assert_ne!(before, after, "renewed");
    let tm2 = NodeIdentity::load(dir.path(), "taskmanager-tm-2").unwrap();
    assert_eq!(tm2.role(), Some(tm("tm-2")));
    assert_eq!(
        tm2.ca_pem,
        fs::read_to_string(dir.path().join("ca.pem")).unwrap()
    );
    let empty = tempfile::tempdir().unwrap();
    let err = issue_in_cluster_dir(empty.path(), true, &[], 1, &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("ca.pem"), "{err}");
}

#[test]
fn rotate_reissues_every_node_with_new_keys() {
    let dir = tempfile::tempdir().unwrap();
    init_cluster_dir(dir.path(), &["tm-1".into(), "tm-2".into()], 1, &[]).unwrap();
    fs::write(dir.path().join("notes.pem"), "left alone").unwrap();
    let read = |f: &str| fs::read_to_string(dir.path().join(f)).unwrap();
    let keys = [
        "jobmanager.key",
        "taskmanager-tm-1.key",
        "taskmanager-tm-2.key",
    ];
    let before: Vec<String> = keys.iter().map(|k| read(k)).collect();
    let ca_before = (read("ca.pem"), read("ca.key"));
    let written = rotate_cluster_dir(dir.path(), 30, &[]).unwrap();
    assert_eq!(written.len(), 6, "{written:?}");
    for (key, old) in keys.iter().zip(before) {
        assert_ne!(read(key), old, "{key} is new");
    }
    assert_eq!((read("ca.pem"), read("ca.key")), ca_before, "same CA");
    assert_eq!(read("notes.pem"), "left alone");
    let tm = NodeIdentity::load(dir.path(), "taskmanager-tm-2").unwrap();
    assert_eq!(tm.role(), Some(Role::TaskManager("tm-2".into())));
}

#[test]
fn certificates_expire() {
    let ca = ClusterCa::generate().unwrap();
    let id = ca.issue(&tm("tm-1"), 7).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // rcgen can read back what it wrote only with a feature we do not
    // build; the DER's GeneralizedTime/UTCTime for `now + 7 days` is
    // what we look for instead.
    let expiry = rcgen::date_time_ymd(1970, 1, 1) + Duration::from_secs(now + 7 * 86_400);
    let utc = format!(
        "{:02}{:02}{:02}",
        expiry.year() % 100,
        u8::from(expiry.month()),
        expiry.day()
    );
    let der = id.chain[0].as_ref();
    assert!(
        der.windows(utc.len()).any(|w| w == utc.as_bytes()),
        "a validity ending {utc}"
    );
    assert!(ca.issue(&tm("tm-1"), 0).is_err());
}

#[test]
fn load_names_the_missing_or_bad_file() {
    let dir = tempfile::tempdir().unwrap();
    init_cluster_dir(dir.path(), &["tm-1".into()], 1, &[]).unwrap();
    let err = NodeIdentity::load(dir.path(), "nobody")
        .unwrap_err()
        .to_string();
    assert!(err.contains("nobody.pem"), "{err}");
    fs::remove_file(dir.path().join("taskmanager-tm-1.key")).unwrap();
    let err = NodeIdentity::load(dir.path(), "taskmanager-tm-1")
        .unwrap_err()
        .to_string();
    assert!(err.contains("taskmanager-tm-1.key"), "{err}");
    fs::write(dir.path().join("jobmanager.pem"), "not a certificate").unwrap();
    let err = NodeIdentity::load(dir.path(), "jobmanager")
        .unwrap_err()
        .to_string();
    assert!(err.contains("jobmanager.pem"), "{err}");
    fs::remove_file(dir.path().join("ca.pem")).unwrap();
    let err = ClusterCa::load(dir.path()).unwrap_err().to_string();
    assert!(err.contains("ca.pem"), "{err}");
}

#[test]
fn taskmanager_ids_must_be_dns_labels() {
    let ca = ClusterCa::generate().unwrap();
    for bad in ["", "../x", "a/b", ".hidden", "TM-1", "tm_1", "-tm", "a.b"] {
        assert!(ca.issue_taskmanager(bad).is_err(), "{bad:?}");
    }
    let dir = tempfile::tempdir().unwrap();
    assert!(init_cluster_dir(dir.path(), &["x/y".to_string()], 1, &[]).is_err());
    assert!(!dir.path().join("ca.key").exists());
}

#[test]
fn roles_are_read_back_from_certificates() {
    let ca = ClusterCa::generate().unwrap();
    let jm = ca.issue_jobmanager().unwrap();
    let tm1 = ca.issue_taskmanager("tm-1").unwrap();
    assert_eq!(role_of(&jm.chain[0]), Some(Role::JobManager));
    assert_eq!(role_of(&tm1.chain[0]), Some(tm("tm-1")));
    // A certificate as older `weir cluster init`s made them: no role.
    let key = KeyPair::from_pem(&ca.key_pem).unwrap();
    let issuer = Issuer::new(ca_params(&key), key);
    let old = CertificateParams::new(vec!["weir.cluster".into(), "localhost".into()])
        .unwrap()
        .signed_by(&KeyPair::generate().unwrap(), &issuer)
        .unwrap();
    assert_eq!(role_of(old.der()), None);
}

#[test]
fn the_jobmanagers_certificate_names_its_rest_hosts_and_keeps_its_role() {
    let ca = ClusterCa::generate().unwrap();
    let id = ca
        .issue_with_rest_names(
            &Role::JobManager,
            1,
            &["weir.example.org".into(), "10.1.2.3".into()],
        )
        .unwrap();
    let cert = webpki::EndEntityCert::try_from(&id.chain[0]).unwrap();
    let names: Vec<&str> = cert.valid_dns_names().collect();
    for name in [JOBMANAGER_NAME, "localhost", "weir.example.org"] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    for ip in ["127.0.0.1", "10.1.2.3"] {
        let ip = rustls::pki_types::ServerName::try_from(ip).unwrap();
        let rustls::pki_types::ServerName::IpAddress(ip) = ip else {
            panic!("not an IP");
        };
        cert.verify_is_valid_for_subject_name(&rustls::pki_types::ServerName::IpAddress(ip))
            .unwrap();
    }
    assert_eq!(id.role(), Some(Role::JobManager));
    rest_server_config(&id).unwrap();
    // A Weir name would make the certificate claim another role.
    let err = ca
        .issue_with_rest_names(&Role::JobManager, 1, &[taskmanager_name("tm-1")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("Weir name"), "{err}");
    // TaskManagers' certificates carry no REST names.
    let tm = ca
        .issue_with_rest_names(&Role::TaskManager("tm-1".into()), 1, &["x.example".into()])
        .unwrap();
    let cert = webpki::EndEntityCert::try_from(&tm.chain[0]).unwrap();
    assert_eq!(cert.valid_dns_names().count(), 1);
}

#[test]
fn revoking_records_the_serial_and_writes_a_crl_every_node_loads() {
    let dir = tempfile::tempdir().unwrap();
    init_cluster_dir(dir.path(), &["tm-1".into(), "tm-2".into()], 1, &[]).unwrap();
    let before = NodeIdentity::load(dir.path(), "taskmanager-tm-1").unwrap();
    assert!(before.crls.is_empty(), "no crl.pem yet");
    let serial = revoke::serial_of(&before.chain[0]).unwrap().to_vec();
    assert!(!serial.is_empty());
    let written = revoke_in_cluster_dir(dir.path(), &["tm-1".into()]).unwrap();
    assert_eq!(written.len(), 2);
    // Revoking again adds nothing; another TaskManager joins the list.
    revoke_in_cluster_dir(dir.path(), &["tm-1".into(), "tm-2".into()]).unwrap();
    let record: Vec<Revoked> =
        serde_json::from_slice(&std::fs::read(dir.path().join(REVOKED_FILE)).unwrap()).unwrap();
    assert_eq!(record.len(), 2);
    let hex: String = serial.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(record[0].taskmanager, "tm-1");
    assert_eq!(record[0].serial, hex);
    let loaded = NodeIdentity::load(dir.path(), "jobmanager").unwrap();
    assert_eq!(loaded.crls.len(), 1);
    // The CRL verifies against the CA: a client verifier takes it.
    quic_configs(&loaded).unwrap();
    let err = revoke_in_cluster_dir(dir.path(), &["nobody".into()]).unwrap_err();
    assert!(err.to_string().contains("taskmanager-nobody.pem"), "{err}");
}
