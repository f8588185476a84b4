//! Mutual TLS for every connection between Weir's daemons.
//!
//! A cluster has one private certificate authority, the [`ClusterCa`]. Every
//! node (the JobManager, the TaskManagers, the CLI if it talks QUIC) holds a
//! [`NodeIdentity`]: a certificate issued by that CA, its key, and the CA
//! certificate it trusts. [`endpoint`] turns an identity into a quinn
//! endpoint that is server and client at once: as a server it requires a
//! client certificate issued by the cluster CA, as a client it presents its
//! own and trusts the cluster CA only (never the system roots).
//!
//! # Files
//!
//! `weir cluster init DIR` ([`init_cluster_dir`]) writes, in PEM:
//!
//! | file | content |
//! |---|---|
//! | `ca.pem` | the CA certificate: copy it to every node |
//! | `ca.key` | the CA key (mode 0600): keep it where new nodes are issued |
//! | `<node>.pem`, `<node>.key` | a node certificate and its key (0600) |
//!
//! # Invariants
//!
//! - Every node certificate carries the DNS names [`SERVER_NAME`] and
//!   `localhost`; clients always connect with [`SERVER_NAME`], so any node
//!   can reach any other by address alone. Who a peer is follows from the
//!   CA's signature, not from its address.
//! - TLS 1.3 only, with the ring provider passed explicitly to every config:
//!   no process-wide default provider is installed or relied on.
//! - The CA's subject name is derived from its key ([`CA_NAME`] and a key
//!   digest), so a CA loaded from `ca.pem` + `ca.key` issues certificates
//!   that chain to that `ca.pem` (rcgen cannot parse a certificate here).
//!
//! This module must not know about jobs or records.

use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use super::NetError;

/// The DNS name in every node certificate, and the name clients verify.
pub const SERVER_NAME: &str = "weir.cluster";

/// Subject common name of the cluster CA (followed by a digest of its key).
pub const CA_NAME: &str = "Weir cluster CA";

/// ALPN protocol of Weir's QUIC connections; a peer speaking anything else
/// fails the handshake instead of a later decode.
pub const ALPN: &[u8] = b"weir/1";

/// How often an idle connection sends a keep-alive: well below
/// [`IDLE_TIMEOUT`], so only a dead or partitioned peer times out.
pub const KEEP_ALIVE: Duration = Duration::from_secs(1);

/// A connection that heard nothing (not even keep-alives) for this long is
/// closed: how fast a crashed peer is noticed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// QUIC receive window per stream. Credits (see [`super`]) bound what a
/// sender has in flight on a data channel (4 × 32 KiB by default); this
/// window is far above any sane `credits × buffer_size` so that it never
/// is the limit. quinn allocates received data lazily, so a large window
/// costs nothing until used.
pub const STREAM_RECEIVE_WINDOW: u32 = 64 << 20;

/// QUIC receive window per connection (all channels between two nodes).
pub const CONNECTION_RECEIVE_WINDOW: u32 = 1 << 30;

/// Bytes quinn may hold unacknowledged per connection on the sending side.
pub const SEND_WINDOW: u64 = 1 << 30;

/// Concurrent bidirectional streams a peer may open: one per data channel,
/// so a TaskManager pair can have this many channels open at once.
pub const MAX_STREAMS: u32 = 1 << 16;

/// The cluster's certificate authority: its certificate and key.
#[derive(Clone)]
pub struct ClusterCa {
    cert_pem: String,
    cert: CertificateDer<'static>,
    key_pem: String,
}

impl std::fmt::Debug for ClusterCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterCa").finish_non_exhaustive()
    }
}

/// A node's certificate chain and key, and the CA certificate it trusts.
#[derive(Clone)]
pub struct NodeIdentity {
    chain_pem: String,
    chain: Vec<CertificateDer<'static>>,
    key_pem: String,
    ca_pem: String,
    ca: CertificateDer<'static>,
}

impl std::fmt::Debug for NodeIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeIdentity").finish_non_exhaustive()
    }
}

