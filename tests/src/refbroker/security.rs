//! Listeners, TLS, SASL and authorization of refbroker: the daemon's own code
//! ([`coordinator::server::listeners`], [`coordinator::server::sasl_auth`],
//! [`coordinator::server::authz`], [`coordinator::server::security_store`],
//! [`coordinator::server::security_apis`]), configured with the daemon's keys (`listeners`,
//! `advertised.listeners`, `listener.security.protocol.map`, `ssl.*`, `sasl.*`,
//! `listener.name.<l>.*`, `txn.scram.credentials`, `authorizer.class.name`, `super.users`,
//! `allow.everyone.if.no.acl.found`; `docs/security.md`, "refbroker").
//!
//! The checks of the broker APIs, as Kafka's `KafkaApis` makes them (a denied part of a
//! request is answered here and never reaches the partition or the group):
//!
//! | API | needs | denied |
//! |---|---|---|
//! | Produce | transactional records: an id in the header and WRITE on it; then WRITE on each topic | every partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED; the topic's partitions TOPIC_AUTHORIZATION_FAILED |
//! | Fetch | READ on each topic | TOPIC_AUTHORIZATION_FAILED per partition |
//! | ListOffsets, Metadata | DESCRIBE on each topic | TOPIC_AUTHORIZATION_FAILED per partition / topic; Metadata of every topic leaves it out |
//! | JoinGroup, SyncGroup, Heartbeat, LeaveGroup | READ on the group | GROUP_AUTHORIZATION_FAILED |
//! | OffsetCommit | READ on the group, then READ on each topic | every partition GROUP_AUTHORIZATION_FAILED; the topic's partitions TOPIC_AUTHORIZATION_FAILED |
//! | OffsetFetch | DESCRIBE on the group, then DESCRIBE on each topic | GROUP_AUTHORIZATION_FAILED; the topic's partitions TOPIC_AUTHORIZATION_FAILED (all topics: left out) |
//! | TxnOffsetCommit | WRITE on the id, READ on the group, READ on each topic | every partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED / GROUP_AUTHORIZATION_FAILED; the topic's TOPIC_AUTHORIZATION_FAILED |
//! | WriteTxnMarkers | CLUSTER_ACTION on the Cluster | every partition CLUSTER_AUTHORIZATION_FAILED |
//! | DescribeProducers | READ on each topic | TOPIC_AUTHORIZATION_FAILED per partition |
//!
//! FindCoordinator, the transaction APIs and the ACL and SCRAM admin APIs are checked by the
//! daemon's functions themselves (`docs/security.md`, "Authorization").
//!
//! The ACLs and SCRAM credentials live in the transaction log's backend: the embedded
//! coordinator's (sled in `<data-dir>/txn-log`, or etcd, shared by every node and daemon on
//! the same prefix); standalone, a log of the same shape opened for them alone, in the same
//! place (`txn.log.backend` and the etcd keys choose it), only when an authorizer or a SASL
//! listener needs it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use anyhow::Context as _;
use coordinator::server::authz::{Authz, Denials};
use coordinator::server::listeners::{
    self, CredentialSlot, Endpoint, Layered, Listener, ListenerMetrics, ListenerSpec,
    MemoryCredentials, SecurityProtocol,
};
use coordinator::server::security_store::{self, SecurityState};
use coordinator::server::session::Session;
use coordinator::server::{DaemonLog, LogBackend, Settings};
use coordinator::shell::Metrics;
use kafka_protocol::ResponseError;
use kafka_protocol::messages as km;
use security::acl::{AclOperation, ResourceType};
use tokio::sync::watch;

use super::Config;
use super::groups::{offset_commit_answers, offset_fetch_answers, txn_offset_commit_answers};

fn code(e: ResponseError) -> i16 {
    e.code()
}

