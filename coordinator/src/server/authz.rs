//! Authorization of the transaction APIs, as Kafka's
//! [`KafkaApis`](https://github.com/apache/kafka/blob/4.1/core/src/main/scala/kafka/server/KafkaApis.scala)
//! checks them, before the coordinator is called (a denied request changes no state):
//!
//! | API | check | denied |
//! |---|---|---|
//! | FindCoordinator | DESCRIBE on the TransactionalId (TRANSACTION keys) or the Group (GROUP keys), per key | TRANSACTIONAL_ID_AUTHORIZATION_FAILED / GROUP_AUTHORIZATION_FAILED for that key |
//! | InitProducerId | with an id: WRITE on it, and TWO_PHASE_COMMIT on it too when `Enable2Pc` is set (KIP-939); without: IDEMPOTENT_WRITE on the Cluster, or WRITE on some Topic | TRANSACTIONAL_ID_AUTHORIZATION_FAILED / CLUSTER_AUTHORIZATION_FAILED |
//! | AddPartitionsToTxn v0-3 | WRITE on the id, then WRITE on each topic (never on an internal topic: `__consumer_offsets`, `__transaction_state`, `__share_group_state`) | every partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED; or TOPIC_AUTHORIZATION_FAILED for the denied topics' partitions, OPERATION_NOT_ATTEMPTED for the others, nothing added |
//! | AddPartitionsToTxn v4+ | CLUSTER_ACTION on the Cluster (a broker's verification); topics not checked | top-level CLUSTER_AUTHORIZATION_FAILED |
//! | AddOffsetsToTxn | WRITE on the id, then READ on the group | TRANSACTIONAL_ID_AUTHORIZATION_FAILED / GROUP_AUTHORIZATION_FAILED |
//! | EndTxn | WRITE on the id | TRANSACTIONAL_ID_AUTHORIZATION_FAILED |
//! | DescribeTransactions | DESCRIBE on each id; DESCRIBE on each topic of the answer | that id TRANSACTIONAL_ID_AUTHORIZATION_FAILED; topics without DESCRIBE left out |
//! | ListTransactions | DESCRIBE on each id listed | the id left out |
//!
//! The Cluster resource is named `kafka-cluster`. Without an authorizer
//! (`authorizer.class.name` empty) everything is allowed, as in Kafka. Each denial is logged
//! (info level at most once a second, the rest at debug) and counted in
//! `txn_coordinator_authorization_denials_total{api,operation}`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use security::acl::{AclOperation, Action, Authorizer, CLUSTER_NAME, RequestContext, ResourceType};

use super::rate_limit::RateLimit;
use super::session::Session;
use crate::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, AddPartitionsTxnResult, DescribedTxn,
    ErrorCode, ListTransactionsResponse,
};

/// Kafka's internal topics (`Topic.INTERNAL_TOPICS`): AddPartitionsToTxn from a client never
/// adds them.
const INTERNAL_TOPICS: [&str; 3] = [
    crate::CONSUMER_OFFSETS_TOPIC,
    "__transaction_state",
    "__share_group_state",
];

/// Labels of the denial counter.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct DenialLabels {
    /// Kafka API name.
    pub api: Cow<'static, str>,
    /// The operation denied (Kafka's name, e.g. `WRITE`).
    pub operation: Cow<'static, str>,
}

/// The denials of a server: `txn_coordinator_authorization_denials_total{api,operation}` and
/// their log line (at most one a second at info level, as Kafka's authorizer logger writes
/// its denials; the rest at debug). Clones share both.
#[derive(Debug, Clone, Default)]
pub struct Denials {
    counts: Family<DenialLabels, Counter>,
    log: Arc<RateLimit>,
}

impl Denials {
    /// The counter family, to register in a Prometheus registry.
    pub fn family(&self) -> &Family<DenialLabels, Counter> {
        &self.counts
    }
}

