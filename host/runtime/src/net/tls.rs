//! Mutual TLS for every connection between Weir's daemons, and the
//! identities that certificates carry.
//!
//! A cluster has one private certificate authority, the [`ClusterCa`]. Every
//! daemon holds a [`NodeIdentity`]: a certificate issued by that CA for one
//! [`Role`], its key, and the CA certificate it trusts. [`endpoint`] turns an
//! identity into a quinn endpoint that is server and client at once: as a
//! server it requires a client certificate issued by the cluster CA, as a
//! client it presents its own and trusts the cluster CA only (never the
//! system roots).
//!
//! # Identities
//!
//! | role | DNS name in the certificate | usage |
//! |---|---|---|
//! | the JobManager | [`JOBMANAGER_NAME`] | server only |
//! | TaskManager `ID` | `ID` + [`TASKMANAGER_SUFFIX`] | server and client (data plane both ways) |
//!
//! - A client names the identity it expects when it connects: a TaskManager
//!   connects to the JobManager with [`JOBMANAGER_NAME`] and to another
//!   TaskManager with [`taskmanager_name`] of the id the placement names, so
//!   any other cluster certificate fails the handshake.
//! - A server reads who its client is with [`peer_role`]: the JobManager
//!   accepts a registration only for the id in the TaskManager's
//!   certificate, a data plane accepts a stream only from a TaskManager of
//!   the job's placement.
//! - TaskManager ids in certificates are DNS labels ([`check_taskmanager_id`]):
//!   lowercase letters, digits and `-`, so that the case-insensitive name
//!   matching of TLS cannot make two ids one.
//! - Certificates expire: node certificates after [`DEFAULT_VALID_DAYS`]
//!   (or what `weir cluster init --valid-days` says), the CA after
//!   [`CA_VALID_DAYS`]. `weir cluster issue` ([`issue_in_cluster_dir`])
//!   adds or renews node certificates from the same CA, `weir cluster
//!   rotate` ([`rotate_cluster_dir`]) renews all of them with new keys.
//! - A stolen TaskManager key is revoked with `weir cluster revoke`
//!   ([`revoke_in_cluster_dir`], module `revoke`): a CRL signed by the CA,
//!   `crl.pem`, which every daemon loads from its certificate folder and
//!   checks at both ends of every handshake.
//! - Certificates from an older `weir cluster init` (one shared
//!   `taskmanager.pem` named `weir.cluster`) carry no role: daemons refuse
//!   to start with them and say to issue new ones.
//!
//! # Files
//!
//! `weir cluster init DIR --taskmanager ID...` ([`init_cluster_dir`]) writes,
//! in PEM:
//!
//! | file | content |
//! |---|---|
//! | `ca.pem` | the CA certificate: copy it to every node |
//! | `ca.key` | the CA key (mode 0600): keep it where new nodes are issued |
//! | `jobmanager.pem`, `jobmanager.key` | the JobManager's certificate and key (0600) |
//! | `taskmanager-ID.pem`, `taskmanager-ID.key` | TaskManager `ID`'s (0600) |
//!
//! # Invariants
//!
//! - TLS 1.3 only, with the ring provider passed explicitly to every config:
//!   no process-wide default provider is installed or relied on.
//! - The CA's subject name is derived from its key ([`CA_NAME`] and a key
//!   digest), so a CA loaded from `ca.pem` + `ca.key` issues certificates
//!   that chain to that `ca.pem` (rcgen cannot parse a certificate here).
//!
//! This module must not know about jobs or records.

use std::collections::BTreeMap;
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
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::CertificateRevocationListDer;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use super::NetError;

mod revoke;
pub use revoke::{CRL_FILE, REVOKED_FILE, Revoked, load_crls, revoke_in_cluster_dir};

/// The DNS name of the JobManager's certificate: the name TaskManagers
/// connect to it with.
pub const JOBMANAGER_NAME: &str = "jobmanager.weir.cluster";

/// A TaskManager's DNS name is its id followed by this.
pub const TASKMANAGER_SUFFIX: &str = ".taskmanager.weir.cluster";

/// How long a node certificate is valid by default: a year, so that a
/// leaked key stops working by itself; `weir cluster issue` renews.
pub const DEFAULT_VALID_DAYS: u32 = 365;

/// How long the cluster CA is valid: ten years (renewing it means
/// re-issuing every node certificate).
pub const CA_VALID_DAYS: u32 = 3650;