/// The security of one broker: its listeners' settings, the SCRAM credentials the SASL
/// listeners read, and (once the log is open) the ACLs.
pub(crate) struct Security {
    pub(crate) settings: Settings,
    memory: Arc<MemoryCredentials>,
    credentials: Arc<CredentialSlot>,
    state: OnceLock<Arc<SecurityState>>,
    /// The standalone security log, kept open.
    standalone_log: OnceLock<DaemonLog>,
    denials: Denials,
    /// Counts the SASL and admin requests (the daemon's request metrics).
    pub(crate) metrics: Metrics,
    listener_metrics: ListenerMetrics,
    /// Ends the etcd refresh with the broker.
    _stop: watch::Sender<bool>,
    stop_rx: watch::Receiver<bool>,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Security")
            .field("authorizer", &self.settings.authorizer_config().is_some())
            .finish_non_exhaustive()
    }
}

impl Security {
    /// Reads the security keys among `config`'s `--set` values (the daemon's parser).
    pub(crate) fn new(config: &Config) -> anyhow::Result<Self> {
        let settings = super::embedded::coordinator_settings(config)?;
        let memory = Arc::new(MemoryCredentials::default());
        listeners::load_scram_credentials(&settings, &memory)?;
        let credentials = Arc::new(CredentialSlot::new(memory.clone()));
        let (stop, stop_rx) = watch::channel(false);
        Ok(Self {
            settings,
            memory,
            credentials,
            state: OnceLock::new(),
            standalone_log: OnceLock::new(),
            denials: Denials::default(),
            metrics: Metrics::new(),
            listener_metrics: ListenerMetrics::default(),
            _stop: stop,
            stop_rx,
        })
    }

    /// The listeners: the key `listeners`, else `--listen` as the one PLAINTEXT listener.
    pub(crate) fn specs(&self, listen: Option<SocketAddr>) -> anyhow::Result<Vec<ListenerSpec>> {
        let specs = listeners::listener_specs(&self.settings)?;
        match (specs.is_empty(), listen) {
            (false, None) => Ok(specs),
            (false, Some(_)) => anyhow::bail!(
                "both --listen and the key listeners are given: set the listeners (and \
                 advertised.listeners) keys only"
            ),
            (true, Some(addr)) => Ok(vec![ListenerSpec {
                endpoint: Endpoint {
                    name: SecurityProtocol::Plaintext.name().to_owned(),
                    host: addr.ip().to_string(),
                    port: addr.port(),
                },
                protocol: SecurityProtocol::Plaintext,
                advertised: None,
            }]),
            (true, None) => anyhow::bail!("--listen (or the key listeners) is required"),
        }
    }

    /// Builds the listeners (TLS files read, SASL mechanisms set up).
    pub(crate) fn build(&self, specs: &[ListenerSpec]) -> anyhow::Result<Vec<Arc<Listener>>> {
        Ok(listeners::build(
            &self.settings,
            specs,
            self.credentials.clone(),
            &self.listener_metrics,
        )?
        .into_iter()
        .map(Arc::new)
        .collect())
    }

    /// Reads the ACLs and credentials of `store` and serves them (the SASL listeners read
    /// `txn.scram.credentials` first, then the store); on etcd reads them again every
    /// [`security_store::REFRESH_INTERVAL`].
    pub(crate) async fn install(
        &self,
        store: Arc<dyn txn_log::SecurityStore>,
    ) -> anyhow::Result<()> {
        let state = SecurityState::open(store, self.settings.authorizer_config())
            .await
            .context("reading the ACLs and SCRAM credentials from the transaction log")?;
        self.credentials.set(Arc::new(Layered {
            first: self.memory.clone(),
            then: security_store::credentials(&state),
        }));
        if self.settings.txn_log_backend == LogBackend::Etcd {
            state.spawn_refresh(security_store::REFRESH_INTERVAL, self.stop_rx.clone());
        }
        let _ = self.state.set(state);
        Ok(())
    }

    /// Standalone mode: opens the security log when an authorizer or a SASL listener needs
    /// it (else ACLs and credentials stay empty, in memory).
    pub(crate) async fn open_standalone(&self, config: &Config, sasl: bool) -> anyhow::Result<()> {
        if self.state.get().is_some() {
            return Ok(());
        }
        let needed = self.settings.authorizer_config().is_some() || sasl;
        if !needed {
            let _ = self
                .state
                .set(SecurityState::in_memory(self.settings.authorizer_config()));
            return Ok(());
        }
        let log = DaemonLog::open(&self.settings, &config.data_dir.join("txn-log")).await?;
        let store = log.as_security_store();
        let _ = self.standalone_log.set(log);
        self.install(store).await
    }

