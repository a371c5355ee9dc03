//! Two refbroker nodes with embedded coordinators whose only listener is SASL_SSL
//! (SCRAM-SHA-512, the standard authorizer): the nodes talk to each other on it as Kafka's
//! brokers do, with `inter.broker.listener.name` (here the first, only listener),
//! `sasl.mechanism.inter.broker.protocol` and the listener's JAAS login (`User:broker`, a
//! super user). A transaction spanning partitions led by both nodes commits: the partition
//! leader's KIP-890 verification and the coordinator's markers cross nodes over TLS as
//! `broker`, and read_committed fetches on both nodes see the records. Over plaintext both
//! failed. Certificates made with rcgen.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use coordinator::server::outgoing::ClientSecurity;
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, BrokerId, EndTxnRequest, FetchRequest, FindCoordinatorRequest,
    InitProducerIdRequest, MetadataRequest, ProduceRequest, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use markers::wire::{BoxedConnection, Connector};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use txn_tests::refbroker::process::BrokerProcess;

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// Writes the CA and a keystore for 127.0.0.1 (both nodes use it).
fn pki(dir: &Path) -> (PathBuf, PathBuf) {
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "test CA");
    let ca_key = KeyPair::generate().expect("key");
    let ca_pem = ca.self_signed(&ca_key).expect("self-signed").pem();
    let issuer = Issuer::new(ca, ca_key);
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("params");
    let key = KeyPair::generate().expect("key");
    let cert = leaf.signed_by(&key, &issuer).expect("signed");
    let (ca_path, ks_path) = (dir.join("ca.pem"), dir.join("broker.pem"));
    std::fs::write(&ca_path, ca_pem).expect("write ca");
    std::fs::write(&ks_path, format!("{}{}", cert.pem(), key.serialize_pem())).expect("write");
    (ca_path, ks_path)
}

fn scram_login(user: &str) -> String {
    format!(
        r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{user}-secret";"#
    )
}

/// The client (`User:app`, a super user).
fn client(ca: &Path) -> Arc<dyn Connector> {
    ClientSecurity::from_keys("", |k| match k {
        "security.protocol" => Some("SASL_SSL".to_owned()),
        "ssl.truststore.location" => Some(ca.display().to_string()),
        "sasl.mechanism" => Some("SCRAM-SHA-512".to_owned()),
        "sasl.jaas.config" => Some(scram_login("app")),
        _ => None,
    })
    .expect("client settings")
    .connector()
}

async fn connect(client: &dyn Connector, port: u16) -> BoxedConnection {
    client
        .connect("127.0.0.1", port, "refbroker-secure-cluster-test")
        .await
        .expect("connect")
}

fn txn_batch(pid: i64, epoch: i16, value: &str) -> Bytes {
    let record = Record {
        transactional: true,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: pid,
        producer_epoch: epoch,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: 0,
        timestamp: 1_700_000_000_000,
        key: None,
        value: Some(Bytes::from(value.to_owned())),
        headers: IndexMap::new(),
    };
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        [record].iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("encode");
    buf.freeze()
}