/// Node certificates start being valid this long before they were issued,
/// so that a node whose clock is a little behind accepts them.
const CLOCK_SKEW: Duration = Duration::from_secs(3600);

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

/// Whom a certificate stands for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// The JobManager.
    JobManager,
    /// The TaskManager with this id.
    TaskManager(String),
}

impl Role {
    /// The DNS name a certificate of this role carries, and that a client
    /// connecting to it verifies.
    pub fn server_name(&self) -> String {
        match self {
            Role::JobManager => JOBMANAGER_NAME.to_string(),
            Role::TaskManager(id) => taskmanager_name(id),
        }
    }

    /// The file name (without `.pem`/`.key`) its certificate is kept under.
    pub fn file_name(&self) -> String {
        match self {
            Role::JobManager => "jobmanager".to_string(),
            Role::TaskManager(id) => format!("taskmanager-{id}"),
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Role::JobManager => f.write_str("the JobManager"),
            Role::TaskManager(id) => write!(f, "TaskManager `{id}`"),
        }
    }
}

/// The DNS name of TaskManager `id`'s certificate.
pub fn taskmanager_name(id: &str) -> String {
    format!("{id}{TASKMANAGER_SUFFIX}")
}

/// A TaskManager id that can be put in a certificate: a DNS label of
/// lowercase letters, digits and `-` (not first or last), at most 63 bytes.
pub fn check_taskmanager_id(id: &str) -> Result<(), NetError> {
    let ok = !id.is_empty()
        && id.len() <= 63
        && !id.starts_with('-')
        && !id.ends_with('-')
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(NetError::BadTaskManagerId(id.to_string()))
    }
}

/// The role a certificate stands for: the one Weir name among its DNS
/// names. `None` for a certificate with no Weir name or with several
/// (never issued by [`ClusterCa`]).
pub fn role_of(cert: &CertificateDer<'_>) -> Option<Role> {
    let cert = webpki::EndEntityCert::try_from(cert).ok()?;
    let mut roles = cert.valid_dns_names().filter_map(|name| {
        if name == JOBMANAGER_NAME {
            return Some(Role::JobManager);
        }
        let id = name.strip_suffix(TASKMANAGER_SUFFIX)?;
        check_taskmanager_id(id).ok()?;
        Some(Role::TaskManager(id.to_string()))
    });
    let role = roles.next()?;
    roles.next().is_none().then_some(role)
}

/// The role of the certificate `conn`'s peer presented (verified against
/// the cluster CA during the handshake).
pub fn peer_role(conn: &quinn::Connection) -> Option<Role> {
    let certs = conn
        .peer_identity()?
        .downcast::<Vec<CertificateDer<'static>>>()
        .ok()?;
    role_of(certs.first()?)
}

/// A node's certificate chain and key, and the CA certificate it trusts.
#[derive(Clone)]
pub struct NodeIdentity {
    chain_pem: String,
    chain: Vec<CertificateDer<'static>>,
    key_pem: String,
    ca_pem: String,
    ca: CertificateDer<'static>,
    /// Revoked certificates ([`CRL_FILE`] in the certificate folder):
    /// refused at both ends of every handshake.
    crls: Vec<CertificateRevocationListDer<'static>>,
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
    set_validity(&mut params, CA_VALID_DAYS);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

/// Valid from [`CLOCK_SKEW`] ago to `days` from now. (The CA's parameters
/// are rebuilt from its key each time it issues; only its name and key
/// matter for chaining, the validity written in `ca.pem` stays.)
fn set_validity(params: &mut CertificateParams, days: u32) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    params.not_before = epoch + now.saturating_sub(CLOCK_SKEW);
    params.not_after = epoch + now + Duration::from_secs(u64::from(days) * 86_400);
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

    /// Issues a certificate for `role`, valid for `days` days from now:
    /// its DNS name is [`Role::server_name`] (the common name too); the
    /// JobManager's is a server certificate only, a TaskManager's is
    /// server and client (it opens data channels and accepts them).
    pub fn issue(&self, role: &Role, days: u32) -> Result<NodeIdentity, NetError> {
        self.issue_with_rest_names(role, days, &[])
    }

