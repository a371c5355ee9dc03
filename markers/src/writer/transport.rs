//! How a `WriteTxnMarkers` request reaches a broker: over Kafka's wire protocol, or in process
//! for a broker that hosts the coordinator itself.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use std::sync::Arc;
use tokio::time::Instant;

use txn_log::TxnVersion;
use txn_log::sync::Mutex;

use super::BrokerEndpoint;
use crate::wire::{BoxedConnection, CallError, Connector, PlaintextConnector};

/// The lowest `WriteTxnMarkers` version the wire transport sends (Kafka 4.0 removed v0): to a
/// broker that does not list a higher one.
pub const WRITE_TXN_MARKERS_MIN_VERSION: i16 = 1;

/// The highest `WriteTxnMarkers` version the wire transport sends: v2 (Kafka 4.2, KIP-1228)
/// carries each marker's transaction version.
pub const WRITE_TXN_MARKERS_MAX_VERSION: i16 = 2;

/// The `WriteTxnMarkers` version to send to a broker that answered ApiVersions with
/// `answer`: the highest both sides have, [`WRITE_TXN_MARKERS_MIN_VERSION`] when the broker
/// lists none above it (or the answer carries an error).
pub fn write_txn_markers_version(answer: &ApiVersionsResponse) -> i16 {
    if answer.error_code != 0 {
        return WRITE_TXN_MARKERS_MIN_VERSION;
    }
    answer
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::WriteTxnMarkers as i16)
        .map_or(WRITE_TXN_MARKERS_MIN_VERSION, |k| {
            k.max_version
                .clamp(WRITE_TXN_MARKERS_MIN_VERSION, WRITE_TXN_MARKERS_MAX_VERSION)
        })
}

/// Why a request got no answer. Every variant makes the writer retry the request's partitions
/// after backoff with a fresh leader lookup.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// Could not connect.
    #[error("connect to broker {node_id} failed: {reason}")]
    Connect {
        /// Broker id.
        node_id: i32,
        /// Why.
        reason: String,
    },
    /// The connection broke before the answer arrived.
    #[error("broker {node_id} disconnected: {reason}")]
    Disconnected {
        /// Broker id.
        node_id: i32,
        /// Why.
        reason: String,
    },
    /// No answer within the request timeout.
    #[error("request to broker {node_id} timed out")]
    Timeout {
        /// Broker id.
        node_id: i32,
    },
    /// The request could not be encoded or the answer decoded.
    #[error("codec error talking to broker {node_id}: {reason}")]
    Codec {
        /// Broker id.
        node_id: i32,
        /// Why.
        reason: String,
    },
    /// The (in-process) broker is not available.
    #[error("broker {node_id} unavailable: {reason}")]
    Unavailable {
        /// Broker id.
        node_id: i32,
        /// Why.
        reason: String,
    },
}

/// Sends one `WriteTxnMarkers` request to one broker. The writer keeps at most one request in
/// flight per broker and applies its own request timeout around each call (a call may be
/// dropped at any await point).
#[async_trait]
pub trait MarkerTransport: Send + Sync {
    /// Sends `request` to `broker` and returns its answer.
    async fn write_markers(
        &self,
        broker: &BrokerEndpoint,
        request: WriteTxnMarkersRequest,
    ) -> Result<WriteTxnMarkersResponse, TransportError>;

    /// As [`write_markers`](Self::write_markers), with the transaction version of each marker
    /// (parallel to `request.markers`; the writer also sets each marker's
    /// `transaction_version`, which only `WriteTxnMarkers` v2 carries on the wire). The writer
    /// calls this one; the default ignores the versions.
    async fn write_markers_versioned(
        &self,
        broker: &BrokerEndpoint,
        request: WriteTxnMarkersRequest,
        txn_versions: Vec<TxnVersion>,
    ) -> Result<WriteTxnMarkersResponse, TransportError> {
        let _ = txn_versions;
        self.write_markers(broker, request).await
    }
}

/// Settings of [`KafkaWireTransport`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireTransportConfig {
    /// Client id in request headers.
    pub client_id: String,
    /// Limit for one TCP connect.
    pub connect_timeout: Duration,
    /// Wait before reconnecting after a failure; doubles per consecutive failure.
    pub reconnect_backoff: Duration,
    /// Reconnect backoff cap.
    pub reconnect_backoff_max: Duration,
}

impl Default for WireTransportConfig {
    fn default() -> Self {
        Self {
            client_id: "txn-coordinator-markers".into(),
            connect_timeout: Duration::from_secs(10),
            reconnect_backoff: Duration::from_millis(50),
            reconnect_backoff_max: Duration::from_secs(1),
        }
    }
}

#[derive(Debug, Default)]
struct Slot {
    endpoint: Option<(String, u16)>,
    /// The connection and the `WriteTxnMarkers` version its broker listed.
    conn: Option<(BoxedConnection, i16)>,
    failures: u32,
    retry_at: Option<Instant>,
}