/// The CA's parameters. Its name is [`CA_NAME`] plus a digest of its public
/// key: derived from the key alone, so a CA loaded from its files issues
/// certificates that chain to its `ca.pem`, and distinct so that a peer from
/// another cluster fails with "unknown issuer", not a bad signature.
fn ca_params(key: &KeyPair) -> CertificateParams {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(key.public_key_raw());
    let id: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, format!("{CA_NAME} {id}"));
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

fn cert_error(e: rcgen::Error) -> NetError {
    NetError::Certificate(e.to_string())
}

impl ClusterCa {
    /// A fresh CA with a new ECDSA P-256 key.
    pub fn generate() -> Result<ClusterCa, NetError> {
        let key = KeyPair::generate().map_err(cert_error)?;
        let cert = ca_params(&key).self_signed(&key).map_err(cert_error)?;
        Ok(ClusterCa {
            cert_pem: cert.pem(),
            cert: cert.der().clone(),
            key_pem: key.serialize_pem(),
        })
    }

    /// Reads `dir/ca.pem` and `dir/ca.key`.
    pub fn load(dir: &Path) -> Result<ClusterCa, NetError> {
        let cert_path = dir.join("ca.pem");
        let (cert_pem, mut certs) = read_certs(&cert_path)?;
        let key_path = dir.join("ca.key");
        let key_pem = read_file(&key_path)?;
        KeyPair::from_pem(&key_pem).map_err(|e| bad_file(&key_path, e))?;
        Ok(ClusterCa {
            cert_pem,
            cert: certs.remove(0),
            key_pem,
        })
    }

    /// Writes `dir/ca.pem` and `dir/ca.key` (mode 0600), creating `dir`.
    pub fn write(&self, dir: &Path) -> Result<(), NetError> {
        create_dir(dir)?;
        write_file(&dir.join("ca.pem"), &self.cert_pem, false)?;
        write_file(&dir.join("ca.key"), &self.key_pem, true)
    }

    /// The CA certificate, in PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Issues a certificate for `node` (its common name) with the DNS names
    /// [`SERVER_NAME`] and `localhost`, usable as server and as client.
    pub fn issue(&self, node: &str) -> Result<NodeIdentity, NetError> {
        check_node_name(node)?;
        let ca_key = KeyPair::from_pem(&self.key_pem).map_err(cert_error)?;
        let issuer = Issuer::new(ca_params(&ca_key), ca_key);
        let mut params =
            CertificateParams::new(vec![SERVER_NAME.to_string(), "localhost".to_string()])
                .map_err(cert_error)?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, node);
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().map_err(cert_error)?;
        let cert = params.signed_by(&key, &issuer).map_err(cert_error)?;
        Ok(NodeIdentity {
            chain_pem: cert.pem(),
            chain: vec![cert.der().clone()],
            key_pem: key.serialize_pem(),
            ca_pem: self.cert_pem.clone(),
            ca: self.cert.clone(),
        })
    }
}

impl NodeIdentity {
    /// Reads `dir/<node>.pem`, `dir/<node>.key` and `dir/ca.pem`. Errors
    /// name the file that is missing or bad.
    pub fn load(dir: &Path, node: &str) -> Result<NodeIdentity, NetError> {
        check_node_name(node)?;
        let chain_path = dir.join(format!("{node}.pem"));
        let (chain_pem, chain) = read_certs(&chain_path)?;
        let key_path = dir.join(format!("{node}.key"));
        let key_pem = read_file(&key_path)?;
        parse_key(&key_pem).map_err(|e| bad_file(&key_path, e))?;
        let ca_path = dir.join("ca.pem");
        let (ca_pem, mut ca) = read_certs(&ca_path)?;
        Ok(NodeIdentity {
            chain_pem,
            chain,
            key_pem,
            ca_pem,
            ca: ca.remove(0),
        })
    }

    /// Writes `dir/<node>.pem`, `dir/<node>.key` (mode 0600) and `dir/ca.pem`,
    /// creating `dir`.
    pub fn write(&self, dir: &Path, node: &str) -> Result<(), NetError> {
        check_node_name(node)?;
        create_dir(dir)?;
        write_file(&dir.join(format!("{node}.pem")), &self.chain_pem, false)?;
        write_file(&dir.join(format!("{node}.key")), &self.key_pem, true)?;
        write_file(&dir.join("ca.pem"), &self.ca_pem, false)
    }

