//! Two refbroker nodes with embedded coordinators: a transaction spanning partitions led by
//! both nodes is committed, another aborted, and consumer offsets are committed inside a
//! transaction. The markers reach the local node in process and the other node over the wire;
//! read_committed fetches and OffsetFetch show exactly the committed outcome.

use std::time::Duration;

use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, FindCoordinatorRequest, GroupId, OffsetFetchRequest, ProducerId,
    TopicName, TransactionalId, TxnOffsetCommitRequest,
};
use tokio::net::TcpStream;
use txn_testkit::client::Versions;
use txn_testkit::wire::{self, Conn, free_port, sb};
use txn_tests::refbroker::process::{BrokerProcess, embedded_cluster_args};
use txn_tests::txn_steps::{
    Committed, add_partitions, coordinator_port, end_txn, init_producer, leaders_on_both_nodes,
    stable_read, until_not_retriable,
};

async fn connect(port: u16) -> Conn {
    wire::connect(("127.0.0.1", port), "refbroker-cluster-test").await
}

/// Produces the one record `value` to `t`/`partition` in `txn_id`'s transaction of `producer`
/// (id, epoch, sequence); returns the error code.
async fn produce_txn(
    c: &mut Conn,
    txn_id: &str,
    producer: (i64, i16, i32),
    partition: i32,
    value: &str,
) -> i16 {
    let batch = wire::record_batch(Some(producer), true, &[value.to_owned()]);
    wire::produce(c, "t", partition, batch, Some(txn_id))
        .await
        .0
}

/// Starts two embedded-coordinator nodes; returns their processes, data dirs and ports.
fn start_cluster() -> (Vec<BrokerProcess>, Vec<tempfile::TempDir>, [u16; 2]) {
    let dirs = [
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    ];
    let ports = [free_port(), free_port()];
    let cluster = format!("1=127.0.0.1:{},2=127.0.0.1:{}", ports[0], ports[1]);
    let brokers: Vec<BrokerProcess> = (0..2)
        .map(|i| {
            let dir = dirs[i].path().to_str().expect("utf-8");
            let mut args = embedded_cluster_args(i + 1, &cluster, dir);
            args.extend(["--listen".to_owned(), format!("127.0.0.1:{}", ports[i])]);
            BrokerProcess::start(std::path::Path::new(env!("CARGO_BIN_EXE_refbroker")), &args)
        })
        .collect();
    (brokers, dirs.into_iter().collect(), ports)
}

#[tokio::test]
async fn coordinators_on_different_nodes_never_hand_out_the_same_producer_id() {
    let (_brokers, _dirs, ports) = start_cluster();
    let mut c = connect(ports[0]).await;
    let mut by_node: std::collections::BTreeMap<i32, (String, u16)> = Default::default();
    for i in 0..200 {
        let id = format!("pid-{i}");
        let fc = c
            .call(
                &FindCoordinatorRequest::default()
                    .with_key_type(1)
                    .with_key(sb(&id)),
                2,
            )
            .await
            .expect("find coordinator");
        by_node
            .entry(fc.node_id.0)
            .or_insert((id, u16::try_from(fc.port).expect("port")));
        if by_node.len() == 2 {
            break;
        }
    }
    assert_eq!(
        by_node.len(),
        2,
        "both nodes coordinate some transactional id"
    );
    let mut pids = Vec::new();
    for (id, port) in by_node.values() {
        let mut tc = connect(*port).await;
        pids.push(init_producer(&mut tc, id, 4).await.0);
    }
    assert_ne!(
        pids[0], pids[1],
        "producer ids are unique across the cluster"
    );
}