/// The checks of one request: the caller and the authorizer (`None`: no authorizer). Any
/// [`Authorizer`] does: Kafka's ACLs ([`security::acl::StandardAuthorizer`]) or a broker's own.
pub struct Authz<'a> {
    authorizer: Option<Arc<dyn Authorizer>>,
    ctx: RequestContext,
    denials: &'a Denials,
    api: &'static str,
}

impl std::fmt::Debug for Authz<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authz")
            .field("api", &self.api)
            .field("principal", &self.ctx.principal)
            .finish_non_exhaustive()
    }
}

impl<'a> Authz<'a> {
    /// The checks of one `api` request of `session`'s client, against `authorizer` (`None`:
    /// everything allowed); denials are counted in `denials`.
    pub fn new(
        authorizer: Option<Arc<dyn Authorizer>>,
        session: &Session,
        denials: &'a Denials,
        api: &'static str,
    ) -> Self {
        Self {
            authorizer,
            ctx: RequestContext::from_ip(session.principal.clone(), session.client_host),
            denials,
            api,
        }
    }

    /// Whether an authorizer is configured.
    pub fn enabled(&self) -> bool {
        self.authorizer.is_some()
    }

    fn deny(&self, operation: AclOperation, resource: ResourceType, name: &str) {
        let (principal, host) = (&self.ctx.principal, &self.ctx.client_host);
        let (operation_name, resource_type) = (operation.constant_name(), resource.constant_name());
        match self.denials.log.allow() {
            Some(suppressed) => tracing::info!(
                %principal,
                %host,
                api = self.api,
                operation = operation_name,
                resource_type,
                resource = name,
                suppressed,
                "authorization denied"
            ),
            None => tracing::debug!(
                %principal,
                %host,
                api = self.api,
                operation = operation_name,
                resource_type,
                resource = name,
                "authorization denied"
            ),
        }
        self.denials
            .counts
            .get_or_create(&DenialLabels {
                api: Cow::Borrowed(self.api),
                operation: Cow::Borrowed(operation_name),
            })
            .inc();
    }

    /// Whether the caller may do `operation` on the resource (always without an authorizer).
    pub fn allowed(&self, operation: AclOperation, resource: ResourceType, name: &str) -> bool {
        let ok = self.permits(operation, resource, name);
        if !ok {
            self.deny(operation, resource, name);
        }
        ok
    }

    /// [`Self::allowed`] without logging or counting a denial.
    fn permits(&self, operation: AclOperation, resource: ResourceType, name: &str) -> bool {
        self.authorizer.as_ref().is_none_or(|a| {
            a.authorize(&self.ctx, &[Action::new(operation, resource, name)])
                .first()
                .is_some_and(|r| r.is_allowed())
        })
    }

    /// Whether the caller may do `operation` on the cluster.
    pub fn cluster(&self, operation: AclOperation) -> bool {
        self.allowed(operation, ResourceType::Cluster, CLUSTER_NAME)
    }

    /// Whether the caller may do `operation` on some resource of the type.
    fn by_type(&self, operation: AclOperation, resource: ResourceType) -> bool {
        let Some(a) = &self.authorizer else {
            return true;
        };
        let ok = a
            .authorize_by_resource_type(&self.ctx, operation, resource)
            .is_ok_and(|r| r.is_allowed());
        if !ok {
            self.deny(operation, resource, "*");
        }
        ok
    }