    /// The ACLs and credentials (empty ones until [`Self::install`]).
    pub(crate) fn state(&self) -> Arc<SecurityState> {
        match self.state.get() {
            Some(s) => s.clone(),
            None => SecurityState::in_memory(self.settings.authorizer_config()),
        }
    }

    /// The checks of one `api` request of `session`'s client.
    pub(crate) fn authz(&self, session: &Session, api: &'static str) -> Authz<'_> {
        let authorizer = self.state.get().and_then(|s| s.authorizer());
        let authorizer = match (authorizer, self.settings.authorizer_config()) {
            (Some(a), _) => Some(a),
            // Not installed yet: an authorizer without ACLs (deny but for super users).
            (None, Some(_)) => {
                SecurityState::in_memory(self.settings.authorizer_config()).authorizer()
            }
            (None, None) => None,
        };
        Authz::new(
            authorizer.map(|a| a as Arc<dyn security::acl::Authorizer>),
            session,
            &self.denials,
            api,
        )
    }
}

// ===== the broker APIs' checks =====

/// Produce, as Kafka's `KafkaApis.handleProduceRequest`: a request carrying transactional
/// records (the first batch of a partition has the transactional flag) needs a transactional id
/// in its header and WRITE on it, else every partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED
/// (also without an authorizer: transactional records without an id are refused); then WRITE on
/// each topic. Removes the denied topics from `r` and returns their answers.
pub(crate) fn produce(
    a: &Authz<'_>,
    r: &mut km::ProduceRequest,
) -> Vec<km::produce_response::TopicProduceResponse> {
    use km::produce_response::{PartitionProduceResponse, TopicProduceResponse};
    let txn_denied = has_transactional_records(r)
        && r.transactional_id.as_ref().is_none_or(|t| {
            !a.allowed(
                AclOperation::Write,
                ResourceType::TransactionalId,
                t.0.as_str(),
            )
        });
    let mut ok = HashMap::new();
    let mut denied = Vec::new();
    r.topic_data.retain(|t| {
        let name = t.name.0.to_string();
        let e = if txn_denied {
            ResponseError::TransactionalIdAuthorizationFailed
        } else if *ok
            .entry(name.clone())
            .or_insert_with(|| a.allowed(AclOperation::Write, ResourceType::Topic, &name))
        {
            return true;
        } else {
            ResponseError::TopicAuthorizationFailed
        };
        denied.push(
            TopicProduceResponse::default()
                .with_name(t.name.clone())
                .with_partition_responses(
                    t.partition_data
                        .iter()
                        .map(|p| {
                            PartitionProduceResponse::default()
                                .with_index(p.index)
                                .with_error_code(code(e))
                                .with_base_offset(-1)
                        })
                        .collect(),
                ),
        );
        false
    });
    denied
}

/// Removes from `topics` those whose `name` lacks `op` on the topic and returns their
/// `answer`s.
fn take_denied<T, R>(
    a: &Authz<'_>,
    op: AclOperation,
    topics: &mut Vec<T>,
    name: impl Fn(&T) -> &str,
    answer: impl Fn(&T) -> R,
) -> Vec<R> {
    let mut denied = Vec::new();
    topics.retain(|t| {
        if a.allowed(op, ResourceType::Topic, name(t)) {
            return true;
        }
        denied.push(answer(t));
        false
    });
    denied
}

/// Whether the first batch of some partition of `r` is transactional (Kafka's
/// `RequestUtils.hasTransactionalRecords`): bit 4 of the attributes of a magic-2 batch header.
fn has_transactional_records(r: &km::ProduceRequest) -> bool {
    const MAGIC_AT: usize = 16;
    const ATTRIBUTES_AT: usize = 21;
    const TRANSACTIONAL_FLAG: u8 = 0x10;
    r.topic_data
        .iter()
        .flat_map(|t| &t.partition_data)
        .filter_map(|p| p.records.as_deref())
        .any(|b| {
            b.len() > ATTRIBUTES_AT + 1
                && b[MAGIC_AT] == 2
                && b[ATTRIBUTES_AT + 1] & TRANSACTIONAL_FLAG != 0
        })
}

/// Fetch: READ on each topic. Removes the denied topics from `r` and returns their answers.
pub(crate) fn fetch(
    a: &Authz<'_>,
    r: &mut km::FetchRequest,
) -> Vec<km::fetch_response::FetchableTopicResponse> {
    use km::fetch_response::{FetchableTopicResponse, PartitionData};
    take_denied(
        a,
        AclOperation::Read,
        &mut r.topics,
        |t| t.topic.0.as_str(),
        |t| {
            FetchableTopicResponse::default()
                .with_topic(t.topic.clone())
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            PartitionData::default()
                                .with_partition_index(p.partition)
                                .with_error_code(code(ResponseError::TopicAuthorizationFailed))
                                .with_high_watermark(-1)
                                .with_last_stable_offset(-1)
                                .with_log_start_offset(-1)
                                .with_aborted_transactions(None)
                                .with_records(None)
                        })
                        .collect(),
                )
        },
    )
}

