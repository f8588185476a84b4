//! Who may use the REST API: the bearer token, where it comes from, and the
//! `Host` allow-list.
//!
//! # The token
//!
//! The REST API requires `Authorization: Bearer <token>` on every interface,
//! loopback included ([`RestAuth::Generated`] is the default). The token is
//! either given (`--rest-token`, [`RestAuth::Token`]) or generated at first
//! start: 32 random bytes, hex, written to `DATA_DIR/rest-token`
//! ([`TOKEN_FILE`]) with mode `0600` and reused on later starts, so that the
//! CLI of the same user finds it and nobody else can read it. The only way
//! to serve without a token is [`RestAuth::InsecureLoopback`]
//! (`--rest-insecure-loopback`), refused unless the REST address is
//! loopback. Empty tokens are refused; tokens are compared in constant time
//! ([`token_matches`]).
//!
//! # The `Host` header
//!
//! A web page can make a browser send requests to `127.0.0.1` through a
//! name it controls (DNS rebinding). On a loopback listener only requests
//! whose `Host` names the loopback ([`host_allowed`]: `localhost`,
//! `127.0.0.1`, `[::1]`, or the listen address itself, any port) are
//! served. On other interfaces any `Host` is served: a token is always
//! required there, and a page cannot know it.
//!
//! This module reads and writes only the token file; it must not know the
//! routes.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

/// The token file's name in the JobManager's data dir.
pub const TOKEN_FILE: &str = "rest-token";

/// Random bytes in a generated token: 256 bits, beyond guessing.
const TOKEN_BYTES: usize = 32;

/// How the REST API authenticates requests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RestAuth {
    /// The token in `DATA_DIR/rest-token`, generated (mode `0600`) if the
    /// file does not exist yet. The default.
    #[default]
    Generated,
    /// This token (`--rest-token`); nothing is written.
    Token(String),
    /// No token (`--rest-insecure-loopback`): only on a loopback address.
    InsecureLoopback,
}

/// Why the REST API's authentication cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// An empty (or blank) token was given.
    #[error(
        "the REST token is empty: give a non-empty --rest-token (or WEIR_REST_TOKEN), or none to use the generated one"
    )]
    EmptyToken,
    /// A token with characters that cannot travel in an HTTP header.
    #[error("the REST token must be printable ASCII without spaces")]
    BadToken,
    /// `--rest-insecure-loopback` with a non-loopback address.
    #[error(
        "--rest-insecure-loopback serves REST without a token, which is allowed only on a loopback address, not on {address}"
    )]
    InsecureNotLoopback {
        /// The REST address.
        address: SocketAddr,
    },
    /// The token file cannot be read or written.
    #[error("REST token file {}: {message}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
}

/// The outcome of [`RestAuth::resolve`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedAuth {
    /// The token every request must send; `None` only for
    /// [`RestAuth::InsecureLoopback`].
    pub token: Option<String>,
    /// Where the token is stored, for a generated (or reused) one.
    pub token_file: Option<PathBuf>,
    /// Whether the file was created by this start.
    pub created: bool,
}

impl RestAuth {
    /// Checks the settings against the REST address, without touching the
    /// disk: an empty token, or no token off loopback, is an error.
    pub fn check(&self, rest: SocketAddr) -> Result<(), AuthError> {
        match self {
            RestAuth::Generated => Ok(()),
            RestAuth::Token(t) => check_token(t),
            RestAuth::InsecureLoopback if rest.ip().is_loopback() => Ok(()),
            RestAuth::InsecureLoopback => Err(AuthError::InsecureNotLoopback { address: rest }),
        }
    }

    /// [`check`](Self::check)s, then finds the token: the given one, or the
    /// one in `data_dir`'s [`TOKEN_FILE`] (created if missing).
    pub fn resolve(&self, rest: SocketAddr, data_dir: &Path) -> Result<ResolvedAuth, AuthError> {
        self.check(rest)?;
        Ok(match self {
            RestAuth::Generated => {
                let path = data_dir.join(TOKEN_FILE);
                let (token, created) = load_or_create(&path)?;
                ResolvedAuth {
                    token: Some(token),
                    token_file: Some(path),
                    created,
                }
            }
            RestAuth::Token(t) => ResolvedAuth {
                token: Some(t.clone()),
                token_file: None,
                created: false,
            },
            RestAuth::InsecureLoopback => ResolvedAuth {
                token: None,
                token_file: None,
                created: false,
            },
        })
    }
}

/// Refuses an empty token, or one that cannot be sent in a header.
pub fn check_token(token: &str) -> Result<(), AuthError> {
    if token.trim().is_empty() {
        return Err(AuthError::EmptyToken);
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(AuthError::BadToken);
    }
    Ok(())
}

