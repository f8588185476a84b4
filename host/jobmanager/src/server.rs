//! The `weir jobmanager` daemon around the core: [`serve`] runs it on the
//! [`Sockets`] it is given (the QUIC endpoint TaskManagers connect to, the
//! REST listener; [`start`] binds them from the config first), and serves each
//! TaskManager connection (registration checked against its certificate,
//! the control stream, module fetches).

use super::*;

impl From<AuthError> for StartError {
    fn from(e: AuthError) -> Self {
        StartError::RestAuth(e.to_string())
    }
}

/// A started JobManager.
pub struct RunningJobManager {
    /// The JobManager.
    pub jobmanager: Arc<JobManager>,
    /// Where TaskManagers connect.
    pub rpc_address: SocketAddr,
    /// Where the REST API listens.
    pub rest_address: SocketAddr,
    /// The file holding the REST token, when it was generated (or reused
    /// from an earlier start) rather than given.
    pub rest_token_file: Option<PathBuf>,
    /// Whether this start generated that token.
    pub rest_token_created: bool,
    /// The jobs a previous run left, taken back at this start
    /// ([`JobManager::recover`]).
    pub recovered: Vec<crate::RecoveredJob>,
    endpoint: quinn::Endpoint,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for RunningJobManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningJobManager")
            .field("rpc_address", &self.rpc_address)
            .field("rest_address", &self.rest_address)
            .field("rest_token_file", &self.rest_token_file)
            .finish_non_exhaustive()
    }
}

impl RunningJobManager {
    /// Stops serving: closes every TaskManager connection and the REST socket.
    pub async fn shutdown(self) {
        self.endpoint
            .close(0u32.into(), b"jobmanager shutting down");
        for t in &self.tasks {
            t.abort();
        }
        self.endpoint.wait_idle().await;
    }
}

/// The sockets a JobManager serves on: the QUIC endpoint TaskManagers
/// connect to (configured with the JobManager's identity, see
/// [`weir_runtime::net::tls::endpoint`]) and the REST listener. The daemon
/// owns no socket it was not given: [`bind`] makes them from the config,
/// or a caller (`weir local`, a test) binds its own.
#[derive(Debug)]
pub struct Sockets {
    /// Where TaskManagers connect.
    pub rpc: quinn::Endpoint,
    /// Where the REST API listens.
    pub rest: tokio::net::TcpListener,
}

/// Checks what can be refused before touching the disk or the network:
/// an empty token, an insecure REST address that is not loopback, a
/// certificate that is not the JobManager's.
fn precheck(config: &JobManagerConfig, rest: SocketAddr) -> Result<(), StartError> {
    config.rest_auth.check(rest)?;
    if config.identity.role() != Some(Role::JobManager) {
        return Err(StartError::Identity(
            "the certificate is not the JobManager's (TaskManagers would refuse it): issue \
             one with `weir cluster issue DIR --jobmanager`"
                .into(),
        ));
    }
    Ok(())
}

/// Binds `config.rpc` and `config.rest` (port 0: any free port).
pub async fn bind(config: &JobManagerConfig) -> Result<Sockets, StartError> {
    let rpc = weir_runtime::net::tls::endpoint(config.rpc, &config.identity).map_err(|e| {
        StartError::Bind {
            address: config.rpc,
            message: e.to_string(),
        }
    })?;
    let rest = tokio::net::TcpListener::bind(config.rest)
        .await
        .map_err(|e| StartError::Bind {
            address: config.rest,
            message: e.to_string(),
        })?;
    Ok(Sockets { rpc, rest })
}

/// Starts a JobManager on the current tokio runtime: binds its sockets
/// ([`bind`]), then [`serve`]s on them.
pub async fn start(
    config: JobManagerConfig,
    runtime: Arc<Runtime>,
) -> Result<RunningJobManager, StartError> {
    // Before touching the disk or binding: an empty token or an insecure
    // non-loopback address is refused whatever else is wrong.
    precheck(&config, config.rest)?;
    let sockets = bind(&config).await?;
    serve(sockets, config, runtime).await
}