    /// This identity presenting its certificate but trusting `ca` instead
    /// of its own CA (tests: a node whose certificate the server rejects).
    #[cfg(test)]
    pub(crate) fn trusting(&self, ca: &ClusterCa) -> NodeIdentity {
        NodeIdentity {
            ca_pem: ca.cert_pem.clone(),
            ca: ca.cert.clone(),
            ..self.clone()
        }
    }
}

/// `weir cluster init DIR`: a new CA plus the identities `jobmanager` and
/// `taskmanager` (every TaskManager may share that one) and one per name in
/// `extra`. Refuses to touch a directory that already holds `ca.key`.
/// Returns the files written.
pub fn init_cluster_dir(dir: &Path, extra: &[String]) -> Result<Vec<PathBuf>, NetError> {
    let ca_key = dir.join("ca.key");
    if ca_key.exists() {
        return Err(NetError::Exists(ca_key));
    }
    let mut nodes = BTreeSet::new();
    nodes.insert("jobmanager");
    nodes.insert("taskmanager");
    for name in extra {
        check_node_name(name)?;
        nodes.insert(name);
    }
    // Issue everything before writing anything: a bad name leaves no
    // half-initialised directory behind.
    let ca = ClusterCa::generate()?;
    let identities = nodes
        .iter()
        .map(|n| Ok((*n, ca.issue(n)?)))
        .collect::<Result<Vec<_>, NetError>>()?;
    ca.write(dir)?;
    let mut written = vec![dir.join("ca.pem"), ca_key];
    for (node, id) in identities {
        id.write(dir, node)?;
        written.push(dir.join(format!("{node}.pem")));
        written.push(dir.join(format!("{node}.key")));
    }
    Ok(written)
}

/// A quinn endpoint bound to `bind`, server and client at once, presenting
/// `id` and trusting only `id`'s CA (both directions: mutual TLS). Must be
/// called inside a tokio runtime.
pub fn endpoint(bind: SocketAddr, id: &NodeIdentity) -> Result<quinn::Endpoint, NetError> {
    let (server, client) = quic_configs(id)?;
    let mut endpoint = quinn::Endpoint::server(server, bind)
        .map_err(|source| NetError::Bind { addr: bind, source })?;
    endpoint.set_default_client_config(client);
    Ok(endpoint)
}

/// The server and client configurations behind [`endpoint`].
pub fn quic_configs(
    id: &NodeIdentity,
) -> Result<(quinn::ServerConfig, quinn::ClientConfig), NetError> {
    let tls = |e: rustls::Error| NetError::Tls(e.to_string());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    roots.add(id.ca.clone()).map_err(tls)?;
    let roots = Arc::new(roots);
    let key = parse_key(&id.key_pem).map_err(NetError::Tls)?;

    let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
        .build()
        .map_err(|e| NetError::Tls(e.to_string()))?;
    let mut server = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(id.chain.clone(), key.clone_key())
        .map_err(tls)?;
    server.alpn_protocols = vec![ALPN.to_vec()];

    let mut client = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls)?
        .with_root_certificates(roots)
        .with_client_auth_cert(id.chain.clone(), key)
        .map_err(tls)?;
    client.alpn_protocols = vec![ALPN.to_vec()];

    let quic = |e: quinn::crypto::rustls::NoInitialCipherSuite| NetError::Tls(e.to_string());
    let transport = Arc::new(transport_config());
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(
        QuicServerConfig::try_from(server).map_err(quic)?,
    ));
    server.transport_config(transport.clone());
    let mut client =
        quinn::ClientConfig::new(Arc::new(QuicClientConfig::try_from(client).map_err(quic)?));
    client.transport_config(transport);
    Ok((server, client))
}

fn transport_config() -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    t.keep_alive_interval(Some(KEEP_ALIVE))
        .max_idle_timeout(Some(quinn::IdleTimeout::from(quinn::VarInt::from_u32(
            IDLE_TIMEOUT.as_millis() as u32,
        ))))
        .stream_receive_window(quinn::VarInt::from_u32(STREAM_RECEIVE_WINDOW))
        .receive_window(quinn::VarInt::from_u32(CONNECTION_RECEIVE_WINDOW))
        .send_window(SEND_WINDOW)
        .max_concurrent_bidi_streams(quinn::VarInt::from_u32(MAX_STREAMS))
        .max_concurrent_uni_streams(quinn::VarInt::from_u32(MAX_STREAMS));
    t
}