/// Reads the token in `path`, or creates the file (mode `0600`) with a new
/// random token. Returns the token and whether it was created. An existing
/// file must be a regular file (not a symlink) that only its owner can read
/// or write.
pub fn load_or_create(path: &Path) -> Result<(String, bool), AuthError> {
    let err = |message: String| AuthError::File {
        path: path.to_path_buf(),
        message,
    };
    let mut options = std::fs::OpenOptions::new();
    // `create_new` never follows a symlink nor reuses a file someone else
    // placed there.
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    match options.open(path) {
        Ok(mut file) => {
            let token = generate().map_err(err)?;
            file.write_all(format!("{token}\n").as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(|e| err(format!("cannot write: {e}")))?;
            Ok((token, true))
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            check_private(path).map_err(err)?;
            Ok((read_token_file(path).map_err(err)?, false))
        }
        Err(e) => Err(err(format!("cannot create: {e}"))),
    }
}

/// Refuses a token file that is a symlink, not a regular file, owned by
/// another user, or open to group or others.
fn check_private(path: &Path) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("cannot read: {e}"))?;
    if !meta.file_type().is_file() {
        return Err("is not a regular file (a symlink?); delete it to generate a new token".into());
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let me = rustix::process::geteuid().as_raw();
        if meta.uid() != me {
            return Err(format!(
                "is owned by uid {}, not by this user (uid {me}): someone else may have \
                 planted it; delete it to generate a new token",
                meta.uid()
            ));
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(format!(
                "is open to other users (mode {mode:04o}): the token may be known; delete the \
                 file to generate a new token, or `chmod 600` it"
            ));
        }
    }
    Ok(())
}

/// The token in a token file (its first line, trimmed); an empty one is an
/// error.
pub fn read_token_file(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    let token = text.lines().next().unwrap_or("").trim().to_owned();
    check_token(&token).map_err(|e| format!("{e}; delete the file to generate a new token"))?;
    Ok(token)
}

/// A new random token: [`TOKEN_BYTES`] from the system's secure random
/// source (through rustls' ring provider, already a dependency), as hex.
fn generate() -> Result<String, String> {
    let mut bytes = [0u8; TOKEN_BYTES];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut bytes)
        .map_err(|_| "no secure random source to generate a token".to_owned())?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether an `Authorization` header value is `Bearer <expected>`. The
/// comparison takes the same time wherever the first difference is (only a
/// length mismatch returns early, and a generated token's length is public).
pub fn token_matches(authorization: Option<&[u8]>, expected: &str) -> bool {
    let Some(given) = authorization.and_then(|v| v.strip_prefix(b"Bearer ")) else {
        return false;
    };
    constant_time_eq(given, expected.as_bytes())
}

/// `a == b` without an early exit on the first differing byte.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // Keep the compiler from turning the fold back into an early exit.
    std::hint::black_box(diff) == 0
}

/// Whether a request may be served given the host it names (its `Host`
/// header, or the authority of an absolute URI), on a server listening on
/// `listen`. Off loopback every host is accepted (a token is required
/// there); on loopback only `localhost`, `127.0.0.1`, `[::1]` and the
/// listen address itself, with any port or none. A request naming no host
/// (HTTP/1.0) is accepted: browsers always send one.
pub fn host_allowed(host: Option<&str>, listen: SocketAddr) -> bool {
    if !listen.ip().is_loopback() {
        return true;
    }
    let Some(host) = host else {
        return true;
    };
    let Some(name) = host_name(host) else {
        return false;
    };
    if name.eq_ignore_ascii_case("localhost") {
        return true;
    }
    match name.parse::<IpAddr>() {
        Ok(ip) => {
            ip == listen.ip()
                || ip == IpAddr::from([127, 0, 0, 1])
                || ip == IpAddr::from(std::net::Ipv6Addr::LOCALHOST)
        }
        Err(_) => false,
    }
}

