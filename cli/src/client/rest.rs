//! The REST side of the client: a thin blocking HTTP client ([`Rest`])
//! that turns every failure into a [`Failure`] with its exit code. The
//! REST types it reads are the JobManager's own.

use super::*;

/// How long to wait for a TCP connection: a JobManager on this machine or
/// the LAN answers in milliseconds; a wrong address should fail quickly.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long to wait for the response after the request was sent. Generous:
/// the server validates (compiles) an uploaded component before answering.
pub(super) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(300);

/// A failed command: the error to print and the exit code it deserves.
#[derive(Debug)]
pub struct Failure {
    /// 2 refused / bad input, 1 server failure / unreachable.
    pub code: u8,
    /// What went wrong, said for the user.
    pub error: anyhow::Error,
}

impl Failure {
    /// The request or the local input is wrong (exit code 2).
    pub fn refused(error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            code: 2,
            error: error.into(),
        }
    }

    /// The server failed or could not be reached (exit code 1).
    pub fn failed(error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            code: 1,
            error: error.into(),
        }
    }

    pub(super) fn context(self, what: impl std::fmt::Display + Send + Sync + 'static) -> Failure {
        Failure {
            code: self.code,
            error: self.error.context(what),
        }
    }
}

// The REST types are the JobManager's own (`weir_host::jobmanager`'s
// views, read leniently: unknown fields ignored, counters and lists a
// server left out read as zero or empty).
pub use weir_host::jobmanager::modules::ModuleInfo;
pub use weir_host::jobmanager::{
    CheckpointsView, JobCreated, JobDetail, JobSummary, TaskManagerInfo,
};

/// A JobManager's REST API, blocking.
pub struct Rest {
    base: String,
    agent: ureq::Agent,
    /// `Authorization: Bearer <token>` on every request when set.
    token: Option<String>,
}

impl Rest {
    /// A client for the JobManager at `url` (`http://host:port`; a bare
    /// `host:port` means http).
    pub fn new(url: &str) -> Rest {
        let url = url.trim().trim_end_matches('/');
        let base = if url.contains("://") {
            url.to_owned()
        } else {
            format!("http://{url}")
        };
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_recv_response(Some(RESPONSE_TIMEOUT))
            .build();
        Rest {
            base,
            agent: config.into(),
            token: None,
        }
    }

