//! Two refbroker nodes with embedded coordinators whose only listener is SASL_SSL
//! (SCRAM-SHA-512, the standard authorizer): the nodes talk to each other on it as Kafka's
//! brokers do, with `inter.broker.listener.name` (here the first, only listener),
//! `sasl.mechanism.inter.broker.protocol` and the listener's JAAS login (`User:broker`, a
//! super user). A transaction spanning partitions led by both nodes commits: the partition
//! leader's KIP-890 verification and the coordinator's markers cross nodes over TLS as
//! `broker`, and read_committed fetches on both nodes see the records. Over plaintext both
//! failed. Certificates made with rcgen.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

mod pki;

use coordinator::server::outgoing::ClientSecurity;
use kafka_protocol::messages::{ProduceRequest, TopicName, TransactionalId};
use markers::wire::{BoxedConnection, Connector};
use txn_testkit::wire::{free_port, record_batch, sb};
use txn_tests::refbroker::process::{BrokerProcess, embedded_cluster_args};
use txn_tests::txn_steps::{
    add_partitions, coordinator_port, end_txn, init_producer, leaders_on_both_nodes, stable_read,
};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_spanning_two_sasl_ssl_brokers_commits() {
    let dir = tempfile::tempdir().expect("dir");
    let (ca, keystore) = pki::ca_and_keystore(dir.path(), "broker.pem");
    let ports = [free_port(), free_port()];
    let cluster = format!("1=127.0.0.1:{},2=127.0.0.1:{}", ports[0], ports[1]);
    let _brokers: Vec<BrokerProcess> = (0..2)
        .map(|i| {
            let data_dir = dir.path().join(format!("b{i}")).display().to_string();
            let mut args = embedded_cluster_args(i + 1, &cluster, &data_dir);
            for kv in [
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
    let leaders = leaders_on_both_nodes(&mut c).await;
    let mut tc = connect(client, coordinator_port(&mut c, 1, "stx").await).await;
    let (pid, epoch) = init_producer(&mut tc, "stx", 4).await;
    add_partitions(&mut tc, "stx", (pid, epoch), vec![0, 1, 2]).await;
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
                            .with_records(Some(record_batch(
                                Some((pid, epoch, 0)),
                                true,
                                &[format!("v-p{p}")],
                            ))),
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
    end_txn(&mut tc, "stx", (pid, epoch), true, 3).await;
    // The COMMIT markers reach both nodes' partitions (the remote ones over SASL_SSL).
    for (p, &leader) in leaders.iter().enumerate() {
        let mut pc = connect(client, port_of(leader)).await;
        let read = stable_read(&mut pc, i32::try_from(p).expect("p")).await;
        assert_eq!(
            read.values,
            vec![format!("v-p{p}")],
            "t-{p} on node {leader}"
        );
    }
}

/// A node alone talks to no other node: a SASL_SSL listener without the inter-broker keys
/// (no truststore, no `sasl.mechanism.inter.broker.protocol`) starts.
#[test]
fn a_node_alone_needs_no_inter_broker_keys() {
    let dir = tempfile::tempdir().expect("dir");
    let (_, keystore) = pki::ca_and_keystore(dir.path(), "broker.pem");
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
