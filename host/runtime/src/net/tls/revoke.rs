//! Revoking node certificates: `weir cluster revoke DIR --taskmanager ID`
//! ([`revoke_in_cluster_dir`]) and the certificate revocation list every
//! daemon loads from its `--certs` folder ([`load_crls`]).
//!
//! A revoked TaskManager's current certificate (by serial number) joins
//! `DIR/revoked.json`, the record of every revocation, and `DIR/crl.pem`,
//! a CRL signed by the cluster CA listing all of them, is written afresh.
//! Copy `crl.pem` to every node's certificate folder and restart the
//! daemons: with it, both ends of every handshake (the JobManager and
//! every TaskManager, as server and as client) refuse a revoked
//! certificate. `weir cluster issue --taskmanager ID` gives the
//! TaskManager a new certificate (a new key and serial number), which is
//! not revoked.

use serde::{Deserialize, Serialize};

use rcgen::{CertificateRevocationListParams, KeyIdMethod, RevocationReason, RevokedCertParams};
use rustls::pki_types::CertificateRevocationListDer;

use super::*;

/// The revocation record, beside `ca.key`.
pub const REVOKED_FILE: &str = "revoked.json";

/// The CRL every daemon loads from its certificate folder, if present.
pub const CRL_FILE: &str = "crl.pem";

/// One revoked certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revoked {
    /// The TaskManager it was issued to.
    pub taskmanager: String,
    /// Its serial number, hex.
    pub serial: String,
    /// When it was revoked, Unix seconds.
    pub revoked_at: u64,
}

/// `weir cluster revoke DIR`: revokes the current certificate of each
/// TaskManager in `taskmanagers` (read from `DIR/taskmanager-ID.pem`),
/// records it in [`REVOKED_FILE`] and writes [`CRL_FILE`] listing every
/// revocation so far, signed by the CA in `DIR`. Returns the files written.
pub fn revoke_in_cluster_dir(
    dir: &Path,
    taskmanagers: &[String],
) -> Result<Vec<PathBuf>, NetError> {
    if taskmanagers.is_empty() {
        return Err(NetError::Certificate(
            "nothing to revoke: give --taskmanager ID".into(),
        ));
    }
    let ca = ClusterCa::load(dir)?;
    let record = dir.join(REVOKED_FILE);
    let mut revoked: Vec<Revoked> = match fs::read(&record) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| bad_file(&record, e))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(source) => {
            return Err(NetError::Io {
                path: record,
                source,
            });
        }
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    for id in taskmanagers {
        check_taskmanager_id(id)?;
        let path = dir.join(Role::TaskManager(id.clone()).file_name() + ".pem");
        let (_, certs) = read_certs(&path)?;
        let serial = serial_of(&certs[0]).ok_or_else(|| bad_file(&path, "no serial number"))?;
        let serial: String = serial.iter().map(|b| format!("{b:02x}")).collect();
        if !revoked.iter().any(|r| r.serial == serial) {
            revoked.push(Revoked {
                taskmanager: id.clone(),
                serial,
                revoked_at: now.as_secs(),
            });
        }
    }
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    let params = CertificateRevocationListParams {
        this_update: epoch + now.saturating_sub(CLOCK_SKEW),
        next_update: epoch + now + Duration::from_secs(u64::from(CA_VALID_DAYS) * 86_400),
        crl_number: rcgen::SerialNumber::from(now.as_secs()),
        issuing_distribution_point: None,
        revoked_certs: revoked
            .iter()
            .map(|r| {
                Ok(RevokedCertParams {
                    serial_number: rcgen::SerialNumber::from_slice(
                        &unhex(&r.serial).ok_or_else(|| {
                            bad_file(&record, format!("bad serial {:?}", r.serial))
                        })?,
                    ),
                    revocation_time: epoch + Duration::from_secs(r.revoked_at),
                    reason_code: Some(RevocationReason::KeyCompromise),
                    invalidity_date: None,
                })
            })
            .collect::<Result<_, NetError>>()?,
        key_identifier_method: KeyIdMethod::Sha256,
    };
    let ca_key = KeyPair::from_pem(&ca.key_pem).map_err(cert_error)?;
    let issuer = Issuer::new(ca_params(&ca_key), ca_key);
    let crl = params.signed_by(&issuer).map_err(cert_error)?;
    let json = serde_json::to_string_pretty(&revoked).expect("a record serializes");
    write_file(&record, &json, false)?;
    let crl_path = dir.join(CRL_FILE);
    write_file(&crl_path, &crl.pem().map_err(cert_error)?, false)?;
    Ok(vec![record, crl_path])
}

/// The CRLs in `dir/crl.pem`, if the file exists (none if it does not).
pub fn load_crls(dir: &Path) -> Result<Vec<CertificateRevocationListDer<'static>>, NetError> {
    let path = dir.join(CRL_FILE);
    let pem = match fs::read(&path) {
        Ok(pem) => pem,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(NetError::Io { path, source }),
    };
    let crls = CertificateRevocationListDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad_file(&path, e))?;
    if crls.is_empty() {
        return Err(bad_file(&path, "no certificate revocation list in it"));
    }
    Ok(crls)
}

/// The serial number of a DER certificate: `Certificate ::= SEQUENCE {
/// tbsCertificate SEQUENCE { [0] version OPTIONAL, serialNumber INTEGER,
/// … } … }`.
pub(crate) fn serial_of(cert: &[u8]) -> Option<&[u8]> {
    let (0x30, (cert, _)) = der_element(cert)? else {
        return None;
    };
    let (0x30, (tbs, _)) = der_element(cert)? else {
        return None;
    };
    let (mut tag, (mut serial, rest)) = der_element(tbs)?;
    if tag == 0xa0 {
        // The explicit version comes first.
        (tag, (serial, _)) = der_element(rest)?;
    }
    (tag == 0x02).then_some(serial)
}

/// A DER element's tag, then (its contents, the bytes after it).
type Element<'a> = (u8, (&'a [u8], &'a [u8]));

/// One DER element at the start of `bytes`.
fn der_element(bytes: &[u8]) -> Option<Element<'_>> {
    let (&tag, rest) = bytes.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |l, b| (l << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, rest.split_at(len)))
}

fn unhex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}