/// Serves a JobManager on `sockets` (the addresses in `config` are not
/// used: the REST rules apply to the address `sockets.rest` is bound to):
/// opens the data dir and the module store, then runs the clock, the REST
/// server and the TaskManager endpoint on the current tokio runtime.
/// `runtime` compiles uploaded modules to validate them (its cache should
/// live in the data dir).
pub async fn serve(
    sockets: Sockets,
    config: JobManagerConfig,
    runtime: Arc<Runtime>,
) -> Result<RunningJobManager, StartError> {
    let Sockets {
        rpc: endpoint,
        rest: listener,
    } = sockets;
    let bound = |address: SocketAddr, e: std::io::Error| StartError::Bind {
        address,
        message: e.to_string(),
    };
    let rpc_address = endpoint.local_addr().map_err(|e| bound(config.rpc, e))?;
    let rest_address = listener.local_addr().map_err(|e| bound(config.rest, e))?;
    precheck(&config, rest_address)?;
    std::fs::create_dir_all(&config.data_dir).map_err(|e| StartError::DataDir {
        path: config.data_dir.clone(),
        message: e.to_string(),
    })?;
    let auth = config.rest_auth.resolve(rest_address, &config.data_dir)?;
    let store =
        ModuleStore::open(&config.data_dir.join("modules")).map_err(|e| StartError::DataDir {
            path: config.data_dir.clone(),
            message: e.to_string(),
        })?;
    let jm = JobManager::new(config.core(), runtime, store);
    // The jobs a previous run left, taken back before anything is served.
    let recovering = jm.clone();
    let data_dir = config.data_dir.clone();
    let recovered = tokio::task::spawn_blocking(move || recovering.recover(&data_dir))
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r)
        .map_err(|message| StartError::DataDir {
            path: config.data_dir.clone(),
            message,
        })?;
    let mut tasks = vec![jm.clone().spawn_clock()];
    let router = rest::router(
        jm.clone(),
        rest::RestOptions {
            token: auth.token,
            listen: rest_address,
            read_timeout: config.rest_read_timeout,
            upload_timeout: config.rest_upload_timeout,
        },
    );
    let tls = if config.rest_tls {
        let server = weir_runtime::net::tls::rest_server_config(&config.identity)
            .map_err(|e| StartError::Identity(format!("REST over TLS: {e}")))?;
        Some(tokio_rustls::TlsAcceptor::from(server))
    } else {
        None
    };
    tasks.push(tokio::spawn(rest::serve(
        listener,
        router,
        config.rest_read_timeout,
        tls,
    )));
    let accept = endpoint.clone();
    let server = jm.clone();
    tasks.push(tokio::spawn(async move {
        while let Some(incoming) = accept.accept().await {
            let jm = server.clone();
            tokio::spawn(async move {
                match incoming.await {
                    Ok(conn) => serve_taskmanager(jm, conn).await,
                    Err(e) => tracing::info!("refused a connection: {e}"),
                }
            });
        }
    }));
    Ok(RunningJobManager {
        jobmanager: jm,
        rpc_address,
        rest_address,
        rest_token_file: auth.token_file,
        rest_token_created: auth.created,
        recovered,
        endpoint,
        tasks,
    })
}

/// Why a TaskManager claiming `id` may not register with the certificate
/// of `role`; `None` if it may (the certificate is TaskManager `id`'s).
pub(crate) fn certificate_refuses(role: Option<Role>, id: &str) -> Option<String> {
    match role {
        Some(Role::TaskManager(certified)) if certified == id => None,
        Some(Role::TaskManager(certified)) => Some(format!(
            "TaskManager `{certified}`'s certificate cannot register as `{id}`"
        )),
        Some(Role::JobManager) => Some(format!(
            "the JobManager's certificate cannot register as TaskManager `{id}`"
        )),
        None => Some(format!(
            "the certificate of TaskManager `{id}` names no TaskManager (a shared \
             `taskmanager.pem` from an older `weir cluster init`?): issue one per TaskManager \
             with `weir cluster issue DIR --taskmanager {id}`"
        )),
    }
}