/// `WriteTxnMarkers` over Kafka's wire protocol: one connection per broker, reused,
/// re-established after a failure with exponential reconnect backoff. On each new connection
/// the transport first asks ApiVersions (as Kafka's `NetworkClient` does; within
/// [`WireTransportConfig::connect_timeout`], together with the connect) and then sends v2 if
/// the broker lists it, with each marker's transaction version, v1 otherwise.
#[derive(Debug)]
pub struct KafkaWireTransport {
    config: WireTransportConfig,
    connector: Arc<dyn Connector>,
    slots: Mutex<HashMap<i32, Arc<tokio::sync::Mutex<Slot>>>>,
}

impl KafkaWireTransport {
    /// A transport with no connections yet, over plain TCP.
    pub fn new(config: WireTransportConfig) -> Self {
        Self::with_connector(config, Arc::new(PlaintextConnector))
    }

    /// A transport whose connections `connector` opens (TLS, SASL).
    pub fn with_connector(config: WireTransportConfig, connector: Arc<dyn Connector>) -> Self {
        Self {
            config,
            connector,
            slots: Mutex::new(HashMap::new()),
        }
    }

    fn slot(&self, node_id: i32) -> Arc<tokio::sync::Mutex<Slot>> {
        self.slots.lock().entry(node_id).or_default().clone()
    }

    /// Connects to `broker` and asks its versions: the connection and the `WriteTxnMarkers`
    /// version to send on it.
    async fn open(&self, broker: &BrokerEndpoint) -> Result<(BoxedConnection, i16), String> {
        let mut conn = self
            .connector
            .connect(&broker.host, broker.port, &self.config.client_id)
            .await
            .map_err(|e| e.to_string())?;
        // Asked once per connection: a connector that asked already (TLS) has the answer.
        let answer = conn
            .api_versions()
            .await
            .map_err(|e| format!("ApiVersions failed: {e}"))?;
        let version = write_txn_markers_version(answer);
        tracing::debug!(
            node_id = broker.node_id,
            version,
            "WriteTxnMarkers version negotiated"
        );
        Ok((conn, version))
    }

    fn backoff(&self, failures: u32) -> Duration {
        let shift = failures.saturating_sub(1).min(16);
        self.config
            .reconnect_backoff
            .saturating_mul(1u32 << shift)
            .min(self.config.reconnect_backoff_max)
    }
}

#[async_trait]
impl MarkerTransport for KafkaWireTransport {
    async fn write_markers(
        &self,
        broker: &BrokerEndpoint,
        request: WriteTxnMarkersRequest,
    ) -> Result<WriteTxnMarkersResponse, TransportError> {
        let node_id = broker.node_id;
        let slot = self.slot(node_id);
        let mut s = slot.lock().await;
        let endpoint = (broker.host.clone(), broker.port);
        if s.endpoint.as_ref() != Some(&endpoint) {
            *s = Slot {
                endpoint: Some(endpoint),
                ..Slot::default()
            };
        }
        // Taken out for the call: if the call is dropped half-way, the connection (with a
        // half-read answer) is dropped with it and the next call reconnects.
        let (mut conn, version) = match s.conn.take() {
            Some(conn) => conn,
            None => {
                if let Some(at) = s.retry_at {
                    tokio::time::sleep_until(at).await;
                }
                match tokio::time::timeout(self.config.connect_timeout, self.open(broker)).await {
                    Ok(Ok(conn)) => conn,
                    Ok(Err(reason)) => {
                        s.failures += 1;
                        s.retry_at = Some(Instant::now() + self.backoff(s.failures));
                        return Err(TransportError::Connect { node_id, reason });
                    }
                    Err(_) => {
                        s.failures += 1;
                        s.retry_at = Some(Instant::now() + self.backoff(s.failures));
                        return Err(TransportError::Connect {
                            node_id,
                            reason: "connect and ApiVersions timed out".into(),
                        });
                    }
                }
            }
        };
        match conn.call(&request, version).await {
            Ok(response) => {
                s.conn = Some((conn, version));
                s.failures = 0;
                s.retry_at = None;
                Ok(response)
            }
            Err(e) => {
                s.failures += 1;
                s.retry_at = Some(Instant::now() + self.backoff(s.failures));
                Err(match e {
                    CallError::Codec(reason) => TransportError::Codec { node_id, reason },
                    other => TransportError::Disconnected {
                        node_id,
                        reason: other.to_string(),
                    },
                })
            }
        }
    }

    /// Sends `request` with each marker's `transaction_version` set from `txn_versions` (where
    /// given): what v2 carries; v1 leaves it out.
    async fn write_markers_versioned(
        &self,
        broker: &BrokerEndpoint,
        mut request: WriteTxnMarkersRequest,
        txn_versions: Vec<TxnVersion>,
    ) -> Result<WriteTxnMarkersResponse, TransportError> {
        for (marker, version) in request.markers.iter_mut().zip(&txn_versions) {
            marker.transaction_version = version.0;
        }
        self.write_markers(broker, request).await
    }
}