#[tokio::test]
async fn a_transaction_spanning_two_embedded_brokers_commits_and_aborts_everywhere() {
    let (_brokers, _dirs, ports) = start_cluster();
    let port_of = |node: i32| ports[usize::try_from(node - 1).expect("node id")];

    let mut c = connect(ports[0]).await;
    let leaders = leaders_on_both_nodes(&mut c).await;

    let mut tc = connect(coordinator_port(&mut c, 1, "rtx").await).await;
    let (pid, epoch) = init_producer(&mut tc, "rtx", 4).await;

    for (round, commit) in [(0, true), (1, false)] {
        add_partitions(&mut tc, "rtx", (pid, epoch), vec![0, 1, 2]).await;
        if commit {
            let e = until_not_retriable("AddOffsetsToTxn", async || {
                let r = tc
                    .call(
                        &AddOffsetsToTxnRequest::default()
                            .with_transactional_id(TransactionalId(sb("rtx")))
                            .with_producer_id(ProducerId(pid))
                            .with_producer_epoch(epoch)
                            .with_group_id(GroupId(sb("cg"))),
                        3,
                    )
                    .await
                    .expect("add offsets");
                r.error_code
            })
            .await;
            assert_eq!(e, 0);
            let mut g = connect(coordinator_port(&mut c, 0, "cg").await).await;
            use kafka_protocol::messages::txn_offset_commit_request::{
                TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
            };
            let r = g
                .call(
                    &TxnOffsetCommitRequest::default()
                        .with_transactional_id(TransactionalId(sb("rtx")))
                        .with_group_id(GroupId(sb("cg")))
                        .with_producer_id(ProducerId(pid))
                        .with_producer_epoch(epoch)
                        .with_generation_id(-1)
                        .with_topics(vec![
                            TxnOffsetCommitRequestTopic::default()
                                .with_name(TopicName(sb("in")))
                                .with_partitions(vec![
                                    TxnOffsetCommitRequestPartition::default()
                                        .with_partition_index(0)
                                        .with_committed_offset(77),
                                ]),
                        ]),
                    3,
                )
                .await
                .expect("txn offset commit");
            assert_eq!(r.topics[0].partitions[0].error_code, 0);
        }
        for p in 0..3 {
            let mut pc = connect(port_of(leaders[usize::try_from(p).expect("p")])).await;
            let value = format!("r{round}-p{p}");
            let e = produce_txn(&mut pc, "rtx", (pid, epoch, round), p, &value).await;
            assert_eq!(e, 0);
        }
        end_txn(&mut tc, "rtx", (pid, epoch), commit, 3).await;
    }

    for (p, &leader) in leaders.iter().enumerate() {
        let mut pc = connect(port_of(leader)).await;
        let Committed { values, aborted } =
            stable_read(&mut pc, i32::try_from(p).expect("p")).await;
        assert_eq!(values, vec![format!("r0-p{p}"), format!("r1-p{p}")]);
        assert_eq!(
            aborted,
            vec![pid],
            "round 1 is listed as aborted on partition {p}"
        );
    }

    let mut g = connect(coordinator_port(&mut c, 0, "cg").await).await;
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    let mut last = (-2, -2);
    for _ in 0..100 {
        let r = g
            .call(
                &OffsetFetchRequest::default()
                    .with_group_id(GroupId(sb("cg")))
                    .with_require_stable(true)
                    .with_topics(Some(vec![
                        OffsetFetchRequestTopic::default()
                            .with_name(TopicName(sb("in")))
                            .with_partition_indexes(vec![0]),
                    ])),
                7,
            )
            .await
            .expect("offset fetch");
        let part = &r.topics[0].partitions[0];
        last = (part.error_code, part.committed_offset);
        if last.0 != 88 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        last,
        (0, 77),
        "the COMMIT marker reached the offsets partition"
    );
}

