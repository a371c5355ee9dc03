//! What an embedding broker does first, from outside the workspace: decode a hostile frame
//! with the protocol library it gets through our crates, then host the coordinator as
//! `coordinator/examples/embed_minimal.rs` does (the builder, markers applied in process to a
//! participant partition, no test double) and commit one transaction through it, each request
//! authorized first by the broker's own `Authorizer` through the coordinator's Kafka checks
//! (`server::authz::Authz`). Exit code 0 and a last line `embedder ok` when everything holds.

use std::sync::{Arc, Mutex};

use coordinator::security::Principal;
use coordinator::security::acl::{
    AclBinding, AclBindingFilter, AclError, Action, AuthorizationResult, Authorizer, CreateOutcome,
    RequestContext, ResourceType,
};
use coordinator::server::authz::{Authz, Denials};
use coordinator::server::session::Session;
use coordinator::shell::{CatalogUnavailable, Coordinator, PartitionCatalog};
use coordinator::{
    AddPartitionsToTxnRequest, Config, EndTxnRequest, ErrorCode, InitProducerIdRequest,
};
use markers::apply::{ApplyError, MarkerApplier};
// The protocol library, re-exported: no kafka-protocol dependency (or [patch]) of our own.
use markers::kafka_protocol::messages::{ApiKey, MetadataRequest};
use markers::kafka_protocol::protocol::{Decodable, VersionRange};
use markers::participant::{
    BatchHeader, Marker, ParticipantConfig, PartitionState, ProduceDecision,
};
use markers::wire::{DecodeError, decode_request};
use txn_log::{MemTxnLog, ProducerEpoch, TopicPartition, TxnState};

/// Metadata v0, correlation id 1, null client id, then a topic count of i32::MAX: crates.io's
/// kafka-protocol 0.18.0 tries to reserve ~154 GB for it and aborts the process.
const HOSTILE: [u8; 14] = [
    0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff,
];

/// The broker: one data partition, `orders-0`, with its participant state (offsets only; a
/// real broker keeps the log too). Its traits are implemented with the re-exported
/// `async_trait` (no async-trait dependency).
struct Broker {
    orders: Mutex<PartitionState>,
}

fn orders() -> TopicPartition {
    TopicPartition::new("orders", 0)
}

fn now_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since_epoch.map_or(0, |d| d.as_millis() as i64)
}

#[coordinator::async_trait]
impl MarkerApplier for Broker {
    async fn apply_markers(
        &self,
        markers: Vec<(TopicPartition, Marker)>,
    ) -> Vec<Result<(), ApplyError>> {
        let mut results = Vec::new();
        for (partition, marker) in markers {
            if partition != orders() {
                results.push(Err(ApplyError::UnknownPartition));
                continue;
            }
            let mut p = self.orders.lock().expect("partition lock");
            results.push(match p.check_marker(&marker) {
                Err(refused) => Err(ApplyError::Rejected(refused)),
                Ok(pending) => {
                    let offset = p.next_offset();
                    let applied = p.complete_marker(pending, offset, now_ms());
                    let end = p.next_offset();
                    p.advance_high_watermark(end);
                    applied
                        .map(|_| ())
                        .map_err(|e| ApplyError::Storage(e.to_string()))
                }
            });
        }
        results
    }
}

/// Only `orders-0` exists: AddPartitionsToTxn naming another partition never reaches the
/// engine (and no marker names it).
#[coordinator::async_trait]
impl PartitionCatalog for Broker {
    async fn unknown_partitions(
        &self,
        wanted: &[TopicPartition],
    ) -> Result<Vec<TopicPartition>, CatalogUnavailable> {
        Ok(wanted
            .iter()
            .filter(|tp| **tp != orders())
            .cloned()
            .collect())
    }
}

/// The broker's own authorization, not Kafka's ACLs: a tenant `User:NAME` may use only the
/// transactional ids that start with `NAME-`; topics are everyone's. No ACLs to manage.
struct TenantAuthorizer;

impl Authorizer for TenantAuthorizer {
    fn authorize(&self, ctx: &RequestContext, actions: &[Action]) -> Vec<AuthorizationResult> {
        let prefix = format!("{}-", ctx.principal.name);
        actions
            .iter()
            .map(|a| {
                let ok = match a.resource_type {
                    ResourceType::TransactionalId => a.resource_name.starts_with(&prefix),
                    _ => true,
                };
                if ok {
                    AuthorizationResult::Allowed
                } else {
                    AuthorizationResult::Denied
                }
            })
            .collect()
    }

    fn describe(&self, _: &AclBindingFilter) -> Vec<AclBinding> {
        Vec::new()
    }

    fn create(&mut self, bindings: &[AclBinding]) -> Vec<Result<CreateOutcome, AclError>> {
        let refused = || AclError::InvalidRequest("tenants are fixed by their names".into());
        bindings.iter().map(|_| Err(refused())).collect()
    }

    fn delete(&mut self, filters: &[AclBindingFilter]) -> Vec<Result<Vec<AclBinding>, AclError>> {
        filters.iter().map(|_| Ok(Vec::new())).collect()
    }
}

/// The connection of `User:name` from loopback.
fn tenant(name: &str) -> Session {
    Session {
        principal: Principal {
            kind: "User".into(),
            name: name.into(),
        },
        client_host: std::net::Ipv4Addr::LOCALHOST.into(),
    }
}