    /// The same client trusting, for an `https` JobManager
    /// (`weir jobmanager --rest-tls`), the certificates in PEM `ca` (the
    /// cluster's `ca.pem`), and nothing else. An https URL without one is
    /// refused: Weir carries no web roots, the JobManager's certificate is
    /// the cluster CA's.
    pub fn with_ca(mut self, ca: Option<(&Path, &[u8])>) -> Result<Rest, Failure> {
        let https = self.base.starts_with("https://");
        let Some((file, pem)) = ca else {
            if https {
                return Err(Failure::refused(anyhow!(
                    "{} is https: give the cluster's CA certificate with --ca FILE (or \
                     WEIR_CA), the ca.pem of `weir cluster init`",
                    self.base
                )));
            }
            return Ok(self);
        };
        let certs = ureq::tls::parse_pem(pem)
            .filter_map(|item| match item {
                Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect::<Vec<_>>();
        if certs.is_empty() {
            return Err(Failure::refused(anyhow!(
                "--ca {}: no PEM certificate in it",
                file.display()
            )));
        }
        let tls = ureq::tls::TlsConfig::builder()
            .provider(ureq::tls::TlsProvider::Rustls)
            .root_certs(ureq::tls::RootCerts::new_with_certs(&certs))
            .unversioned_rustls_crypto_provider(std::sync::Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .build();
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_recv_response(Some(RESPONSE_TIMEOUT))
            .tls_config(tls)
            .build();
        self.agent = config.into();
        Ok(self)
    }

    /// Sends `Authorization: Bearer <token>` with every request.
    pub fn with_token(mut self, token: Option<String>) -> Rest {
        self.token = token.filter(|t| !t.is_empty());
        self
    }

    pub(super) fn auth<B>(&self, request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.token {
            Some(t) => request.header("authorization", format!("Bearer {t}")),
            None => request,
        }
    }

    pub(super) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// GET `path`, expecting JSON.
    pub fn get(&self, path: &str) -> Result<Value, Failure> {
        let r = self.auth(self.agent.get(self.url(path))).call();
        self.answer(r).map(|(_, v)| v)
    }

    /// POST `body` as JSON to `path`, expecting JSON.
    pub fn post_json(&self, path: &str, body: &Value) -> Result<Value, Failure> {
        let r = self.auth(self.agent.post(self.url(path))).send_json(body);
        self.answer(r).map(|(_, v)| v)
    }

    /// POST with an empty body.
    pub fn post_empty(&self, path: &str) -> Result<Value, Failure> {
        let r = self.auth(self.agent.post(self.url(path))).send_empty();
        self.answer(r).map(|(_, v)| v)
    }

    /// POST /v1/modules: streams `file` (its bytes, `len` of them) with a
    /// progress bar on stderr unless `quiet`. Returns the status (201
    /// created, 200 already there) and the `Module` JSON.
    pub fn upload(
        &self,
        file: &Path,
        name: &str,
        version: Option<&str>,
        quiet: bool,
    ) -> Result<(u16, Value), Failure> {
        let f = std::fs::File::open(file)
            .with_context(|| format!("cannot open {}", file.display()))
            .map_err(Failure::refused)?;
        let len = f
            .metadata()
            .with_context(|| format!("cannot read {}", file.display()))
            .map_err(Failure::refused)?
            .len();
        let bar = if quiet || !std::io::stderr().is_terminal() {
            indicatif::ProgressBar::hidden()
        } else {
            let style = indicatif::ProgressStyle::with_template(
                "{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec}",
            )
            .expect("the template is valid")
            .progress_chars("=> ");
            indicatif::ProgressBar::new(len)
                .with_style(style)
                .with_message(format!("uploading {name}"))
        };
        let mut request = self
            .auth(self.agent.post(self.url("/v1/modules")))
            .query("name", name)
            .header("content-type", "application/wasm")
            .header("content-length", len.to_string());
        if let Some(v) = version {
            request = request.query("version", v);
        }
        let body = ureq::SendBody::from_owned_reader(bar.wrap_read(f));
        let r = request.send(body);
        bar.finish_and_clear();
        self.answer(r)
    }

    /// Turns a response (or the failure to get one) into the JSON body or a
    /// [`Failure`] carrying the server's message.
    pub(super) fn answer(
        &self,
        r: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<(u16, Value), Failure> {
        let mut response = r.map_err(|e| self.unreachable(e))?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .read_to_string()
            .map_err(|e| self.unreachable(e))?;
        if status >= 400 {
            let mut message = error_message(status, &text);
            if status == 401 {
                message.push_str(
                    "\nhint: the token is in the JobManager's DATA_DIR/rest-token (`weir local` \
                     prints the path): point --rest-token-file or WEIR_REST_TOKEN_FILE at it",
                );
            }
            return Err(if status < 500 {
                Failure::refused(anyhow!(message))
            } else {
                Failure::failed(anyhow!(message))
            });
        }
        if text.trim().is_empty() {
            return Ok((status, Value::Null));
        }
        let value = serde_json::from_str(&text)
            .with_context(|| format!("the JobManager at {} answered with invalid JSON", self.base))
            .map_err(Failure::failed)?;
        Ok((status, value))
    }

    pub(super) fn unreachable(&self, e: ureq::Error) -> Failure {
        Failure::failed(anyhow!(
            "cannot reach the JobManager at {}: {e}\n\
             hint: start one with `weir jobmanager` (or `weir local`), or point \
             --jobmanager / WEIR_JOBMANAGER at it",
            self.base
        ))
    }
}

/// The message of an error response: its `{"error": …}`, else its text, else
/// the status.
pub fn error_message(status: u16, body: &str) -> String {
    if let Ok(v) = serde_json::from_str::<Value>(body)
        && let Some(m) = v.get("error").and_then(Value::as_str)
    {
        return m.to_owned();
    }
    let body = body.trim();
    if body.is_empty() {
        format!("the JobManager answered HTTP {status}")
    } else {
        format!("the JobManager answered HTTP {status}: {body}")
    }
}

/// Percent-encodes one URL path segment (a job id or a module reference).
pub fn path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~@:".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

pub(super) fn decode<T: serde::de::DeserializeOwned>(v: Value, what: &str) -> Result<T, Failure> {
    serde_json::from_value(v)
        .with_context(|| format!("cannot read the JobManager's {what}"))
        .map_err(Failure::failed)
}