    /// [`ClusterCa::issue`]; the JobManager's certificate also names the
    /// hosts its REST API is reached at over TLS (`weir jobmanager
    /// --rest-tls`): [`DEFAULT_REST_NAMES`] and `rest_names` (DNS names or
    /// IP addresses). None of them is a Weir name, so they give no role.
    pub fn issue_with_rest_names(
        &self,
        role: &Role,
        days: u32,
        rest_names: &[String],
    ) -> Result<NodeIdentity, NetError> {
        if let Role::TaskManager(id) = role {
            check_taskmanager_id(id)?;
        }
        if days == 0 {
            return Err(NetError::Certificate(
                "a certificate must be valid for at least one day".into(),
            ));
        }
        let ca_key = KeyPair::from_pem(&self.key_pem).map_err(cert_error)?;
        let issuer = Issuer::new(ca_params(&ca_key), ca_key);
        let name = role.server_name();
        let mut names = vec![name.clone()];
        if *role == Role::JobManager {
            for rest in DEFAULT_REST_NAMES
                .iter()
                .copied()
                .chain(rest_names.iter().map(String::as_str))
            {
                check_rest_name(rest)?;
                if !names.iter().any(|n| n == rest) {
                    names.push(rest.to_owned());
                }
            }
        }
        // An IP address becomes an IP SAN, anything else a DNS name.
        let mut params = CertificateParams::new(names).map_err(cert_error)?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = match role {
            Role::JobManager => vec![ExtendedKeyUsagePurpose::ServerAuth],
            Role::TaskManager(_) => vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        };
        params.use_authority_key_identifier_extension = true;
        set_validity(&mut params, days);
        let key = KeyPair::generate().map_err(cert_error)?;
        let cert = params.signed_by(&key, &issuer).map_err(cert_error)?;
        Ok(NodeIdentity {
            chain_pem: cert.pem(),
            chain: vec![cert.der().clone()],
            key_pem: key.serialize_pem(),
            ca_pem: self.cert_pem.clone(),
            ca: self.cert.clone(),
            crls: Vec::new(),
        })
    }

    /// [`ClusterCa::issue`] for a TaskManager, valid [`DEFAULT_VALID_DAYS`].
    pub fn issue_taskmanager(&self, id: &str) -> Result<NodeIdentity, NetError> {
        self.issue(&Role::TaskManager(id.to_string()), DEFAULT_VALID_DAYS)
    }

