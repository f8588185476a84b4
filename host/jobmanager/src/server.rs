//! The `weir jobmanager` daemon around the core: [`start`] binds the QUIC
//! endpoint TaskManagers connect to and the REST server, and serves each
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

/// Starts a JobManager on the current tokio runtime: RPC endpoint, REST
/// server and heartbeat monitor. `runtime` compiles uploaded modules to
/// validate them (its cache should live in the data dir).
pub async fn start(
    config: JobManagerConfig,
    runtime: Arc<Runtime>,
) -> Result<RunningJobManager, StartError> {
    // Before touching the disk: an empty token or an insecure non-loopback
    // address is refused whatever else is wrong.
    config.rest_auth.check(config.rest)?;
    if config.identity.role() != Some(Role::JobManager) {
        return Err(StartError::Identity(
            "the certificate is not the JobManager's (TaskManagers would refuse it): issue \
             one with `weir cluster issue DIR --jobmanager`"
                .into(),
        ));
    }
    std::fs::create_dir_all(&config.data_dir).map_err(|e| StartError::DataDir {
        path: config.data_dir.clone(),
        message: e.to_string(),
    })?;
    let auth = config.rest_auth.resolve(config.rest, &config.data_dir)?;
    let store =
        ModuleStore::open(&config.data_dir.join("modules")).map_err(|e| StartError::DataDir {
            path: config.data_dir.clone(),
            message: e.to_string(),
        })?;
    let endpoint = weir_runtime::net::tls::endpoint(config.rpc, &config.identity).map_err(|e| {
        StartError::Bind {
            address: config.rpc,
            message: e.to_string(),
        }
    })?;
    let rpc_address = endpoint.local_addr().map_err(|e| StartError::Bind {
        address: config.rpc,
        message: e.to_string(),
    })?;
    let listener = tokio::net::TcpListener::bind(config.rest)
        .await
        .map_err(|e| StartError::Bind {
            address: config.rest,
            message: e.to_string(),
        })?;
    let rest_address = listener.local_addr().map_err(|e| StartError::Bind {
        address: config.rest,
        message: e.to_string(),
    })?;
    let jm = JobManager::new(config.core(), runtime, store);
    let mut tasks = vec![jm.clone().spawn_clock()];
    let router = rest::router(
        jm.clone(),
        rest::RestOptions {
            token: auth.token,
            listen: rest_address,
            read_timeout: config.rest_read_timeout,
        },
    );
    tasks.push(tokio::spawn(rest::serve(
        listener,
        router,
        config.rest_read_timeout,
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