/// Node names become file names: letters, digits, `-`, `_`, `.`; not `ca`.
fn check_node_name(node: &str) -> Result<(), NetError> {
    let ok = !node.is_empty()
        && node.len() <= 64
        && node != "ca"
        && !node.starts_with('.')
        && node
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(NetError::BadNodeName(node.to_string()))
    }
}

fn parse_key(pem: &str) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| format!("no private key: {e}"))
}

fn read_file(path: &Path) -> Result<String, NetError> {
    fs::read_to_string(path).map_err(|source| NetError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn read_certs(path: &Path) -> Result<(String, Vec<CertificateDer<'static>>), NetError> {
    let pem = read_file(path)?;
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad_file(path, e))?;
    if certs.is_empty() {
        return Err(bad_file(path, "no certificate in it"));
    }
    Ok((pem, certs))
}

fn bad_file(path: &Path, e: impl std::fmt::Display) -> NetError {
    NetError::BadFile {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

fn create_dir(dir: &Path) -> Result<(), NetError> {
    fs::create_dir_all(dir).map_err(|source| NetError::Io {
        path: dir.to_path_buf(),
        source,
    })
}

fn write_file(path: &Path, content: &str, secret: bool) -> Result<(), NetError> {
    let io = |source| NetError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = secret;
    let mut file = options.open(path).map_err(io)?;
    #[cfg(unix)]
    if secret {
        // `mode` applies only when the file is created; tighten an old one.
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(fs::Permissions::from_mode(0o600))
            .map_err(io)?;
    }
    file.write_all(content.as_bytes()).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_then_load_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let written = init_cluster_dir(dir.path(), &["edge-1".to_string()]).unwrap();
        let names: Vec<_> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_str().unwrap().to_string())
            .collect();
        for expected in [
            "ca.pem",
            "ca.key",
            "jobmanager.pem",
            "jobmanager.key",
            "taskmanager.pem",
            "taskmanager.key",
            "edge-1.pem",
            "edge-1.key",
        ] {
            assert!(
                names.iter().any(|n| n == expected),
                "{expected} in {names:?}"
            );
        }
        let id = NodeIdentity::load(dir.path(), "taskmanager").unwrap();
        let ca = ClusterCa::load(dir.path()).unwrap();
        assert_eq!(id.ca_pem, ca.cert_pem);
        // The loaded CA issues certificates that configure cleanly.
        quic_configs(&ca.issue("late-node").unwrap()).unwrap();
        quic_configs(&id).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            for key in ["ca.key", "jobmanager.key"] {
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
        init_cluster_dir(dir.path(), &[]).unwrap();
        let err = init_cluster_dir(dir.path(), &[]).unwrap_err().to_string();
        assert!(err.contains("ca.key"), "{err}");
    }

    #[test]
    fn load_names_the_missing_or_bad_file() {
        let dir = tempfile::tempdir().unwrap();
        init_cluster_dir(dir.path(), &[]).unwrap();
        let err = NodeIdentity::load(dir.path(), "nobody")
            .unwrap_err()
            .to_string();
        assert!(err.contains("nobody.pem"), "{err}");
        fs::remove_file(dir.path().join("taskmanager.key")).unwrap();
        let err = NodeIdentity::load(dir.path(), "taskmanager")
            .unwrap_err()
            .to_string();
        assert!(err.contains("taskmanager.key"), "{err}");
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
    fn node_names_must_be_file_names() {
        let ca = ClusterCa::generate().unwrap();
        for bad in ["", "ca", "../x", "a/b", ".hidden"] {
            assert!(ca.issue(bad).is_err(), "{bad:?}");
        }
        let dir = tempfile::tempdir().unwrap();
        assert!(init_cluster_dir(dir.path(), &["x/y".to_string()]).is_err());
        assert!(!dir.path().join("ca.key").exists());
    }
}
