//! The steps of [`super::Node::start`] that open or bind something: the store
//! (with the node's identity files), the transport to the peers, the client
//! listener and the metrics endpoint. Each returns the node's typed error naming
//! what failed; the caller wires what they return into the event loop.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::consensus::raft::Message;
use crate::consensus::replica::{FileStoreProvider, Replica, ReplicaConfig, ReplicaError};
use crate::server::metrics::MetricsRequests;
use crate::server::net::{Transport, TransportConfig};
use crate::storage::error::StoreError;

use super::{identity, Member, NodeConfig, NodeError};

/// Opens (recovers) the node's store on a blocking thread and settles its
/// identity; returns the replica and the cluster id.
pub(super) async fn open_replica(cfg: &NodeConfig) -> Result<(Replica, u64), NodeError> {
    let replica_cfg = ReplicaConfig {
        raft: cfg.raft_config(),
        client_addrs: cfg
            .members
            .iter()
            .map(|(&id, m)| (id, m.client.to_string()))
            .collect(),
        log_read_budget: crate::consensus::replica::LOG_READ_ENTRIES_PER_PROCESS,
        compaction: cfg.compaction.clone(),
        write_reserve: cfg.write_reserve,
        machine: cfg.machine.clone(),
        sync_by: crate::consensus::replica::SyncBy::DriverWhenIo,
    };
    let (cluster, adopt) = identity::settle(&cfg.engine, cfg.start, cfg.cluster_id(), cfg.id)?;
    let provider = FileStoreProvider::with_start(cfg.engine.clone(), cfg.start);
    let started = std::time::Instant::now();
    let opened =
        tokio::task::spawn_blocking(move || Replica::open(replica_cfg, Box::new(provider)))
            .await
            .map_err(|e| NodeError::Task(e.to_string()))?;
    let replica = match opened {
        Ok(replica) => replica,
        Err(ReplicaError::Store(StoreError::NoStore { path })) => {
            return Err(NodeError::NoStore { id: cfg.id, path })
        }
        Err(e) => return Err(e.into()),
    };
    // The store opened and is this node's: a store from before the identity
    // files gets them now.
    adopt.record()?;
    tracing::info!(
        id = cfg.id,
        ms = started.elapsed().as_secs_f64() * 1e3,
        "store recovered"
    );
    Ok((replica, cluster))
}

/// Starts the transport to the other members, delivering their messages to
/// `inbound`.
pub(super) async fn start_transport(
    cfg: &NodeConfig,
    me: Member,
    cluster: u64,
    inbound: mpsc::Sender<Message>,
) -> Result<Arc<Transport>, NodeError> {
    let peers = cfg
        .members
        .iter()
        .filter(|(&id, _)| id != cfg.id)
        .map(|(&id, m)| (id, m.raft))
        .collect();
    let mut tcfg = TransportConfig::new(cfg.id, me.raft, peers);
    tcfg.backoff_min = cfg.reconnect_backoff.0;
    tcfg.backoff_max = cfg.reconnect_backoff.1;
    tcfg.cluster = cluster;
    tcfg.secret = cfg.cluster_secret.clone();
    tcfg.frame_budget = cfg.peer_frame_budget;
    tcfg.max_connections = cfg.max_peer_connections;
    Ok(Arc::new(Transport::start(tcfg, inbound).await?))
}

/// Binds the client (RESP) listener at `addr`; returns it with the address it
/// got (the port chosen when `addr`'s is 0).
pub(super) async fn bind_clients(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), NodeError> {
    let bind = |source| NodeError::ClientBind { addr, source };
    let listener = TcpListener::bind(addr).await.map_err(bind)?;
    let bound = listener.local_addr().map_err(bind)?;
    Ok((listener, bound))
}

/// Serves `GET /metrics` at [`NodeConfig::metrics_addr`], if set: the bound
/// address and the serving task.
pub(super) async fn serve_metrics(
    cfg: &NodeConfig,
    metrics: &MetricsRequests,
    shutdown: &watch::Receiver<bool>,
) -> Result<(Option<SocketAddr>, Option<JoinHandle<()>>), NodeError> {
    let Some(addr) = cfg.metrics_addr else {
        return Ok((None, None));
    };
    let bind = |source| NodeError::MetricsBind { addr, source };
    let listener = TcpListener::bind(addr).await.map_err(bind)?;
    let bound = listener.local_addr().map_err(bind)?;
    let (metrics, shutdown) = (metrics.clone(), shutdown.clone());
    let max_connections = cfg.max_metrics_connections;
    let task = tokio::spawn(async move {
        let served =
            crate::server::metrics::serve_http_capped(listener, metrics, shutdown, max_connections);
        if let Err(e) = served.await {
            tracing::error!("metrics listener failed: {e}");
        }
    });
    tracing::info!(id = cfg.id, metrics_addr = %bound, "serving Prometheus metrics on /metrics");
    Ok((Some(bound), Some(task)))
}