    /// FindCoordinator: the error for one key of type `key_type` (0 group, 1 transaction).
    pub fn find_coordinator_key(&self, key_type: i8, key: &str) -> Option<ErrorCode> {
        match key_type {
            1 if !self.allowed(AclOperation::Describe, ResourceType::TransactionalId, key) => {
                Some(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            }
            0 if !self.allowed(AclOperation::Describe, ResourceType::Group, key) => {
                Some(ErrorCode::GROUP_AUTHORIZATION_FAILED)
            }
            _ => None,
        }
    }

    /// InitProducerId; `enable_2pc` is the request's `Enable2Pc`.
    pub fn init_producer_id(
        &self,
        transactional_id: Option<&str>,
        enable_2pc: bool,
    ) -> Result<(), ErrorCode> {
        match transactional_id {
            Some(id) => {
                let id_allows = |op| self.allowed(op, ResourceType::TransactionalId, id);
                if id_allows(AclOperation::Write)
                    && (!enable_2pc || id_allows(AclOperation::TwoPhaseCommit))
                {
                    Ok(())
                } else {
                    Err(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                }
            }
            None => {
                // Kafka does not log the IDEMPOTENT_WRITE denial when WRITE on a topic allows.
                let idempotent = self.permits(
                    AclOperation::IdempotentWrite,
                    ResourceType::Cluster,
                    CLUSTER_NAME,
                );
                if idempotent || self.by_type(AclOperation::Write, ResourceType::Topic) {
                    Ok(())
                } else {
                    self.deny(
                        AclOperation::IdempotentWrite,
                        ResourceType::Cluster,
                        CLUSTER_NAME,
                    );
                    Err(ErrorCode::CLUSTER_AUTHORIZATION_FAILED)
                }
            }
        }
    }

    /// AddPartitionsToTxn: what to send to the coordinator, and what is answered without it.
    pub fn add_partitions(&self, req: AddPartitionsToTxnRequest) -> AddPartitionsAuthz {
        if req.version < 4 {
            let id = req
                .transactions
                .first()
                .map(|t| t.transactional_id.clone())
                .unwrap_or_default();
            if !self.allowed(AclOperation::Write, ResourceType::TransactionalId, &id) {
                let resp = AddPartitionsToTxnResponse::all(
                    &req,
                    ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                );
                return AddPartitionsAuthz::Denied(resp);
            }
        } else if self.cluster(AclOperation::ClusterAction) {
            // A broker's verification: its topics are not checked (Kafka's KafkaApis).
            return AddPartitionsAuthz::Allowed(req);
        } else {
            return AddPartitionsAuthz::Denied(AddPartitionsToTxnResponse {
                error: ErrorCode::CLUSTER_AUTHORIZATION_FAILED,
                results: Vec::new(),
            });
        }
        // WRITE per topic, each topic asked once per request. Kafka's internal topics are never
        // a client's to add, whatever the ACLs (and without an authorizer).
        let mut topic_ok: HashMap<String, bool> = HashMap::new();
        let mut answered = Vec::new();
        let mut forwarded = Vec::new();
        for (i, txn) in req.transactions.into_iter().enumerate() {
            let mut denied = false;
            for p in &txn.partitions {
                let ok = *topic_ok.entry(p.topic.clone()).or_insert_with(|| {
                    !INTERNAL_TOPICS.contains(&p.topic.as_str())
                        && self.allowed(AclOperation::Write, ResourceType::Topic, &p.topic)
                });
                denied |= !ok;
            }
            if denied {
                let result = AddPartitionsTxnResult::each(&txn, |p| {
                    if topic_ok.get(&p.topic) == Some(&false) {
                        ErrorCode::TOPIC_AUTHORIZATION_FAILED
                    } else {
                        ErrorCode::OPERATION_NOT_ATTEMPTED
                    }
                });
                answered.push((i, result));
            } else {
                forwarded.push((i, txn));
            }
        }
        if answered.is_empty() {
            return AddPartitionsAuthz::Allowed(AddPartitionsToTxnRequest {
                version: req.version,
                transactions: forwarded.into_iter().map(|(_, t)| t).collect(),
            });
        }
        AddPartitionsAuthz::Partial {
            forward: AddPartitionsToTxnRequest {
                version: req.version,
                transactions: forwarded.iter().map(|(_, t)| t.clone()).collect(),
            },
            forwarded_at: forwarded.into_iter().map(|(i, _)| i).collect(),
            answered,
        }
    }

    /// AddOffsetsToTxn.
    pub fn add_offsets(&self, transactional_id: &str, group: &str) -> Result<(), ErrorCode> {
        if !self.allowed(
            AclOperation::Write,
            ResourceType::TransactionalId,
            transactional_id,
        ) {
            Err(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        } else if !self.allowed(AclOperation::Read, ResourceType::Group, group) {
            Err(ErrorCode::GROUP_AUTHORIZATION_FAILED)
        } else {
            Ok(())
        }
    }

    /// EndTxn.
    pub fn end_txn(&self, transactional_id: &str) -> Result<(), ErrorCode> {
        if self.allowed(
            AclOperation::Write,
            ResourceType::TransactionalId,
            transactional_id,
        ) {
            Ok(())
        } else {
            Err(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        }
    }

    /// DescribeTransactions, before the coordinator: the ids it may describe (in order).
    pub fn describable(&self, ids: &[String]) -> Vec<bool> {
        ids.iter()
            .map(|id| self.allowed(AclOperation::Describe, ResourceType::TransactionalId, id))
            .collect()
    }

    /// DescribeTransactions, after: the answer in request order (denied ids answered
    /// TRANSACTIONAL_ID_AUTHORIZATION_FAILED), topics without DESCRIBE left out.
    pub fn describe_answer(
        &self,
        ids: &[String],
        allowed: &[bool],
        described: Vec<DescribedTxn>,
    ) -> Vec<DescribedTxn> {
        let mut described = described.into_iter();
        let mut topic_ok: HashMap<String, bool> = HashMap::new();
        ids.iter()
            .zip(allowed)
            .map(|(id, ok)| {
                let mut d = if *ok {
                    described
                        .next()
                        .unwrap_or_else(|| DescribedTxn::error(id, ErrorCode::UNKNOWN_SERVER_ERROR))
                } else {
                    DescribedTxn::error(id, ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                };
                if self.enabled() {
                    d.partitions.retain(|p| {
                        *topic_ok.entry(p.topic.clone()).or_insert_with(|| {
                            self.allowed(AclOperation::Describe, ResourceType::Topic, &p.topic)
                        })
                    });
                }
                d
            })
            .collect()
    }

    /// ListTransactions: leaves out the ids the caller may not DESCRIBE.
    pub fn list_answer(&self, mut resp: ListTransactionsResponse) -> ListTransactionsResponse {
        if self.enabled() {
            resp.transactions.retain(|t| {
                self.allowed(
                    AclOperation::Describe,
                    ResourceType::TransactionalId,
                    &t.transactional_id,
                )
            });
        }
        resp
    }
}

/// What [`Authz::add_partitions`] decided.
#[derive(Debug)]
pub enum AddPartitionsAuthz {
    /// Send this (the whole request) to the coordinator.
    Allowed(AddPartitionsToTxnRequest),
    /// Answer this; the coordinator is not called.
    Denied(AddPartitionsToTxnResponse),
    /// Some transactions are answered here (`answered`, by their index in the request), the
    /// others go to the coordinator (`forward`; `forwarded_at` their indexes).
    Partial {
        /// The transactions for the coordinator.
        forward: AddPartitionsToTxnRequest,
        /// Their indexes in the request.
        forwarded_at: Vec<usize>,
        /// The transactions answered here, by index.
        answered: Vec<(usize, AddPartitionsTxnResult)>,
    },
}

/// Puts the coordinator's results for the forwarded transactions and the ones answered here
/// back in request order.
pub fn merge_add_partitions(
    from_coordinator: AddPartitionsToTxnResponse,
    forwarded_at: &[usize],
    answered: Vec<(usize, AddPartitionsTxnResult)>,
) -> AddPartitionsToTxnResponse {
    let mut slots: Vec<(usize, AddPartitionsTxnResult)> = answered;
    slots.extend(forwarded_at.iter().copied().zip(from_coordinator.results));
    slots.sort_by_key(|(i, _)| *i);
    AddPartitionsToTxnResponse {
        error: from_coordinator.error,
        results: slots.into_iter().map(|(_, r)| r).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AddPartitionsTxn;
    use security::acl::{
        AccessControlEntry, AclBinding, AclPermissionType, Principal, ResourcePattern,
        StandardAuthorizer, StandardAuthorizerConfig,
    };
    use txn_log::{ProducerEpoch, ProducerId, TopicPartition};

    fn acl(
        rt: ResourceType,
        name: &str,
        prefixed: bool,
        op: AclOperation,
        allow: bool,
    ) -> AclBinding {
        let pattern = if prefixed {
            ResourcePattern::prefixed(rt, name)
        } else {
            ResourcePattern::literal(rt, name)
        };
        let perm = if allow {
            AclPermissionType::Allow
        } else {
            AclPermissionType::Deny
        };
        AclBinding::new(
            pattern,
            AccessControlEntry::new("User:ANONYMOUS", "*", op, perm),
        )
    }

    /// ALLOW `op` on the literal resource `name` of type `rt`.
    fn allow(rt: ResourceType, name: &str, op: AclOperation) -> AclBinding {
        acl(rt, name, false, op, true)
    }

    fn authorizer(acls: &[AclBinding]) -> Option<Arc<dyn Authorizer>> {
        let mut a = StandardAuthorizer::new(StandardAuthorizerConfig::default());
        a.create(acls);
        Some(Arc::new(a))
    }

    fn session() -> Session {
        Session::anonymous(std::net::Ipv4Addr::LOCALHOST.into())
    }

    /// The denials counted for `api` and `operation`.
    fn denied(d: &Denials, api: &'static str, operation: &'static str) -> u64 {
        d.family()
            .get_or_create(&DenialLabels {
                api: api.into(),
                operation: operation.into(),
            })
            .get()
    }

    fn txn(id: &str, topics: &[&str]) -> AddPartitionsTxn {
        AddPartitionsTxn {
            transactional_id: id.into(),
            producer_id: ProducerId(1),
            producer_epoch: ProducerEpoch(0),
            verify_only: false,
            partitions: topics.iter().map(|t| TopicPartition::new(*t, 0)).collect(),
        }
    }

    #[test]
    fn no_authorizer_allows_everything() {
        let d = Denials::default();
        let a = Authz::new(None, &session(), &d, "EndTxn");
        assert!(a.end_txn("t").is_ok());
        assert!(a.init_producer_id(None, false).is_ok());
        assert!(a.add_offsets("t", "g").is_ok());
    }

    #[test]
    fn write_on_the_id_prefixed_and_deny_wins() {
        let d = Denials::default();
        let z = authorizer(&[
            acl(
                ResourceType::TransactionalId,
                "app-",
                true,
                AclOperation::Write,
                true,
            ),
            acl(
                ResourceType::TransactionalId,
                "app-secret",
                false,
                AclOperation::Write,
                false,
            ),
        ]);
        let a = Authz::new(z, &session(), &d, "EndTxn");
        assert!(a.end_txn("app-1").is_ok());
        assert_eq!(
            a.end_txn("app-secret"),
            Err(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        );
        assert_eq!(
            a.end_txn("other"),
            Err(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        );
        assert_eq!(denied(&d, "EndTxn", "WRITE"), 2);
    }

    #[test]
    fn init_producer_id_without_an_id() {
        let d = Denials::default();
        let a = Authz::new(authorizer(&[]), &session(), &d, "InitProducerId");
        assert_eq!(
            a.init_producer_id(None, false),
            Err(ErrorCode::CLUSTER_AUTHORIZATION_FAILED)
        );
        let z = authorizer(&[allow(ResourceType::Topic, "x", AclOperation::Write)]);
        assert!(
            Authz::new(z, &session(), &d, "InitProducerId")
                .init_producer_id(None, false)
                .is_ok()
        );
        let z = authorizer(&[allow(
            ResourceType::Cluster,
            CLUSTER_NAME,
            AclOperation::IdempotentWrite,
        )]);
        assert!(
            Authz::new(z, &session(), &d, "InitProducerId")
                .init_producer_id(None, false)
                .is_ok()
        );
    }

    /// KIP-939: `Enable2Pc` needs TWO_PHASE_COMMIT on the id besides WRITE; neither implies
    /// the other, ALL covers both (Kafka's `KafkaApis.handleInitProducerIdRequest`).
    #[test]
    fn init_producer_id_with_two_phase_commit_needs_both_operations() {
        let d = Denials::default();
        let on_id = |op| allow(ResourceType::TransactionalId, "t", op);
        let check = |acls: &[AclBinding], enable_2pc| {
            Authz::new(authorizer(acls), &session(), &d, "InitProducerId")
                .init_producer_id(Some("t"), enable_2pc)
        };
        let refused = Err(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
        let write = [on_id(AclOperation::Write)];
        assert_eq!(check(&write, false), Ok(()));
        assert_eq!(check(&write, true), refused);
        assert_eq!(check(&[on_id(AclOperation::TwoPhaseCommit)], true), refused);
        let both = [
            on_id(AclOperation::Write),
            on_id(AclOperation::TwoPhaseCommit),
        ];
        assert_eq!(check(&both, true), Ok(()));
        assert_eq!(check(&[on_id(AclOperation::All)], true), Ok(()));
        assert_eq!(denied(&d, "InitProducerId", "TWO_PHASE_COMMIT"), 1);
    }

    #[test]
    fn add_partitions_v3_id_then_topics() {
        let d = Denials::default();
        let req = |topics: &[&str]| AddPartitionsToTxnRequest {
            version: 3,
            transactions: vec![txn("t", topics)],
        };
        let a = Authz::new(authorizer(&[]), &session(), &d, "AddPartitionsToTxn");
        match a.add_partitions(req(&["a"])) {
            AddPartitionsAuthz::Denied(r) => assert_eq!(
                r.results[0].partitions[0].1,
                ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            ),
            other => panic!("{other:?}"),
        }
        let z = authorizer(&[
            allow(ResourceType::TransactionalId, "t", AclOperation::Write),
            allow(ResourceType::Topic, "a", AclOperation::Write),
        ]);
        let a = Authz::new(z, &session(), &d, "AddPartitionsToTxn");
        assert!(matches!(
            a.add_partitions(req(&["a"])),
            AddPartitionsAuthz::Allowed(_)
        ));
        match a.add_partitions(req(&["a", "b"])) {
            AddPartitionsAuthz::Partial {
                forward, answered, ..
            } => {
                assert!(forward.transactions.is_empty(), "nothing is added");
                let errs: Vec<_> = answered[0].1.partitions.iter().map(|(_, e)| *e).collect();
                assert_eq!(
                    errs,
                    vec![
                        ErrorCode::OPERATION_NOT_ATTEMPTED,
                        ErrorCode::TOPIC_AUTHORIZATION_FAILED
                    ]
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn add_partitions_v4_needs_cluster_action_and_merges_in_order() {
        let d = Denials::default();
        let req = AddPartitionsToTxnRequest {
            version: 4,
            transactions: vec![txn("t1", &["ok"]), txn("t2", &["no"]), txn("t3", &["ok"])],
        };
        let a = Authz::new(authorizer(&[]), &session(), &d, "AddPartitionsToTxn");
        match a.add_partitions(req.clone()) {
            AddPartitionsAuthz::Denied(r) => {
                assert_eq!(r.error, ErrorCode::CLUSTER_AUTHORIZATION_FAILED);
                assert!(r.results.is_empty());
            }
            other => panic!("{other:?}"),
        }
        let z = authorizer(&[
            allow(
                ResourceType::Cluster,
                CLUSTER_NAME,
                AclOperation::ClusterAction,
            ),
            allow(ResourceType::Topic, "ok", AclOperation::Write),
        ]);
        let a = Authz::new(z, &session(), &d, "AddPartitionsToTxn");
        let AddPartitionsAuthz::Allowed(forward) = a.add_partitions(req) else {
            panic!("a broker's verification is not checked per topic");
        };
        assert_eq!(forward.transactions.len(), 3);
    }

    #[test]
    fn add_partitions_never_adds_an_internal_topic_for_a_client() {
        let d = Denials::default();
        let req = |version: i16| AddPartitionsToTxnRequest {
            version,
            transactions: vec![txn("t", &["a", "__consumer_offsets"])],
        };
        for a in [
            Authz::new(None, &session(), &d, "AddPartitionsToTxn"),
            Authz::new(
                authorizer(&[
                    allow(ResourceType::TransactionalId, "t", AclOperation::Write),
                    allow(ResourceType::Topic, "*", AclOperation::All),
                ]),
                &session(),
                &d,
                "AddPartitionsToTxn",
            ),
        ] {
            let AddPartitionsAuthz::Partial { answered, .. } = a.add_partitions(req(3)) else {
                panic!("an internal topic is refused");
            };
            let errs: Vec<_> = answered[0].1.partitions.iter().map(|(_, e)| *e).collect();
            assert_eq!(
                errs,
                vec![
                    ErrorCode::OPERATION_NOT_ATTEMPTED,
                    ErrorCode::TOPIC_AUTHORIZATION_FAILED
                ]
            );
        }
        // A broker's verification (v4+) is not a client's: not checked per topic.
        let a = Authz::new(None, &session(), &d, "AddPartitionsToTxn");
        assert!(matches!(
            a.add_partitions(req(4)),
            AddPartitionsAuthz::Allowed(_)
        ));
    }

    #[test]
    fn add_offsets_checks_the_id_then_the_group() {
        let d = Denials::default();
        let z = authorizer(&[allow(
            ResourceType::TransactionalId,
            "t",
            AclOperation::Write,
        )]);
        let a = Authz::new(z, &session(), &d, "AddOffsetsToTxn");
        assert_eq!(
            a.add_offsets("t", "g"),
            Err(ErrorCode::GROUP_AUTHORIZATION_FAILED)
        );
        assert_eq!(
            a.add_offsets("u", "g"),
            Err(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        );
    }

    #[test]
    fn describe_and_list_hide_what_may_not_be_described() {
        let d = Denials::default();
        let z = authorizer(&[
            allow(ResourceType::TransactionalId, "a", AclOperation::Describe),
            allow(ResourceType::Topic, "seen", AclOperation::Describe),
        ]);
        let a = Authz::new(z, &session(), &d, "DescribeTransactions");
        let ids = vec!["a".to_owned(), "b".to_owned()];
        let allowed = a.describable(&ids);
        assert_eq!(allowed, vec![true, false]);
        let mut described = DescribedTxn::error("a", ErrorCode::NONE);
        described.partitions = vec![
            TopicPartition::new("seen", 0),
            TopicPartition::new("hidden", 0),
        ];
        let out = a.describe_answer(&ids, &allowed, vec![described]);
        assert_eq!(out[0].partitions, vec![TopicPartition::new("seen", 0)]);
        assert_eq!(
            out[1].error,
            ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        );
        let listed = |id: &str| crate::ListedTxn {
            transactional_id: id.into(),
            producer_id: ProducerId(1),
            state: txn_log::TxnState::Ongoing,
        };
        let resp = a.list_answer(ListTransactionsResponse {
            error: ErrorCode::NONE,
            unknown_state_filters: Vec::new(),
            transactions: vec![listed("a"), listed("b")],
        });
        assert_eq!(resp.transactions, vec![listed("a")]);
        let _ = Principal::user("x");
    }
}