/// ListOffsets: DESCRIBE on each topic. Removes the denied topics and returns their answers.
pub(crate) fn list_offsets(
    a: &Authz<'_>,
    r: &mut km::ListOffsetsRequest,
) -> Vec<km::list_offsets_response::ListOffsetsTopicResponse> {
    use km::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
    take_denied(
        a,
        AclOperation::Describe,
        &mut r.topics,
        |t| t.name.0.as_str(),
        |t| {
            ListOffsetsTopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            ListOffsetsPartitionResponse::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(code(ResponseError::TopicAuthorizationFailed))
                                .with_timestamp(-1)
                                .with_offset(-1)
                        })
                        .collect(),
                )
        },
    )
}

/// Metadata: topics without DESCRIBE are left out of an answer about every topic, and
/// answered TOPIC_AUTHORIZATION_FAILED (without partitions) when asked for by name.
pub(crate) fn metadata(a: &Authz<'_>, every_topic: bool, resp: &mut km::MetadataResponse) {
    if !a.enabled() {
        return;
    }
    let allowed = |t: &km::metadata_response::MetadataResponseTopic| {
        t.name
            .as_ref()
            .is_some_and(|n| a.allowed(AclOperation::Describe, ResourceType::Topic, n.0.as_str()))
    };
    if every_topic {
        resp.topics.retain(allowed);
    } else {
        for t in &mut resp.topics {
            if !allowed(t) {
                t.error_code = code(ResponseError::TopicAuthorizationFailed);
                t.partitions.clear();
                t.is_internal = false;
            }
        }
    }
}

/// JoinGroup, SyncGroup, Heartbeat, LeaveGroup: READ on the group.
pub(crate) fn group_read(a: &Authz<'_>, group: &str) -> bool {
    a.allowed(AclOperation::Read, ResourceType::Group, group)
}

/// OffsetCommit: READ on the group (else every partition is denied: `Err`), then READ on each
/// topic (the denied topics are removed from `r` and answered).
pub(crate) fn offset_commit(
    a: &Authz<'_>,
    r: &mut km::OffsetCommitRequest,
) -> Result<Vec<km::offset_commit_response::OffsetCommitResponseTopic>, km::OffsetCommitResponse> {
    if !group_read(a, r.group_id.0.as_str()) {
        return Err(
            km::OffsetCommitResponse::default().with_topics(offset_commit_answers(
                &r.topics,
                code(ResponseError::GroupAuthorizationFailed),
            )),
        );
    }
    let (ok, no): (Vec<_>, Vec<_>) = std::mem::take(&mut r.topics)
        .into_iter()
        .partition(|t| a.allowed(AclOperation::Read, ResourceType::Topic, t.name.0.as_str()));
    r.topics = ok;
    Ok(offset_commit_answers(
        &no,
        code(ResponseError::TopicAuthorizationFailed),
    ))
}

/// TxnOffsetCommit: WRITE on the transactional id, READ on the group (else every partition
/// is denied: `Err`), then READ on each topic (the denied topics removed and answered).
pub(crate) fn txn_offset_commit(
    a: &Authz<'_>,
    r: &mut km::TxnOffsetCommitRequest,
) -> Result<
    Vec<km::txn_offset_commit_response::TxnOffsetCommitResponseTopic>,
    km::TxnOffsetCommitResponse,