/// Evaluates `$body` (an `i16` error code, may `.await`) until it is not a retriable
/// coordinator error, at most 100 times.
macro_rules! until_ok {
    ($what:expr, $body:expr) => {{
        let mut out = None;
        for _ in 0..100 {
            let e: i16 = $body;
            // COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
            // CONCURRENT_TRANSACTIONS
            if ![14, 15, 16, 51].contains(&e) {
                out = Some(e);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        out.unwrap_or_else(|| panic!("{}: still retriable after 100 attempts", $what))
    }};
}

/// The data values a read_committed fetch from 0 returns once the partition is stable up to
/// a non-empty high watermark (bounded polling).
async fn stable_read(client: &dyn Connector, port: u16, partition: i32) -> Vec<String> {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    let mut c = connect(client, port).await;
    let mut last = None;
    for _ in 0..100 {
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_isolation_level(1)
            .with_topics(vec![
                FetchTopic::default()
                    .with_topic(TopicName(sb("t")))
                    .with_partitions(vec![
                        FetchPartition::default()
                            .with_partition(partition)
                            .with_fetch_offset(0)
                            .with_partition_max_bytes(1 << 20),
                    ]),
            ]);
        let resp = c.call(&req, 11).await.expect("fetch");
        let p = &resp.responses[0].partitions[0];
        assert_eq!(p.error_code, 0);
        if p.last_stable_offset == p.high_watermark && p.high_watermark > 0 {
            let mut values = Vec::new();
            let mut buf = p.records.clone().unwrap_or_default();
            for set in RecordBatchDecoder::decode_all(&mut buf).expect("records") {
                for r in set.records.iter().filter(|r| !r.control) {
                    values.push(
                        String::from_utf8_lossy(r.value.as_deref().unwrap_or_default())
                            .into_owned(),
                    );
                }
            }
            return values;
        }
        last = Some((p.last_stable_offset, p.high_watermark));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("partition {partition} never became stable (LSO, HW) {last:?}: no COMMIT marker");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_spanning_two_sasl_ssl_brokers_commits() {
    let dir = tempfile::tempdir().expect("dir");
    let (ca, keystore) = pki(dir.path());
    let ports = [free_port(), free_port()];
    let cluster = format!("1=127.0.0.1:{},2=127.0.0.1:{}", ports[0], ports[1]);
    let _brokers: Vec<BrokerProcess> = (0..2)
        .map(|i| {
            let mut args: Vec<String> = [
                "--data-dir".to_owned(),
                dir.path().join(format!("b{i}")).display().to_string(),
                "--topics".to_owned(),
                "t:3".to_owned(),
                "--embedded-coordinator".to_owned(),
                "--node-id".to_owned(),
                (i + 1).to_string(),
                "--cluster".to_owned(),
                cluster.clone(),
                "--offsets-partitions".to_owned(),
                "4".to_owned(),
            ]
            .to_vec();
            for kv in [
                "transaction.state.log.num.partitions=4".to_owned(),
                format!("listeners=SASL_SSL://127.0.0.1:{}", ports[i]),
                format!("ssl.keystore.location={}", keystore.display()),
                format!("ssl.truststore.location={}", ca.display()),
                "sasl.enabled.mechanisms=SCRAM-SHA-512".to_owned(),
                "txn.scram.credentials=SCRAM-SHA-512=[name=broker,password=broker-secret];SCRAM-SHA-512=[name=app,password=app-secret]".to_owned(),
                "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512".to_owned(),
                format!(
                    "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={}",
                    scram_login("broker")
                ),
                "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"
                    .to_owned(),
                "super.users=User:broker;User:app".to_owned(),
            ] {
                args.extend(["--set".to_owned(), kv]);
            }
            BrokerProcess::spawn(
                Path::new(env!("CARGO_BIN_EXE_refbroker")),
                &args,
                Duration::from_secs(30),
            )
            .expect("refbroker starts")
        })
        .collect();
    let client = client(&ca);
    let client = client.as_ref();
    let port_of = |node: i32| ports[usize::try_from(node - 1).expect("node id")];

    let mut c = connect(client, ports[0]).await;
    let md = c
        .call(&MetadataRequest::default().with_topics(None), 12)
        .await
        .expect("metadata");
    let leaders: Vec<i32> = md.topics[0]
        .partitions
        .iter()
        .map(|p| p.leader_id.0)
        .collect();
    assert!(
        leaders.contains(&1) && leaders.contains(&2),
        "t spans both nodes: {leaders:?}"
    );
    let fc = c
        .call(
            &FindCoordinatorRequest::default()
                .with_key_type(1)
                .with_key(sb("stx")),
            2,
        )
        .await
        .expect("find coordinator");
    assert_eq!(fc.error_code, 0);
    let mut tc = connect(client, u16::try_from(fc.port).expect("port")).await;
    let mut init = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(sb("stx"))))
        .with_transaction_timeout_ms(30_000);
    init.producer_id = ProducerId(-1);
    init.producer_epoch = -1;
    let mut pe = (0, 0);
    let e = until_ok!("InitProducerId", {
        let r = tc.call(&init, 4).await.expect("init");
        pe = (r.producer_id.0, r.producer_epoch);
        r.error_code
    });
    assert_eq!(e, 0);
    let (pid, epoch) = pe;

    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    let add = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(sb("stx")))
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![
            AddPartitionsToTxnTopic::default()
                .with_name(TopicName(sb("t")))
                .with_partitions(vec![0, 1, 2]),
        ]);
    let e = until_ok!("AddPartitionsToTxn", {
        let r = tc.call(&add, 3).await.expect("add partitions");
        r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
    });
    assert_eq!(e, 0);
    // Each leader verifies the partition with the coordinator (KIP-890) before appending: on
    // the node that is not the coordinator, over the inter-broker listener.
    for p in 0..3 {
        use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
        let mut pc = connect(client, port_of(leaders[usize::try_from(p).expect("p")])).await;
        let req = ProduceRequest::default()
            .with_transactional_id(Some(TransactionalId(sb("stx"))))
            .with_acks(-1)
            .with_timeout_ms(5000)
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(TopicName(sb("t")))
                    .with_partition_data(vec![
                        PartitionProduceData::default()
                            .with_index(p)
                            .with_records(Some(txn_batch(pid, epoch, &format!("v-p{p}")))),
                    ]),
            ]);
        let r = pc.call(&req, 9).await.expect("produce");
        let code = r.responses[0].partition_responses[0].error_code;
        assert_eq!(
            code,
            0,
            "Produce to t-{p} (leader {})",
            leaders[usize::try_from(p).expect("p")]
        );
    }
    let e = until_ok!("EndTxn", {
        let r = tc
            .call(
                &EndTxnRequest::default()
                    .with_transactional_id(TransactionalId(sb("stx")))
                    .with_producer_id(ProducerId(pid))
                    .with_producer_epoch(epoch)
                    .with_committed(true),
                3,
            )
            .await
            .expect("end txn");
        r.error_code
    });
    assert_eq!(e, 0);
    // The COMMIT markers reach both nodes' partitions (the remote ones over SASL_SSL).
    for (p, &leader) in leaders.iter().enumerate() {
        let values = stable_read(client, port_of(leader), i32::try_from(p).expect("p")).await;
        assert_eq!(values, vec![format!("v-p{p}")], "t-{p} on node {leader}");
    }
}

/// A node alone talks to no other node: a SASL_SSL listener without the inter-broker keys
/// (no truststore, no `sasl.mechanism.inter.broker.protocol`) starts.
#[test]
fn a_node_alone_needs_no_inter_broker_keys() {
    let dir = tempfile::tempdir().expect("dir");
    let (_, keystore) = pki(dir.path());
    let mut args: Vec<String> = [
        "--data-dir",
        &dir.path().join("b").display().to_string(),
        "--topics",
        "t:1",
        "--embedded-coordinator",
    ]
    .map(str::to_owned)
    .to_vec();
    for kv in [
        "listeners=SASL_SSL://127.0.0.1:0".to_owned(),
        format!("ssl.keystore.location={}", keystore.display()),
        "txn.scram.credentials=SCRAM-SHA-512=[name=app,password=app-secret]".to_owned(),
    ] {
        args.extend(["--set".to_owned(), kv]);
    }
    BrokerProcess::spawn(
        Path::new(env!("CARGO_BIN_EXE_refbroker")),
        &args,
        Duration::from_secs(30),
    )
    .expect("refbroker starts");
}