/// How long a new connection may take to register.
pub(crate) const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) async fn serve_taskmanager(jm: Arc<JobManager>, conn: quinn::Connection) {
    let remote = conn.remote_address();
    let registered = tokio::time::timeout(REGISTER_TIMEOUT, async {
        let (mut send, mut recv) = conn.accept_bi().await.map_err(|e| e.to_string())?;
        let first: Option<ToJobManager> = read_frame(&mut recv).await.map_err(|e| e.to_string())?;
        match first {
            Some(ToJobManager::Register {
                id,
                slots,
                data_address,
                version,
            }) => {
                let refusal = if version != env!("CARGO_PKG_VERSION") {
                    Some(format!(
                        "version mismatch: TaskManager {version}, JobManager {}",
                        env!("CARGO_PKG_VERSION")
                    ))
                } else {
                    certificate_refuses(peer_role(&conn), &id)
                };
                if let Some(reason) = refusal {
                    let _ = write_frame(
                        &mut send,
                        &ToTaskManager::Rejected {
                            reason: reason.clone(),
                        },
                    )
                    .await;
                    let _ = send.finish();
                    // Let the answer arrive before the connection closes.
                    let _ = tokio::time::timeout(Duration::from_secs(2), send.stopped()).await;
                    return Err(reason);
                }
                Ok((send, recv, id, slots, data_address))
            }
            _ => Err("the first control message was not a registration".to_owned()),
        }
    })
    .await;
    let (mut send, mut recv, id, slots, data_address) = match registered {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            tracing::info!(%remote, "registration failed: {e}");
            conn.close(1u32.into(), b"registration failed");
            return;
        }
        Err(_) => {
            tracing::info!(%remote, "no registration within {REGISTER_TIMEOUT:?}");
            conn.close(1u32.into(), b"registration timeout");
            return;
        }
    };
    let session = random_u64();
    let (tx, mut rx) = mpsc::unbounded_channel::<ToTaskManager>();
    let _ = tx.send(ToTaskManager::Registered {
        heartbeat_interval_ms: jm.heartbeat_interval.as_millis() as u64,
    });
    jm.register(&id, slots, data_address, tx, session);

    // Writer: everything the JobManager says to this TaskManager.
    let writer = tokio::spawn(async move {
        while let Some(message) = rx.recv().await {
            if write_frame(&mut send, &message).await.is_err() {
                break;
            }
        }
        let _ = send.shutdown().await;
    });
    // Module fetches on further streams.
    let fetches = {
        let conn = conn.clone();
        let jm = jm.clone();
        tokio::spawn(async move {
            while let Ok((send, recv)) = conn.accept_bi().await {
                let jm = jm.clone();
                tokio::spawn(serve_fetch(jm, send, recv));
            }
        })
    };
    let reason = loop {
        match read_frame::<_, ToJobManager>(&mut recv).await {
            Ok(Some(message)) => jm.on_message(&id, session, message),
            Ok(None) => break "the TaskManager closed its control stream".to_owned(),
            Err(e) => break format!("connection lost: {e}"),
        }
    };
    jm.lose_if_current(&id, session, reason);
    writer.abort();
    fetches.abort();
    conn.close(0u32.into(), b"bye");
}

