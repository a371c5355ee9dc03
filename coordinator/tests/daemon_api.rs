//! The real `txn-coordinator` binary over TCP: every served API, error paths, markers to a
//! fake broker, unsupported APIs answered rather than dropped.
#![cfg(feature = "daemon")]

mod daemon_support;

use daemon_support::*;
use kafka_protocol::messages::{self as km, ApiKey, ResponseHeader};
use kafka_protocol::protocol::Decodable;
use txn_testkit::client::Versions;

/// FindCoordinator v2 of `key` (`key_type` 0: group, 1: transaction): (error code, node id,
/// port).
async fn find_coordinator_v2(
    c: &mut markers::wire::KafkaConnection<tokio::net::TcpStream>,
    key_type: i8,
    key: &str,
) -> (i16, i32, i32) {
    let r = c
        .call(
            &km::FindCoordinatorRequest::default()
                .with_key(s(key))
                .with_key_type(key_type),
            2,
        )
        .await
        .expect("find coordinator v2");
    (r.error_code, r.node_id.0, r.port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_versions_every_version_and_the_kip511_fallback() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = Daemon::start(
        dir.path(),
        &["--set", "transaction.state.log.num.partitions=5"],
    );
    let mut c = d.conn().await;
    for v in 0..=4 {
        let r = c
            .call(&km::ApiVersionsRequest::default(), v)
            .await
            .expect("api versions");
        assert_eq!(r.error_code, 0, "v{v}");
        let versions = Versions::of(&r);
        let find = |k: ApiKey| versions.range(k);
        assert_eq!(find(ApiKey::InitProducerId), Some((0, 6)));
        assert_eq!(find(ApiKey::AddPartitionsToTxn), Some((0, 5)));
        assert_eq!(find(ApiKey::AddOffsetsToTxn), Some((0, 4)));
        assert_eq!(find(ApiKey::EndTxn), Some((0, 5)));
        assert_eq!(find(ApiKey::FindCoordinator), Some((0, 6)));
        assert_eq!(find(ApiKey::DescribeTransactions), Some((0, 0)));
        assert_eq!(find(ApiKey::ListTransactions), Some((0, 2)));
        // librdkafka's MsgVer2 feature needs Produce >= 3 and Fetch >= 4 advertised.
        assert!(find(ApiKey::Produce).is_some_and(|(min, max)| min <= 3 && max >= 3));
        assert!(find(ApiKey::Fetch).is_some_and(|(min, max)| min <= 4 && max >= 4));
    }
    // ApiVersions v99: a v0 answer with UNSUPPORTED_VERSION and our ranges (KIP-511).
    let frame = roundtrip_raw(d.addr, &raw_request(18, 99, 77, &[]))
        .await
        .expect("answered");
    let mut b = frame;
    let h = ResponseHeader::decode(&mut b, 0).expect("header");
    assert_eq!(h.correlation_id, 77);
    let r = km::ApiVersionsResponse::decode(&mut b, 0).expect("v0 body");
    assert_eq!(r.error_code, 35);
    assert!(Versions::of(&r).range(ApiKey::EndTxn).is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_lifecycle_with_markers_to_a_fake_broker() {
    let broker = FakeBroker::start().await;
    let dir = tempfile::tempdir().expect("tmp");
    let bs = broker.addr.to_string();
    let d = Daemon::start(dir.path(), &["--bootstrap-servers", &bs, "--node-id", "77"]);
    let mut c = d.conn().await;

    // FindCoordinator v2 (librdkafka) and v6 (kafka-python) for a transactional id: this node.
    assert_eq!(
        find_coordinator_v2(&mut c, 1, "app").await,
        (0, 77, i32::from(d.addr.port()))
    );
    let r = c
        .call(
            &km::FindCoordinatorRequest::default()
                .with_key_type(1)
                .with_coordinator_keys(vec![s("app")]),
            6,
        )
        .await
        .expect("find v6");
    assert_eq!(r.coordinators.len(), 1);
    assert_eq!(
        (r.coordinators[0].error_code, r.coordinators[0].node_id.0),
        (0, 77)
    );
    // GROUP keys: the brokers' answer.
    assert_eq!(
        find_coordinator_v2(&mut c, 0, "grp").await,
        (0, 1, i32::from(broker.addr.port()))
    );

    // Metadata v12: the broker plus this node.
    let r = c
        .call(
            &km::MetadataRequest::default().with_topics(Some(vec![
                km::metadata_request::MetadataRequestTopic::default()
                    .with_name(Some(km::TopicName(s("t")))),
            ])),
            12,
        )
        .await
        .expect("metadata");
    let mut ids: Vec<i32> = r.brokers.iter().map(|b| b.node_id.0).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![1, 77]);
    assert_eq!(r.topics.len(), 1);
    assert_eq!(r.topics[0].partitions.len(), 3);

    // init -> add -> offsets -> commit (librdkafka's versions).
    let (pid, epoch) = init_ok(&mut c, "app", 60_000).await;
    assert_eq!(epoch, 0);
    let r = c
        .call(&add_req_v3("app", pid, epoch, &[("t", 0), ("t", 1)]), 0)
        .await
        .expect("add");
    assert_eq!(add_errors(&r), vec![("t".into(), 0, 0), ("t".into(), 1, 0)]);
    let r = c
        .call(
            &km::AddOffsetsToTxnRequest::default()
                .with_transactional_id(km::TransactionalId(s("app")))
                .with_producer_id(km::ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_group_id(km::GroupId(s("grp"))),
            0,
        )
        .await
        .expect("add offsets");
    assert_eq!(r.error_code, 0);
    let desc = describe(&mut c, "app").await;
    assert_eq!(desc.transaction_state.as_str(), "Ongoing");
    assert_eq!(desc.transaction_timeout_ms, 60_000);
    let r = c
        .call(&end_req("app", pid, epoch, true), 1)
        .await
        .expect("end");
    assert_eq!(r.error_code, 0);
    wait_state(&mut c, "app", "CompleteCommit").await;
    let markers = broker.markers();
    let sent: Vec<_> = markers.iter().flat_map(|m| m.markers.iter()).collect();
    assert!(!sent.is_empty());
    assert!(
        sent.iter()
            .all(|m| m.producer_id.0 == pid && m.producer_epoch == epoch && m.transaction_result)
    );
    let mut parts: Vec<(String, i32)> = sent
        .iter()
        .flat_map(|m| {
            m.topics.iter().flat_map(|t| {
                t.partition_indexes
                    .iter()
                    .map(move |p| (t.name.0.to_string(), *p))
            })
        })
        .collect();
    parts.sort();
    parts.dedup();
    assert!(
        parts.contains(&("t".into(), 0)) && parts.contains(&("t".into(), 1)),
        "{parts:?}"
    );
    assert!(
        parts.iter().any(|(t, _)| t == "__consumer_offsets"),
        "{parts:?}"
    );

    // A second transaction, aborted, with EndTxn v3 (kafka-python).
    let r = c
        .call(&add_req_v3("app", pid, epoch, &[("t2", 2)]), 3)
        .await
        .expect("add");
    assert_eq!(add_errors(&r), vec![("t2".into(), 2, 0)]);
    let r = c
        .call(&end_req("app", pid, epoch, false), 3)
        .await
        .expect("abort");
    assert_eq!(r.error_code, 0);
    wait_state(&mut c, "app", "CompleteAbort").await;

    // Topics unknown to the brokers: UNKNOWN_TOPIC_OR_PARTITION, the rest OPERATION_NOT_ATTEMPTED.
    let r = c
        .call(
            &add_req_v3("app", pid, epoch, &[("nope", 0), ("t", 0), ("t", 9)]),
            0,
        )
        .await
        .expect("add");
    assert_eq!(
        add_errors(&r),
        vec![
            ("nope".into(), 0, 3),
            ("t".into(), 0, 55),
            ("t".into(), 9, 3)
        ]
    );
    assert_eq!(
        describe(&mut c, "app").await.transaction_state.as_str(),
        "CompleteAbort"
    );

    // ListTransactions v1 with a state filter and an unknown state echoed.
    let r = c
        .call(
            &km::ListTransactionsRequest::default()
                .with_state_filters(vec![s("CompleteAbort"), s("Bogus")]),
            1,
        )
        .await
        .expect("list");
    assert_eq!(r.error_code, 0);
    assert_eq!(r.unknown_state_filters, vec![s("Bogus")]);
    assert_eq!(r.transaction_states.len(), 1);
    assert_eq!(r.transaction_states[0].transactional_id.0.as_str(), "app");

    // ListTransactions v2 (KIP-1152): a pattern matching the whole id, one that matches a
    // part only, and one that does not compile.
    let list_v2 = |pattern: &str| {
        km::ListTransactionsRequest::default()
            .with_state_filters(vec![s("CompleteAbort")])
            .with_transactional_id_pattern(Some(s(pattern)))
    };
    let r = c.call(&list_v2("a.p"), 2).await.expect("list v2");
    assert_eq!((r.error_code, r.transaction_states.len()), (0, 1));
    let r = c.call(&list_v2("ap"), 2).await.expect("list v2");
    assert_eq!((r.error_code, r.transaction_states.len()), (0, 0));
    let r = c.call(&list_v2("a(p"), 2).await.expect("list v2");
    assert_eq!(r.error_code, 128, "INVALID_REGULAR_EXPRESSION");
    assert!(r.transaction_states.is_empty());
}

fn init_2pc(keep: bool) -> km::InitProducerIdRequest {
    init_req(Some("xa"), 60_000)
        .with_enable_2_pc(true)
        .with_keep_prepared_txn(keep)
}

/// InitProducerId v6 of "xa" with `Enable2Pc`, retried (bounded) while the answer is retriable.
async fn init_2pc_ok(
    c: &mut markers::wire::KafkaConnection<tokio::net::TcpStream>,
    keep: bool,
) -> km::InitProducerIdResponse {
    for _ in 0..200 {
        let r = c.call(&init_2pc(keep), 6).await.expect("init");
        if r.error_code != 51 && r.error_code != 14 {
            return r;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("InitProducerId(xa) kept being retriable");
}

/// KIP-939 over the wire: InitProducerId v6 with `Enable2Pc` is refused (53) unless
/// `transaction.two.phase.commit.enable`; with it, `KeepPreparedTxn` answers the open
/// transaction's pair beside the new session's, and the session's EndTxn v5 commits it
/// (markers at the epoch it hands out), also after a SIGKILL and restart in between; a retried
/// commit is success; `txn-coordinator force-terminate` aborts a kept transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_producer_id_v6_two_phase_commit() {
    let off_dir = tempfile::tempdir().expect("tmp");
    let off = Daemon::start(off_dir.path(), &[]);
    let r = off
        .conn()
        .await
        .call(&init_2pc(false), 6)
        .await
        .expect("init");
    assert_eq!(
        (r.error_code, r.producer_id.0),
        (53, -1),
        "{r:?}\n{}",
        off.stderr()
    );
    drop(off);

    let broker = FakeBroker::start().await;
    let dir = tempfile::tempdir().expect("tmp");
    let bs = broker.addr.to_string();
    let args = [
        "--bootstrap-servers",
        &bs,
        "--set",
        "transaction.two.phase.commit.enable=true",
    ];
    let mut d = Daemon::start(dir.path(), &args);
    let mut c = d.conn().await;
    let r = init_2pc_ok(&mut c, false).await;
    assert_eq!(r.error_code, 0);
    let (pid, epoch) = (r.producer_id.0, r.producer_epoch);
    assert_eq!(
        (
            epoch,
            r.ongoing_txn_producer_id.0,
            r.ongoing_txn_producer_epoch
        ),
        (0, -1, -1)
    );
    let r = c
        .call(&add_req_v3("xa", pid, epoch, &[("t", 0)]), 3)
        .await
        .expect("add");
    assert_eq!(add_errors(&r), vec![("t".into(), 0, 0)]);
    let desc = describe(&mut c, "xa").await;
    assert_eq!(
        (desc.transaction_state.as_str(), desc.transaction_timeout_ms),
        ("Ongoing", i32::MAX)
    );

    // The producer restarts and keeps its prepared transaction.
    let r = init_2pc_ok(&mut c, true).await;
    assert_eq!(
        (
            r.error_code,
            r.producer_id.0,
            r.producer_epoch,
            r.ongoing_txn_producer_id.0,
            r.ongoing_txn_producer_epoch
        ),
        (0, pid, 1, pid, 0)
    );
    // The kept transaction and its session survive a SIGKILL and a restart.
    d.kill();
    let d = Daemon::start(dir.path(), &args);
    let mut c = d.conn().await;
    let desc = describe(&mut c, "xa").await;
    assert_eq!(
        (desc.transaction_state.as_str(), desc.producer_epoch),
        ("Ongoing", 0)
    );
    let r = c.call(&end_req("xa", pid, 0, true), 5).await.expect("end");
    assert_eq!(r.error_code, 90, "the old producer is PRODUCER_FENCED");
    let r = c.call(&end_req("xa", pid, 1, true), 5).await.expect("end");
    assert_eq!(
        (r.error_code, r.producer_id.0, r.producer_epoch),
        (0, pid, 2)
    );
    wait_state(&mut c, "xa", "CompleteCommit").await;
    let markers = broker.markers();
    let sent: Vec<_> = markers.iter().flat_map(|m| m.markers.iter()).collect();
    assert!(!sent.is_empty());
    assert!(
        sent.iter()
            .all(|m| m.producer_id.0 == pid && m.producer_epoch == 2 && m.transaction_result)
    );
    let r = c
        .call(&end_req("xa", pid, 1, true), 5)
        .await
        .expect("retry");
    assert_eq!((r.error_code, r.producer_epoch), (0, 2), "a retried commit");

    // A prepared transaction kept again, then aborted by `force-terminate` (Kafka's tool sends
    // the same InitProducerId without the flags).
    let r = c
        .call(&add_req_v3("xa", pid, 2, &[("t", 1)]), 3)
        .await
        .expect("add");
    assert_eq!(add_errors(&r), vec![("t".into(), 1, 0)]);
    let r = init_2pc_ok(&mut c, true).await;
    assert_eq!(
        (
            r.error_code,
            r.ongoing_txn_producer_id.0,
            r.ongoing_txn_producer_epoch
        ),
        (0, pid, 2)
    );
    let addr = d.addr.to_string();
    let (st, _, err) = run_admin("force-terminate", &addr, &["--transactional-id", "xa"]);
    assert!(st.success(), "{err}");
    // The tool's InitProducerId succeeds once the abort completed; the id is idle again.
    let desc = describe(&mut c, "xa").await;
    assert_eq!(desc.transaction_state.as_str(), "Empty");
    assert!(
        broker
            .markers()
            .iter()
            .flat_map(|m| m.markers.iter())
            .any(|m| m.producer_id.0 == pid && !m.transaction_result),
        "abort markers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_apis_get_unsupported_version_and_the_connection_stays_usable() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = Daemon::start(
        dir.path(),
        &["--set", "transaction.state.log.num.partitions=3"],
    );
    let mut c = d.conn().await;
    let r = c
        .call(&km::HeartbeatRequest::default(), 4)
        .await
        .expect("heartbeat answered");
    assert_eq!(r.error_code, 35);
    let r = c
        .call(&km::JoinGroupRequest::default(), 5)
        .await
        .expect("join answered");
    assert_eq!(r.error_code, 35);
    // An advertised API at a version we do not serve: InitProducerId is 0-5, the codec knows 0-5;
    // Fetch v13 exists in the codec but is not advertised (4-12).
    let r = c
        .call(&km::FetchRequest::default(), 13)
        .await
        .expect("fetch v13 answered");
    assert_eq!(r.error_code, 35);
    // Produce to this node: NOT_LEADER_OR_FOLLOWER per partition.
    let produce = km::ProduceRequest::default()
        .with_acks(-1)
        .with_topic_data(vec![
            km::produce_request::TopicProduceData::default()
                .with_name(km::TopicName(s("t")))
                .with_partition_data(vec![
                    km::produce_request::PartitionProduceData::default().with_index(0),
                ]),
        ]);
    let r = c.call(&produce, 9).await.expect("produce");
    assert_eq!(r.responses[0].partition_responses[0].error_code, 6);
    // Still the same connection.
    let r = c
        .call(&km::ApiVersionsRequest::default(), 3)
        .await
        .expect("api versions");
    assert_eq!(r.error_code, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advertised_listener_and_metadata_without_brokers() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = Daemon::start(
        dir.path(),
        &[
            "--set",
            "transaction.state.log.num.partitions=2",
            "--advertised-listener",
            "coord.example:1234",
            "--node-id",
            "5",
        ],
    );
    let mut c = d.conn().await;
    let r = c
        .call(
            &km::FindCoordinatorRequest::default()
                .with_key(s("x"))
                .with_key_type(1),
            3,
        )
        .await
        .expect("find");
    assert_eq!(
        (r.error_code, r.node_id.0, r.host.as_str(), r.port),
        (0, 5, "coord.example", 1234)
    );
    // No brokers: GROUP lookups are not available; Metadata is this node alone, named topics unknown.
    let r = c
        .call(
            &km::FindCoordinatorRequest::default()
                .with_key(s("g"))
                .with_key_type(0),
            1,
        )
        .await
        .expect("find group");
    assert_eq!(r.error_code, 15);
    for v in [0i16, 5, 12] {
        let r = c
            .call(
                &km::MetadataRequest::default().with_topics(Some(vec![
                    km::metadata_request::MetadataRequestTopic::default()
                        .with_name(Some(km::TopicName(s("t")))),
                ])),
                v,
            )
            .await
            .expect("metadata");
        assert_eq!(r.brokers.len(), 1, "v{v}");
        assert_eq!(
            (
                r.brokers[0].node_id.0,
                r.brokers[0].host.as_str(),
                r.brokers[0].port
            ),
            (5, "coord.example", 1234)
        );
        assert_eq!(r.topics.len(), 1);
        assert_eq!(r.topics[0].error_code, 3);
    }
    // Without brokers, topics are not checked: AddPartitionsToTxn reaches the coordinator.
    let (pid, epoch) = init_ok(&mut c, "x", 1000).await;
    let r = c
        .call(&add_req_v3("x", pid, epoch, &[("anything", 4)]), 0)
        .await
        .expect("add");
    assert_eq!(add_errors(&r), vec![("anything".into(), 4, 0)]);
}