/// What a broker embedding the coordinator implements to apply markers locally (typically by
/// handing them to its participant state), instead of sending them to itself over TCP.
#[async_trait]
pub trait LocalMarkerHandler: Send + Sync {
    /// Applies `request` (markers for partitions `broker` leads) and answers per partition,
    /// exactly as the broker's `WriteTxnMarkers` handler would. `txn_versions` is parallel to
    /// `request.markers`.
    async fn write_markers(
        &self,
        broker: &BrokerEndpoint,
        request: WriteTxnMarkersRequest,
        txn_versions: Vec<TxnVersion>,
    ) -> Result<WriteTxnMarkersResponse, TransportError>;
}

type LocalFn = dyn Fn(
        &BrokerEndpoint,
        WriteTxnMarkersRequest,
        &[TxnVersion],
    ) -> Result<WriteTxnMarkersResponse, TransportError>
    + Send
    + Sync;

struct FnHandler(Box<LocalFn>);

#[async_trait]
impl LocalMarkerHandler for FnHandler {
    async fn write_markers(
        &self,
        broker: &BrokerEndpoint,
        request: WriteTxnMarkersRequest,
        txn_versions: Vec<TxnVersion>,
    ) -> Result<WriteTxnMarkersResponse, TransportError> {
        (self.0)(broker, request, &txn_versions)
    }
}

/// The in-process transport: every request goes to a [`LocalMarkerHandler`].
#[derive(Clone)]
pub struct InProcessTransport {
    handler: Arc<dyn LocalMarkerHandler>,
}

impl std::fmt::Debug for InProcessTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcessTransport").finish_non_exhaustive()
    }
}

impl InProcessTransport {
    /// Wraps an async handler.
    pub fn new(handler: Arc<dyn LocalMarkerHandler>) -> Self {
        Self { handler }
    }

    /// Wraps a synchronous closure `(broker, request, txn_versions) -> answer`.
    pub fn from_fn<F>(f: F) -> Self
    where
        F: Fn(
                &BrokerEndpoint,
                WriteTxnMarkersRequest,
                &[TxnVersion],
            ) -> Result<WriteTxnMarkersResponse, TransportError>
            + Send
            + Sync
            + 'static,
    {
        Self {
            handler: Arc::new(FnHandler(Box::new(f))),
        }
    }
}

#[async_trait]
impl MarkerTransport for InProcessTransport {
    async fn write_markers(
        &self,
        broker: &BrokerEndpoint,
        request: WriteTxnMarkersRequest,
    ) -> Result<WriteTxnMarkersResponse, TransportError> {
        self.handler
            .write_markers(broker, request, Vec::new())
            .await
    }

    async fn write_markers_versioned(
        &self,
        broker: &BrokerEndpoint,
        request: WriteTxnMarkersRequest,
        txn_versions: Vec<TxnVersion>,
    ) -> Result<WriteTxnMarkersResponse, TransportError> {
        self.handler
            .write_markers(broker, request, txn_versions)
            .await
    }
}

/// Sends to one local broker id in process and to every other broker through `remote`: the
/// transport of a broker that embeds the coordinator.
#[derive(Clone)]
pub struct RoutingTransport {
    local_node_id: i32,
    local: Arc<dyn MarkerTransport>,
    remote: Arc<dyn MarkerTransport>,
}

impl std::fmt::Debug for RoutingTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoutingTransport")
            .field("local_node_id", &self.local_node_id)
            .finish_non_exhaustive()
    }
}

impl RoutingTransport {
    /// Requests for `local_node_id` go to `local`, the others to `remote`.
    pub fn new(
        local_node_id: i32,
        local: Arc<dyn MarkerTransport>,
        remote: Arc<dyn MarkerTransport>,
    ) -> Self {
        Self {
            local_node_id,
            local,
            remote,
        }
    }

    fn pick(&self, broker: &BrokerEndpoint) -> &dyn MarkerTransport {
        if broker.node_id == self.local_node_id {
            self.local.as_ref()
        } else {
            self.remote.as_ref()
        }
    }
}

#[async_trait]
impl MarkerTransport for RoutingTransport {
    async fn write_markers(
        &self,
        broker: &BrokerEndpoint,
        request: WriteTxnMarkersRequest,
    ) -> Result<WriteTxnMarkersResponse, TransportError> {
        self.pick(broker).write_markers(broker, request).await
    }

    async fn write_markers_versioned(
        &self,
        broker: &BrokerEndpoint,
        request: WriteTxnMarkersRequest,
        txn_versions: Vec<TxnVersion>,
    ) -> Result<WriteTxnMarkersResponse, TransportError> {
        self.pick(broker)
            .write_markers_versioned(broker, request, txn_versions)
            .await
    }
}