    /// [`ClusterCa::issue`] for the JobManager, valid [`DEFAULT_VALID_DAYS`].
    pub fn issue_jobmanager(&self) -> Result<NodeIdentity, NetError> {
        self.issue(&Role::JobManager, DEFAULT_VALID_DAYS)
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
            crls: load_crls(dir)?,
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

    /// The role its certificate stands for; `None` for a certificate from
    /// an older `weir cluster init`, which named no role.
    pub fn role(&self) -> Option<Role> {
        role_of(self.chain.first()?)
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

/// `weir cluster init DIR`: a new CA plus the JobManager's identity and
/// one per TaskManager id in `taskmanagers`, valid for `days` days.
/// Refuses to touch a directory that already holds `ca.key`. Returns the
/// files written.
pub fn init_cluster_dir(
    dir: &Path,
    taskmanagers: &[String],
    days: u32,
    rest_names: &[String],
) -> Result<Vec<PathBuf>, NetError> {
    let ca_key = dir.join("ca.key");
    if ca_key.exists() {
        return Err(NetError::Exists(ca_key));
    }
    let roles = roles(true, taskmanagers)?;
    // Issue everything before writing anything: a bad id leaves no
    // half-initialised directory behind.
    let ca = ClusterCa::generate()?;
    let identities = issue_all(&ca, &roles, days, rest_names)?;
    ca.write(dir)?;
    let mut written = vec![dir.join("ca.pem"), ca_key];
    written.extend(write_all(dir, identities)?);
    Ok(written)
}

/// `weir cluster issue DIR`: (re-)issues, from the CA in `dir`, the
/// JobManager's identity (if `jobmanager`) and one per TaskManager id in
/// `taskmanagers`, replacing their files: how a node is added, and how
/// certificates are renewed before they expire. Returns the files written.
pub fn issue_in_cluster_dir(
    dir: &Path,
    jobmanager: bool,
    taskmanagers: &[String],
    days: u32,
    rest_names: &[String],
) -> Result<Vec<PathBuf>, NetError> {
    let ca = ClusterCa::load(dir)?;
    let roles = roles(jobmanager, taskmanagers)?;
    let identities = issue_all(&ca, &roles, days, rest_names)?;
    write_all(dir, identities)
}

/// `weir cluster rotate DIR`: re-issues, from the CA in `dir`, every node
/// certificate there (`jobmanager.pem` and each `taskmanager-ID.pem`) with
/// new keys, valid `days` days from now. Files of other names (such as a
/// shared `taskmanager.pem` from an older `weir cluster init`) are left
/// alone. Returns the files written.
pub fn rotate_cluster_dir(
    dir: &Path,
    days: u32,
    rest_names: &[String],
) -> Result<Vec<PathBuf>, NetError> {
    let entries = fs::read_dir(dir).map_err(|source| NetError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut jobmanager = false;
    let mut taskmanagers = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".pem")) else {
            continue;
        };
        if stem == "jobmanager" {
            jobmanager = true;
        } else if let Some(id) = stem.strip_prefix("taskmanager-")
            && check_taskmanager_id(id).is_ok()
        {
            taskmanagers.push(id.to_string());
        }
    }
    issue_in_cluster_dir(dir, jobmanager, &taskmanagers, days, rest_names)
}

/// The roles to issue, by file name (a BTreeMap: each once, in order).
fn roles(jobmanager: bool, taskmanagers: &[String]) -> Result<BTreeMap<String, Role>, NetError> {
    let mut roles = BTreeMap::new();
    if jobmanager {
        roles.insert(Role::JobManager.file_name(), Role::JobManager);
    }
    for id in taskmanagers {
        check_taskmanager_id(id)?;
        let role = Role::TaskManager(id.clone());
        roles.insert(role.file_name(), role);
    }
    Ok(roles)
}

fn issue_all(
    ca: &ClusterCa,
    roles: &BTreeMap<String, Role>,
    days: u32,
    rest_names: &[String],
) -> Result<Vec<(String, NodeIdentity)>, NetError> {
    roles
        .iter()
        .map(|(file, role)| {
            Ok((
                file.clone(),
                ca.issue_with_rest_names(role, days, rest_names)?,
            ))
        })
        .collect()
}

/// The names every JobManager certificate carries for its REST API over
/// TLS, so that `https://localhost:…` and the loopback addresses verify.
pub const DEFAULT_REST_NAMES: &[&str] = &["localhost", "127.0.0.1", "::1"];

/// A REST host name for a certificate: an IP address, or a DNS name that
/// is not a Weir name (which would make the certificate claim a role).
fn check_rest_name(name: &str) -> Result<(), NetError> {
    let bad = |why: &str| Err(NetError::Certificate(format!("REST name `{name}`: {why}")));
    if name.parse::<std::net::IpAddr>().is_ok() {
        return Ok(());
    }
    if name.is_empty() || name.len() > 253 {
        return bad("expected a host name or an IP address");
    }
    if !name.split('.').all(|l| {
        !l.is_empty() && l.len() <= 63 && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    }) {
        return bad("expected a host name (letters, digits, `-`, dot-separated) or an IP address");
    }
    let lower = name.to_ascii_lowercase();
    if lower == JOBMANAGER_NAME || lower.ends_with(TASKMANAGER_SUFFIX) {
        return bad("it is a Weir name, which names a cluster role");
    }
    Ok(())
}

/// A rustls server configuration presenting `id` for the REST API over
/// TLS (`weir jobmanager --rest-tls`): TLS 1.3, no client certificate
/// (REST clients authenticate with the token), HTTP/1.1.
pub fn rest_server_config(id: &NodeIdentity) -> Result<Arc<ServerConfig>, NetError> {
    let tls = |e: rustls::Error| NetError::Tls(e.to_string());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = parse_key(&id.key_pem).map_err(NetError::Tls)?;
    let mut server = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls)?
        .with_no_client_auth()
        .with_single_cert(id.chain.clone(), key)
        .map_err(tls)?;
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(server))
}

fn write_all(
    dir: &Path,
    identities: Vec<(String, NodeIdentity)>,
) -> Result<Vec<PathBuf>, NetError> {
    let mut written = Vec::new();
    for (node, id) in identities {
        id.write(dir, &node)?;
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
        .with_crls(id.crls.clone())
        .build()
        .map_err(|e| NetError::Tls(e.to_string()))?;
    let server_verifier = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
        .with_crls(id.crls.clone())
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
        .with_webpki_verifier(server_verifier)
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
mod tests;