pub(crate) async fn serve_fetch(
    jm: Arc<JobManager>,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
) {
    let request: FetchModule = match read_frame(&mut recv).await {
        Ok(Some(r)) => r,
        _ => return,
    };
    let bytes = {
        let jm = jm.clone();
        let hash = request.hash.clone();
        tokio::task::spawn_blocking(move || jm.store.read(&hash)).await
    };
    let result = match bytes {
        Ok(Ok(bytes)) => {
            let header = ModuleHeader {
                size: Some(bytes.len() as u64),
                error: None,
            };
            match write_frame(&mut send, &header).await {
                Ok(()) => send.write_all(&bytes).await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            }
        }
        Ok(Err(e)) => write_frame(
            &mut send,
            &ModuleHeader {
                size: None,
                error: Some(e.to_string()),
            },
        )
        .await
        .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    if let Err(e) = result {
        tracing::info!(hash = %request.hash, "module fetch failed: {e}");
    }
    let _ = send.finish();
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;
    use weir_runtime::net::tls::ClusterCa;
    use weir_runtime::wasm::RuntimeConfig;

    use super::*;

    /// The status line of `GET path` on `address`, with `token` if given.
    async fn get(address: SocketAddr, path: &str, token: Option<&str>) -> String {
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: {address}\r\n{auth}Connection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response.lines().next().unwrap_or_default().to_owned()
    }

    #[test]
    fn daemons_serve_on_the_sockets_they_are_given() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let ca = ClusterCa::generate().unwrap();
            let identity = ca.issue_jobmanager().unwrap();
            // The caller binds: port 0, then the addresses it got.
            let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
            let rpc = weir_runtime::net::tls::endpoint(any, &identity).unwrap();
            let rest = tokio::net::TcpListener::bind(any).await.unwrap();
            let (rpc_at, rest_at) = (rpc.local_addr().unwrap(), rest.local_addr().unwrap());
            // The config's addresses name other ports: they are not bound.
            let unused: SocketAddr = "127.0.0.1:9".parse().unwrap();
            let mut config = JobManagerConfig::new(unused, unused, dir.path().join("jm"), identity);
            config.rest_auth = RestAuth::Token("s3cret-token".into());
            let runtime = Arc::new(Runtime::new(RuntimeConfig { cache_dir: None }).unwrap());
            let jm = serve(Sockets { rpc, rest }, config, runtime).await.unwrap();
            assert_eq!((jm.rpc_address, jm.rest_address), (rpc_at, rest_at));
            let refused = get(rest_at, "/v1/overview", None).await;
            assert!(refused.contains(" 401 "), "{refused}");
            let answered = get(rest_at, "/v1/overview", Some("s3cret-token")).await;
            assert!(answered.contains(" 200 "), "{answered}");

            // A TaskManager on an endpoint its caller bound registers
            // through the JobManager's given endpoint, and advertises the
            // address of its own.
            let tm_identity = ca.issue_taskmanager("tm-1").unwrap();
            let tm_endpoint = weir_runtime::net::tls::endpoint(any, &tm_identity).unwrap();
            let tm_at = tm_endpoint.local_addr().unwrap();
            let tm_config = weir_taskmanager::TaskManagerConfig {
                id: Some("tm-1".into()),
                jobmanager: rpc_at,
                slots: 1,
                data_dir: dir.path().join("tm"),
                identity: tm_identity,
                bind: unused,
                net: weir_runtime::net::NetConfig::default(),
                allowed_roots: AllowedRoots::none(),
                metrics: None,
            };
            let runtime = Arc::new(Runtime::new(RuntimeConfig { cache_dir: None }).unwrap());
            let mut tm = weir_taskmanager::serve(tm_endpoint, tm_config, runtime)
                .await
                .unwrap();
            // A generous bound: a broken registration fails the test
            // instead of hanging it.
            tokio::time::timeout(std::time::Duration::from_secs(120), tm.registered(1))
                .await
                .expect("the TaskManager registers");
            let registered = jm.jobmanager.taskmanagers();
            assert_eq!(registered.len(), 1, "{registered:?}");
            assert_eq!(registered[0].data_address, tm_at.to_string());
            tm.shutdown().await;
            jm.shutdown().await;
        });
    }
}