> {
    let whole = if !a.allowed(
        AclOperation::Write,
        ResourceType::TransactionalId,
        r.transactional_id.0.as_str(),
    ) {
        Some(ResponseError::TransactionalIdAuthorizationFailed)
    } else if !group_read(a, r.group_id.0.as_str()) {
        Some(ResponseError::GroupAuthorizationFailed)
    } else {
        None
    };
    if let Some(e) = whole {
        let answers = txn_offset_commit_answers(&r.topics, code(e));
        return Err(km::TxnOffsetCommitResponse::default().with_topics(answers));
    }
    let (ok, no): (Vec<_>, Vec<_>) = std::mem::take(&mut r.topics)
        .into_iter()
        .partition(|t| a.allowed(AclOperation::Read, ResourceType::Topic, t.name.0.as_str()));
    r.topics = ok;
    Ok(txn_offset_commit_answers(
        &no,
        code(ResponseError::TopicAuthorizationFailed),
    ))
}

/// OffsetFetch (one group, v1-7): DESCRIBE on the group (else `Err`, the whole answer), then
/// DESCRIBE on each topic named (removed and answered); [`offset_fetch_after`] leaves out
/// the topics of an every-topic answer.
pub(crate) fn offset_fetch(
    a: &Authz<'_>,
    r: &mut km::OffsetFetchRequest,
    v: i16,
) -> Result<Vec<km::offset_fetch_response::OffsetFetchResponseTopic>, km::OffsetFetchResponse> {
    if !a.allowed(
        AclOperation::Describe,
        ResourceType::Group,
        r.group_id.0.as_str(),
    ) {
        let e = ResponseError::GroupAuthorizationFailed;
        let mut resp = km::OffsetFetchResponse::default();
        if v >= 2 {
            resp.error_code = code(e);
        } else {
            resp.topics = offset_fetch_answers(r.topics.as_deref().unwrap_or_default(), code(e));
        }
        return Err(resp);
    }
    let Some(topics) = r.topics.take() else {
        return Ok(Vec::new());
    };
    let (ok, no): (Vec<_>, Vec<_>) = topics.into_iter().partition(|t| {
        a.allowed(
            AclOperation::Describe,
            ResourceType::Topic,
            t.name.0.as_str(),
        )
    });
    r.topics = Some(ok);
    Ok(offset_fetch_answers(
        &no,
        code(ResponseError::TopicAuthorizationFailed),
    ))
}

/// OffsetFetch of every topic (`topics` null): leaves out the topics without DESCRIBE.
pub(crate) fn offset_fetch_after(a: &Authz<'_>, resp: &mut km::OffsetFetchResponse) {
    if a.enabled() {
        resp.topics.retain(|t| {
            a.allowed(
                AclOperation::Describe,
                ResourceType::Topic,
                t.name.0.as_str(),
            )
        });
    }
}

/// WriteTxnMarkers: CLUSTER_ACTION on the Cluster; `Some`: the answer (every partition
/// CLUSTER_AUTHORIZATION_FAILED).
pub(crate) fn write_txn_markers(
    a: &Authz<'_>,
    r: &km::WriteTxnMarkersRequest,
) -> Option<km::WriteTxnMarkersResponse> {
    if a.cluster(AclOperation::ClusterAction) {
        return None;
    }
    let e = code(ResponseError::ClusterAuthorizationFailed);
    Some(markers::writer::build_response(r, |_, _, _| e))
}