/// Transaction version 2 in embedded mode: ApiVersions offers the daemon's coordinator
/// versions, EndTxn v5 bumps the epoch on every commit and abort and answers with it, and the
/// producer's next transaction (with the bumped epoch, sequences from 0) is accepted by both
/// nodes' partitions.
#[tokio::test]
async fn embedded_mode_serves_transaction_version_2() {
    use kafka_protocol::messages::{ApiKey, ApiVersionsRequest};
    let (_brokers, _dirs, ports) = start_cluster();
    let port_of = |node: i32| ports[usize::try_from(node - 1).expect("node id")];
    let mut c = connect(ports[0]).await;
    let v = c
        .call(&ApiVersionsRequest::default(), 3)
        .await
        .expect("api versions");
    let versions = Versions::of(&v);
    let range = |k: ApiKey| versions.range(k);
    assert_eq!(range(ApiKey::InitProducerId), Some((0, 6)));
    assert_eq!(range(ApiKey::AddPartitionsToTxn), Some((0, 5)));
    assert_eq!(range(ApiKey::AddOffsetsToTxn), Some((0, 4)));
    assert_eq!(range(ApiKey::EndTxn), Some((0, 5)));
    assert_eq!(range(ApiKey::DescribeTransactions), Some((0, 0)));
    assert_eq!(range(ApiKey::ListTransactions), Some((0, 2)));

    let leaders = leaders_on_both_nodes(&mut c).await;
    let mut tc = connect(coordinator_port(&mut c, 1, "tv2").await).await;
    let (pid, mut epoch) = init_producer(&mut tc, "tv2", 5).await;

    for (round, commit) in [(0, true), (1, false), (2, true)] {
        add_partitions(&mut tc, "tv2", (pid, epoch), vec![0, 1, 2]).await;
        for p in 0..3 {
            let mut pc = connect(port_of(leaders[usize::try_from(p).expect("p")])).await;
            let value = format!("r{round}-p{p}");
            let e = produce_txn(&mut pc, "tv2", (pid, epoch, 0), p, &value).await;
            assert_eq!(e, 0);
        }
        let answered = end_txn(&mut tc, "tv2", (pid, epoch), commit, 5).await;
        assert_eq!(answered, (pid, epoch + 1), "EndTxn v5 bumps the epoch");
        epoch += 1;
    }

    for (p, &leader) in leaders.iter().enumerate() {
        let mut pc = connect(port_of(leader)).await;
        let Committed { values, aborted } =
            stable_read(&mut pc, i32::try_from(p).expect("p")).await;
        assert_eq!(
            values,
            vec![format!("r0-p{p}"), format!("r1-p{p}"), format!("r2-p{p}")]
        );
        assert_eq!(aborted, vec![pid], "round 1 is aborted on partition {p}");
    }
}

/// One `GET /metrics` over HTTP/1.1: the body.
async fn scrape(port: u16) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("metrics port");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("request");
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut out))
        .await
        .expect("answer in time")
        .expect("answer");
    out.split_once("\r\n\r\n").expect("HTTP head").1.to_owned()
}

/// The value of the sample `name` in a Prometheus text page.
fn sample(page: &str, name: &str) -> u64 {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{page}"))
}

#[tokio::test]
async fn the_verifier_counts_its_calls_on_metrics() {
    let dir = tempfile::tempdir().expect("dir");
    let (port, metrics) = (free_port(), free_port());
    let args: Vec<String> = [
        "--listen".to_owned(),
        format!("127.0.0.1:{port}"),
        "--data-dir".to_owned(),
        dir.path().to_str().expect("utf-8").to_owned(),
        "--topics".to_owned(),
        "t:2".to_owned(),
        "--embedded-coordinator".to_owned(),
        "--metrics-listen".to_owned(),
        format!("127.0.0.1:{metrics}"),
        "--set".to_owned(),
        "transaction.state.log.num.partitions=1".to_owned(),
    ]
    .to_vec();
    let _broker =
        BrokerProcess::start(std::path::Path::new(env!("CARGO_BIN_EXE_refbroker")), &args);
    let page = scrape(metrics).await;
    assert_eq!(sample(&page, "refbroker_verification_calls_total"), 0);
    assert!(page.contains("process_cpu_seconds_total"), "{page}");

    let mut c = connect(port).await;
    let (pid, epoch) = init_producer(&mut c, "m", 4).await;
    add_partitions(&mut c, "m", (pid, epoch), vec![0]).await;
    // Partition 0 was added: verified. Partition 1 was not: refused (a TV1 produce, v9).
    let e = produce_txn(&mut c, "m", (pid, epoch, 0), 0, "v").await;
    assert_eq!(e, 0);
    let e = produce_txn(&mut c, "m", (pid, epoch, 0), 1, "v").await;
    assert_ne!(e, 0);

    let page = scrape(metrics).await;
    assert_eq!(
        sample(&page, "refbroker_verification_calls_total"),
        2,
        "{page}"
    );
    assert_eq!(
        sample(&page, "refbroker_verification_partitions_verified_total"),
        1
    );
    assert_eq!(
        sample(&page, "refbroker_verification_partitions_refused_total"),
        1
    );
    assert_eq!(sample(&page, "refbroker_verification_adds_sent_total"), 0);
}