fn main() {
    // 1. The whole frame through the markers crate's request decoder.
    let all = |_: ApiKey| {
        Some(VersionRange {
            min: 0,
            max: i16::MAX,
        })
    };
    let frame = bytes::Bytes::copy_from_slice(&HOSTILE);
    match decode_request(frame, all) {
        Err(DecodeError::Malformed {
            api_key: ApiKey::Metadata,
            reason,
            ..
        }) => {
            println!("wire::decode_request refused the 14-byte frame: {reason}");
        }
        other => panic!("the 14-byte frame must be refused as malformed, got {other:?}"),
    }
    // 2. The body (after the 10-byte v0 header) straight through the re-exported library, as a
    //    broker's own handler would call it.
    let mut body = bytes::Bytes::copy_from_slice(&HOSTILE[10..]);
    let err =
        MetadataRequest::decode(&mut body, 0).expect_err("a 4-byte body claiming i32::MAX topics");
    println!("kafka_protocol::MetadataRequest::decode refused it: {err}");

    // 3. The coordinator hosted in process (the builder; markers applied by this broker) and
    //    one committed transaction.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let broker = Arc::new(Broker {
            orders: Mutex::new(PartitionState::new(ParticipantConfig::default(), 0)),
        });
        let config = Config {
            transaction_state_log_num_partitions: 1,
            ..Config::default()
        };
        let coordinator = Coordinator::builder(config, Arc::new(MemTxnLog::new()))
            .markers_in_process(broker.clone())
            .catalog(broker.clone())
            .start()
            .expect("start");
        coordinator.load_all_partitions().await.expect("load");

        // The broker checks each request first, as Kafka's KafkaApis: a denied one never
        // reaches the coordinator (and changes no state).
        let authorizer: Arc<dyn Authorizer> = Arc::new(TenantAuthorizer);
        let denials = Denials::default();
        let bob = tenant("bob");
        let as_bob = Authz::new(Some(authorizer.clone()), &bob, &denials, "InitProducerId");
        assert_eq!(
            as_bob.init_producer_id(Some("alice-orders"), false),
            Err(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        );
        println!("authorized first: User:bob may not use alice-orders");
        let alice = tenant("alice");
        let as_alice = Authz::new(Some(authorizer.clone()), &alice, &denials, "InitProducerId");
        assert_eq!(
            as_alice.init_producer_id(Some("alice-orders"), false),
            Ok(())
        );
        let init = coordinator
            .init_producer_id(InitProducerIdRequest::new_producer(
                5,
                "alice-orders",
                60_000,
            ))
            .await;
        assert_eq!(init.error, ErrorCode::NONE, "{init:?}");
        assert_eq!(init.producer_epoch, ProducerEpoch(0));
        let (producer_id, epoch) = (init.producer_id, init.producer_epoch);
        println!("InitProducerId: producer id {producer_id:?}, epoch {epoch:?}");

        let add = |tp: TopicPartition| {
            AddPartitionsToTxnRequest::add(3, "alice-orders", producer_id, epoch, &[tp])
        };
        // A partition the broker does not have: refused before the engine, by the catalog.
        let unknown = coordinator
            .add_partitions_to_txn(add(TopicPartition::new("nope", 0)))
            .await;
        assert_eq!(
            unknown.results[0].partitions[0].1,
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
        );
        let added = coordinator.add_partitions_to_txn(add(orders())).await;
        assert!(added.results[0].partitions[0].1.is_none(), "{added:?}");

        // Produce two records in the transaction (the Produce handler of `orders-0`).
        {
            let mut p = broker.orders.lock().expect("partition lock");
            let batch = BatchHeader::transactional(producer_id, epoch, 0, 2);
            let ProduceDecision::Append(pending) = p.check_batch(&batch).expect("accepted") else {
                panic!("a first batch is no duplicate");
            };
            let offset = p.next_offset();
            p.complete_append(pending, offset).expect("appended");
            let end = p.next_offset();
            p.advance_high_watermark(end);
            assert_eq!(
                p.last_stable_offset(),
                0,
                "the open transaction holds the LSO"
            );
        }

        let as_alice = Authz::new(Some(authorizer.clone()), &alice, &denials, "EndTxn");
        assert_eq!(as_alice.end_txn("alice-orders"), Ok(()));
        let end = coordinator
            .end_txn(EndTxnRequest {
                version: 5,
                transactional_id: "alice-orders".into(),
                producer_id,
                producer_epoch: epoch,
                committed: true,
            })
            .await;
        assert_eq!(end.error, ErrorCode::NONE, "{end:?}");
        let state = coordinator.transaction_completed("alice-orders").await;
        assert_eq!(state, Ok(TxnState::CompleteCommit));
        let lso = broker
            .orders
            .lock()
            .expect("partition lock")
            .last_stable_offset();
        assert_eq!(lso, 3, "2 records and the COMMIT marker are readable");
        println!("committed in process: last stable offset of orders-0 is {lso}");

        // The metric types are re-exported too.
        let mut registry = coordinator::prometheus_client::registry::Registry::default();
        coordinator.metrics().register(&mut registry);
        coordinator.shutdown().await;
    });
    println!("embedder ok");
}