/// DescribeProducers: READ on each topic. Removes the denied topics and returns their
/// answers.
pub(crate) fn describe_producers(
    a: &Authz<'_>,
    r: &mut km::DescribeProducersRequest,
) -> Vec<km::describe_producers_response::TopicResponse> {
    use km::describe_producers_response::{PartitionResponse, TopicResponse};
    take_denied(
        a,
        AclOperation::Read,
        &mut r.topics,
        |t| t.name.0.as_str(),
        |t| {
            TopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(
                    t.partition_indexes
                        .iter()
                        .map(|&p| {
                            PartitionResponse::default()
                                .with_partition_index(p)
                                .with_error_code(code(ResponseError::TopicAuthorizationFailed))
                        })
                        .collect(),
                )
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::StrBytes;
    use security::acl::{
        AccessControlEntry, AclBinding, AclPermissionType, Authorizer as _, ResourcePattern,
        StandardAuthorizer, StandardAuthorizerConfig,
    };

    fn allow(rt: ResourceType, name: &str, op: AclOperation) -> AclBinding {
        AclBinding::new(
            ResourcePattern::literal(rt, name),
            AccessControlEntry::new("User:ANONYMOUS", "*", op, AclPermissionType::Allow),
        )
    }

    fn checks<'a>(acls: &[AclBinding], denials: &'a Denials) -> Authz<'a> {
        let mut a = StandardAuthorizer::new(StandardAuthorizerConfig::default());
        a.create(acls);
        let session = Session::anonymous(std::net::Ipv4Addr::LOCALHOST.into());
        Authz::new(Some(Arc::new(a)), &session, denials, "test")
    }

    fn name(s: &str) -> TopicName {
        TopicName(StrBytes::from_string(s.to_owned()))
    }

    fn produce_request(txn: Option<&str>, topics: &[&str]) -> km::ProduceRequest {
        use km::produce_request::{PartitionProduceData, TopicProduceData};
        km::ProduceRequest::default()
            .with_transactional_id(
                txn.map(|t| km::TransactionalId(StrBytes::from_string(t.to_owned()))),
            )
            .with_acks(-1)
            .with_topic_data(
                topics
                    .iter()
                    .map(|t| {
                        TopicProduceData::default()
                            .with_name(name(t))
                            .with_partition_data(vec![
                                PartitionProduceData::default()
                                    .with_records(Some(batch_header(true))),
                            ])
                    })
                    .collect(),
            )
    }

    /// The first 61 bytes of a magic-2 batch, with the transactional flag or without.
    fn batch_header(transactional: bool) -> bytes::Bytes {
        let mut b = vec![0u8; 61];
        b[16] = 2;
        if transactional {
            b[22] = 0x10;
        }
        b.into()
    }

    #[test]
    fn produce_needs_write_on_the_id_then_on_each_topic() {
        let d = Denials::default();
        let a = checks(
            &[
                allow(ResourceType::Topic, "ok", AclOperation::Write),
                allow(ResourceType::TransactionalId, "t", AclOperation::Write),
            ],
            &d,
        );
        let mut r = produce_request(Some("t"), &["ok", "no"]);
        let denied = produce(&a, &mut r);
        assert_eq!(r.topic_data.len(), 1, "the allowed topic is appended");
        assert_eq!(denied[0].name.0.as_str(), "no");
        assert_eq!(
            denied[0].partition_responses[0].error_code,
            code(ResponseError::TopicAuthorizationFailed)
        );
        let mut r = produce_request(Some("other"), &["ok"]);
        let denied = produce(&a, &mut r);
        assert!(
            r.topic_data.is_empty(),
            "nothing of a denied id is appended"
        );
        assert_eq!(
            denied[0].partition_responses[0].error_code,
            code(ResponseError::TransactionalIdAuthorizationFailed)
        );
        // Without an authorizer everything passes.
        let open = Authz::new(
            None,
            &Session::anonymous(std::net::Ipv4Addr::LOCALHOST.into()),
            &d,
            "test",
        );
        let mut r = produce_request(Some("other"), &["no"]);
        assert!(produce(&open, &mut r).is_empty());
        assert_eq!(r.topic_data.len(), 1);
    }

    #[test]
    fn transactional_records_need_an_id_in_the_header_and_the_id_decides() {
        let d = Denials::default();
        let a = checks(&[allow(ResourceType::Topic, "ok", AclOperation::Write)], &d);
        let open = Authz::new(
            None,
            &Session::anonymous(std::net::Ipv4Addr::LOCALHOST.into()),
            &d,
            "test",
        );
        // Transactional records without an id: refused, with an authorizer or without.
        for checks in [&a, &open] {
            let mut r = produce_request(None, &["ok"]);
            let denied = produce(checks, &mut r);
            assert!(r.topic_data.is_empty());
            assert_eq!(
                denied[0].partition_responses[0].error_code,
                code(ResponseError::TransactionalIdAuthorizationFailed)
            );
        }
        // An id in the header of non-transactional records is not checked (Kafka's rule).
        let mut r = produce_request(Some("not-mine"), &["ok"]);
        r.topic_data[0].partition_data[0].records = Some(batch_header(false));
        assert!(produce(&a, &mut r).is_empty());
        assert_eq!(r.topic_data.len(), 1);
    }

    #[test]
    fn reads_need_read_or_describe_per_topic() {
        use km::fetch_request::{FetchPartition, FetchTopic};
        let d = Denials::default();
        let a = checks(
            &[
                allow(ResourceType::Topic, "r", AclOperation::Read),
                allow(ResourceType::Topic, "d", AclOperation::Describe),
            ],
            &d,
        );
        let topic = |t: &str| {
            FetchTopic::default()
                .with_topic(name(t))
                .with_partitions(vec![FetchPartition::default()])
        };
        let mut r = km::FetchRequest::default().with_topics(vec![topic("r"), topic("d")]);
        let denied = fetch(&a, &mut r);
        assert_eq!(r.topics.len(), 1);
        assert_eq!(denied[0].topic.0.as_str(), "d", "DESCRIBE is not READ");
        // READ implies DESCRIBE: Metadata shows both, hides what neither allows.
        use km::metadata_response::MetadataResponseTopic;
        let t = |n: &str| MetadataResponseTopic::default().with_name(Some(name(n)));
        let mut m = km::MetadataResponse::default().with_topics(vec![t("r"), t("d"), t("x")]);
        metadata(&a, true, &mut m);
        assert_eq!(m.topics.len(), 2);
        let mut m = km::MetadataResponse::default().with_topics(vec![t("x")]);
        metadata(&a, false, &mut m);
        assert_eq!(
            m.topics[0].error_code,
            code(ResponseError::TopicAuthorizationFailed)
        );
    }

    #[test]
    fn offset_commit_checks_the_group_then_the_topics() {
        use km::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
        let d = Denials::default();
        let a = checks(
            &[
                allow(ResourceType::Group, "g", AclOperation::Read),
                allow(ResourceType::Topic, "r", AclOperation::Read),
            ],
            &d,
        );
        let request = |group: &str| {
            km::OffsetCommitRequest::default()
                .with_group_id(km::GroupId(StrBytes::from_string(group.to_owned())))
                .with_topics(
                    ["r", "x"]
                        .iter()
                        .map(|t| {
                            OffsetCommitRequestTopic::default()
                                .with_name(name(t))
                                .with_partitions(vec![OffsetCommitRequestPartition::default()])
                        })
                        .collect(),
                )
        };
        let mut r = request("other");
        let whole = offset_commit(&a, &mut r).expect_err("group denied");
        assert!(
            whole.topics.iter().all(
                |t| t.partitions[0].error_code == code(ResponseError::GroupAuthorizationFailed)
            )
        );
        let mut r = request("g");
        let denied = offset_commit(&a, &mut r).expect("group allowed");
        assert_eq!(r.topics.len(), 1);
        assert_eq!(denied[0].name.0.as_str(), "x");
        assert_eq!(
            denied[0].partitions[0].error_code,
            code(ResponseError::TopicAuthorizationFailed)
        );
    }

    #[test]
    fn write_txn_markers_needs_cluster_action() {
        use km::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
        let d = Denials::default();
        let r = km::WriteTxnMarkersRequest::default().with_markers(vec![
            WritableTxnMarker::default().with_topics(vec![
                WritableTxnMarkerTopic::default()
                    .with_name(name("t"))
                    .with_partition_indexes(vec![0, 1]),
            ]),
        ]);
        let denied = write_txn_markers(&checks(&[], &d), &r).expect("denied");
        assert_eq!(denied.markers[0].topics[0].partitions.len(), 2);
        let a = checks(
            &[allow(
                ResourceType::Cluster,
                security::acl::CLUSTER_NAME,
                AclOperation::ClusterAction,
            )],
            &d,
        );
        assert!(write_txn_markers(&a, &r).is_none());
    }
}