/// The name in `host[:port]` or `[v6][:port]` (brackets removed); `None`
/// if the port is not a number or the brackets do not close.
fn host_name(host: &str) -> Option<&str> {
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let (name, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (name, port)
    } else {
        match host.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        }
    };
    if let Some(port) = port
        && (port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    Some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn loopback_accepts_only_loopback_names() {
        let listen = addr("127.0.0.1:8081");
        for ok in [
            "localhost",
            "localhost:8081",
            "LOCALHOST:9000",
            "127.0.0.1",
            "127.0.0.1:8081",
            "[::1]",
            "[::1]:8081",
        ] {
            assert!(host_allowed(Some(ok), listen), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8081",
            "localhost.evil.example",
            "127.0.0.2:8081",
            "10.0.0.1:8081",
            "localhost:80x",
            "localhost:",
            "[::1",
            "[::1]x",
            "",
        ] {
            assert!(!host_allowed(Some(bad), listen), "{bad}");
        }
        assert!(host_allowed(None, listen), "no Host (HTTP/1.0)");
        assert!(
            host_allowed(Some("127.0.0.2:1"), addr("127.0.0.2:8081")),
            "the listen address itself"
        );
        assert!(host_allowed(Some("[::1]:1"), addr("[::1]:8081")));
    }

    #[test]
    fn other_interfaces_accept_any_host() {
        for listen in ["0.0.0.0:8081", "10.1.2.3:8081", "[::]:8081"] {
            assert!(host_allowed(Some("evil.example"), addr(listen)), "{listen}");
        }
    }

    #[test]
    fn tokens_match_exactly() {
        assert!(token_matches(Some(b"Bearer s3cret"), "s3cret"));
        assert!(!token_matches(Some(b"Bearer s3creT"), "s3cret"));
        assert!(!token_matches(Some(b"Bearer s3cre"), "s3cret"));
        assert!(!token_matches(Some(b"Bearer s3crets"), "s3cret"));
        assert!(!token_matches(Some(b"Basic s3cret"), "s3cret"));
        assert!(!token_matches(Some(b"s3cret"), "s3cret"));
        assert!(!token_matches(None, "s3cret"));
    }

    #[test]
    fn empty_and_unsendable_tokens_are_refused() {
        let lo = addr("127.0.0.1:0");
        assert!(matches!(
            RestAuth::Token(String::new()).check(lo),
            Err(AuthError::EmptyToken)
        ));
        assert!(matches!(
            RestAuth::Token("  ".into()).check(lo),
            Err(AuthError::EmptyToken)
        ));
        assert!(matches!(
            RestAuth::Token("a b".into()).check(lo),
            Err(AuthError::BadToken)
        ));
        assert!(RestAuth::Token("t".into()).check(lo).is_ok());
    }

    #[test]
    fn insecure_only_on_loopback() {
        assert!(
            RestAuth::InsecureLoopback
                .check(addr("127.0.0.1:0"))
                .is_ok()
        );
        assert!(RestAuth::InsecureLoopback.check(addr("[::1]:0")).is_ok());
        let e = RestAuth::InsecureLoopback
            .check(addr("0.0.0.0:8081"))
            .unwrap_err();
        assert!(e.to_string().contains("0.0.0.0:8081"), "{e}");
        assert!(RestAuth::Generated.check(addr("0.0.0.0:0")).is_ok());
    }

    #[test]
    fn generated_token_is_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let first = RestAuth::Generated
            .resolve(addr("127.0.0.1:0"), dir.path())
            .unwrap();
        let token = first.token.clone().unwrap();
        assert_eq!(token.len(), 2 * TOKEN_BYTES, "{token}");
        assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{token}");
        assert!(first.created);
        let file = dir.path().join(TOKEN_FILE);
        assert_eq!(first.token_file.as_deref(), Some(file.as_path()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&file).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let again = RestAuth::Generated
            .resolve(addr("127.0.0.1:0"), dir.path())
            .unwrap();
        assert_eq!(again.token, first.token, "reused");
        assert!(!again.created);
        let other = tempfile::tempdir().unwrap();
        let fresh = RestAuth::Generated
            .resolve(addr("127.0.0.1:0"), other.path())
            .unwrap();
        assert_ne!(fresh.token, first.token, "random");
    }

    #[cfg(unix)]
    #[test]
    fn token_files_open_to_others_or_empty_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(TOKEN_FILE);
        std::fs::write(&file, "abc\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = load_or_create(&file).unwrap_err().to_string();
        assert!(e.contains("0644") && e.contains("rest-token"), "{e}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(load_or_create(&file).unwrap(), ("abc".to_owned(), false));
        std::fs::write(&file, "\n").unwrap();
        let e = load_or_create(&file).unwrap_err().to_string();
        assert!(e.contains("empty"), "{e}");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let e = load_or_create(&link).unwrap_err().to_string();
        assert!(e.contains("regular file"), "{e}");
    }

    #[cfg(unix)]
    #[test]
    fn a_token_file_of_another_user_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        if rustix::process::geteuid().as_raw() != 0 {
            // Only root can give a file away; CI runs as root.
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(TOKEN_FILE);
        std::fs::write(&file, "planted\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let nobody = rustix::process::Uid::from_raw(65534);
        rustix::fs::chown(&file, Some(nobody), None).unwrap();
        let e = load_or_create(&file).unwrap_err().to_string();
        assert!(e.contains("owned by uid 65534"), "{e}");
    }
}
