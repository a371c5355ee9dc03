//! Apache Kafka's own `kafka-transactions.sh` (`org.apache.kafka.tools.TransactionsCommand`,
//! Maven artifact `org.apache.kafka:kafka-tools` 4.4.x) against refbroker and the coordinator,
//! in standalone mode (daemon + brokers) and embedded mode (the coordinator inside the
//! brokers): `list` (also with `--duration-filter` and `--transactional-id-pattern`), `describe`, `describe-producers`,
//! `find-hanging` (by `--topic` and by `--broker-id`), `abort` (the partition-level ABORT
//! marker) and `forceTerminateTransaction`, each run as the real Java tool and its printed
//! table checked.
//!
//! The Java side needs the Kafka jars: `scripts/test` resolves them with Maven
//! (`tests/java/pom.xml`) and passes the classpath in `TXN_TEST_KAFKA_CLASSPATH`. Without it
//! the two tool tests print that they were skipped and pass; with it any failure fails them.
//! The wire-level test of the two APIs the tool needs from a broker (DescribeProducers,
//! ListTransactions) always runs.
//!
//! Scenario, per mode (two brokers, topic `kt` with two partitions, TV1 producers):
//! - `kt-open`: a healthy transaction left open on `kt-0`;
//! - `kt-late`: a transaction on `kt-1` that the coordinator aborted (markers written), then a
//!   late transactional Produce of the same producer on `kt-1`: open on the partition, unknown
//!   to the coordinator, so hanging, the case `find-hanging` and `abort` are for. KIP-890's
//!   verification prevents it, so the brokers run with
//!   `transaction.partition.verification.enable=false` (the refused case is
//!   `fault_hanging_txn`).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, DescribeProducersRequest, FindCoordinatorRequest,
    ListTransactionsRequest, MetadataRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use txn_log::TxnVersion;
use txn_testkit::client::{Features, Versions};
use txn_testkit::pool::Pool;
use txn_tests::e2e::{self, Cluster, ClusterSpec, Mode};
use txn_tests::fault::client::{ClusterView, TxnProducer};
use txn_tests::refbroker::process::BrokerProcess;

use coordinator::server::admin;

const TOPIC: &str = "kt";
/// The brokers let kt-late's late Produce in (see the module documentation).
const NO_VERIFICATION: &str = "transaction.partition.verification.enable=false";
/// `find-hanging` on [`TOPIC`] with `--max-transaction-timeout 0`: every open transaction is
/// a candidate; the tool then asks the coordinators (ListTransactions by producer id,
/// DescribeTransactions) and keeps the ones on partitions the coordinator does not have in
/// the transaction.
const HANGING_ON_TOPIC: [&str; 5] = [
    "find-hanging",
    "--topic",
    TOPIC,
    "--max-transaction-timeout",
    "0",
];
/// Bound on one run of the tool (its Admin client's own timeouts are set below this).
const TOOL_TIMEOUT: Duration = Duration::from_secs(40);

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// What one run of the tool printed.
#[derive(Debug)]
struct ToolRun {
    args: Vec<String>,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl ToolRun {
    /// The run must have exited 0; its stdout parsed as the tool's table.
    fn table(&self) -> Table {
        assert_eq!(
            self.code,
            Some(0),
            "kafka-transactions.sh {:?} failed\nstdout:\n{}\nstderr:\n{}",
            self.args,
            self.stdout,
            self.stderr
        );
        Table::parse(&self.stdout).unwrap_or_else(|| {
            panic!(
                "kafka-transactions.sh {:?} printed no table\nstdout:\n{}\nstderr:\n{}",
                self.args, self.stdout, self.stderr
            )
        })
    }
}

/// A table as `TransactionsCommand.prettyPrintTable` prints it: every cell padded and
/// followed by a tab, the header first.
#[derive(Debug)]
struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn parse(out: &str) -> Option<Self> {
        let mut lines = out.lines().filter(|l| l.contains('\t')).map(|l| {
            l.trim_end_matches('\t')
                .split('\t')
                .map(|c| c.trim().to_owned())
                .collect::<Vec<String>>()
        });
        let header = lines.next()?;
        Some(Self {
            header,
            rows: lines.collect(),
        })
    }

    fn col(&self, name: &str) -> usize {
        self.header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no column {name} in {:?}", self.header))
    }

    /// The rows whose column `name` is `value`.
    fn rows_where(&self, name: &str, value: &str) -> Vec<&Vec<String>> {
        let i = self.col(name);
        self.rows.iter().filter(|r| r[i] == value).collect()
    }

    /// The one row whose column `name` is `value`, as a lookup by column name.
    fn row(&self, name: &str, value: &str) -> impl Fn(&str) -> String + '_ {
        let found = self.rows_where(name, value);
        assert_eq!(found.len(), 1, "one row with {name}={value} in {self:?}");
        let row = found[0].clone();
        move |col| row[self.col(col)].clone()
    }
}

/// Runs `TransactionsCommand` against one bootstrap server.
struct Tool {
    classpath: String,
    bootstrap: String,
    config: PathBuf,
    dir: PathBuf,
    runs: u32,
}

impl Tool {
    fn new(classpath: String, bootstrap: String, dir: &Path) -> Self {
        // Bounded Admin client: a request the servers do not answer fails the run in seconds
        // rather than after the Admin client's default of a minute.
        let config = dir.join("admin.properties");
        std::fs::write(
            &config,
            "request.timeout.ms=10000\ndefault.api.timeout.ms=20000\n\
             retry.backoff.ms=50\nretry.backoff.max.ms=500\n",
        )
        .expect("write admin.properties");
        Self {
            classpath,
            bootstrap,
            config,
            dir: dir.to_path_buf(),
            runs: 0,
        }
    }

    fn run(&mut self, args: &[&str]) -> ToolRun {
        e2e::compat::used("kafka-transactions.sh");
        self.runs += 1;
        let out_path = self.dir.join(format!("tool-{}.out", self.runs));
        let err_path = self.dir.join(format!("tool-{}.err", self.runs));
        let out = File::create(&out_path).expect("tool stdout file");
        let err = File::create(&err_path).expect("tool stderr file");
        let mut child = txn_tests::kafka_tool::java(&self.classpath)
            .arg("org.apache.kafka.tools.TransactionsCommand")
            .arg("--bootstrap-server")
            .arg(&self.bootstrap)
            .arg("--command-config")
            .arg(&self.config)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap_or_else(|e| panic!("starting java (is a JDK on PATH?): {e}"));
        let deadline = Instant::now() + TOOL_TIMEOUT;
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
            }
        };
        let run = ToolRun {
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            code: status.and_then(|s| s.code()),
            stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
            stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
        };
        assert!(
            status.is_some(),
            "kafka-transactions.sh {args:?} did not finish within {TOOL_TIMEOUT:?}\nstdout:\n{}\nstderr:\n{}",
            run.stdout,
            run.stderr
        );
        run
    }
}

/// FindCoordinator(TRANSACTION) through `bootstrap`: the coordinator's node id.
async fn coordinator_node(pool: &mut Pool, bootstrap: std::net::SocketAddr, tid: &str) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = pool
            .call(
                bootstrap,
                &FindCoordinatorRequest::default()
                    .with_key_type(1)
                    .with_key(sb(tid)),
                2,
            )
            .await;
        match r {
            Ok(r) if r.error_code == 0 => return r.node_id.0,
            other => assert!(
                Instant::now() < deadline,
                "FindCoordinator({tid}) via {bootstrap}: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Each partition of `topic` with its leader's node id, by partition.
async fn partition_leaders(
    pool: &mut Pool,
    bootstrap: std::net::SocketAddr,
    topic: &str,
) -> Vec<(i32, i32)> {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    let md = pool
        .call(
            bootstrap,
            &MetadataRequest::default().with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(TopicName(sb(topic)))),
            ])),
            9,
        )
        .await
        .expect("metadata");
    let mut parts: Vec<(i32, i32)> = md.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.leader_id.0))
        .collect();
    parts.sort_unstable();
    parts
}

/// What [`two_transactions`] left behind.
struct TwoTransactions {
    /// Node ids of the coordinators of kt-open and kt-late.
    open_node: i32,
    late_node: i32,
    /// Leader node id of each partition of [`TOPIC`].
    leaders: Vec<i32>,
    /// Producer id and epoch of kt-open and kt-late.
    open: (i64, i16),
    late: (i64, i16),
    /// Where kt-late's hanging transaction and kt-open's open one start.
    late_offset: i64,
    open_offset: i64,
}

/// The scenario's two transactions (see the module documentation): kt-open open on kt-0,
/// kt-late hanging on kt-1.
async fn two_transactions(bootstrap: std::net::SocketAddr) -> TwoTransactions {
    let mut pool = Pool::new("kafka-tools-test", Duration::from_secs(3));
    let leaders = partition_leaders(&mut pool, bootstrap, TOPIC).await;
    let leaders = leaders.into_iter().map(|(_, leader)| leader).collect();
    let open_node = coordinator_node(&mut pool, bootstrap, "kt-open").await;
    let late_node = coordinator_node(&mut pool, bootstrap, "kt-late").await;
    let within = Duration::from_secs(20);
    let open_view = ClusterView::discover(bootstrap, TOPIC, "kt-open", within)
        .await
        .expect("discover");
    let late_view = ClusterView::discover(bootstrap, TOPIC, "kt-late", within)
        .await
        .expect("discover");
    let late_coordinator = late_view.coordinator;

    let mut open = TxnProducer::new(open_view, "kt-open", 300_000, TxnVersion::V1);
    open.init().await.expect("kt-open init");
    open.add_partitions(&[0]).await.expect("kt-open add");
    let open_offset = open
        .produce(0, &["o-1".to_owned(), "o-2".to_owned()], true)
        .await
        .expect("kt-open produce");

    let mut late = TxnProducer::new(late_view, "kt-late", 300_000, TxnVersion::V1);
    late.init().await.expect("kt-late init");
    late.add_partitions(&[1]).await.expect("kt-late add");
    late.produce(1, &["l-1".to_owned()], true)
        .await
        .expect("kt-late produce");
    late.end(false).await.expect("kt-late abort");
    // The ABORT marker is on kt-1 once the coordinator completes the abort; only then
    // does the late Produce open a transaction nobody will close.
    txn_testkit::requests::await_txn_state(&mut pool, late_coordinator, "kt-late", "CompleteAbort")
        .await;
    let late_offset = late
        .produce(1, &["l-late".to_owned()], true)
        .await
        .expect("late produce");
    TwoTransactions {
        open_node,
        late_node,
        leaders,
        open: open.pid_epoch(),
        late: late.pid_epoch(),
        late_offset,
        open_offset,
    }
}

fn scenario(mode: Mode) {
    let test = format!("kafka_transactions_sh_{}", mode.tag());
    let Some(classpath) = e2e::kafka_classpath_or_skip(&test) else {
        return;
    };
    let started = Instant::now();
    let cluster = Cluster::start(ClusterSpec::new(mode, &["kt:2"]).broker_set(NO_VERIFICATION));
    let bootstrap = cluster.brokers[0].addr;
    let mut tool = Tool::new(classpath, cluster.bootstrap(), cluster.dir());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");

    // ----- the two transactions -----
    let TwoTransactions {
        open_node,
        late_node,
        leaders,
        open,
        late,
        late_offset,
        open_offset,
    } = rt.block_on(two_transactions(bootstrap));
    let (open_pid, open_epoch) = (open.0.to_string(), open.1.to_string());
    let late_pid = late.0.to_string();

    // ----- list -----
    // The columns are the ones our admin CLI prints (`our_cli`).
    let t = tool.run(&["list"]).table();
    assert_eq!(t.header, admin::LIST_COLUMNS);
    let row = t.row("TransactionalId", "kt-open");
    assert_eq!(row("Coordinator"), open_node.to_string());
    assert_eq!(row("ProducerId"), open_pid);
    assert_eq!(row("TransactionState"), "Ongoing");
    let row = t.row("TransactionalId", "kt-late");
    assert_eq!(row("Coordinator"), late_node.to_string());
    assert_eq!(row("TransactionState"), "CompleteAbort");

    // --duration-filter: only transactions running longer than the given milliseconds
    let t = tool.run(&["list", "--duration-filter", "3600000"]).table();
    assert!(
        t.rows_where("TransactionalId", "kt-open").is_empty(),
        "kt-open has not been open for an hour: {t:?}"
    );
    let t = tool.run(&["list", "--duration-filter", "1"]).table();
    assert_eq!(t.rows_where("TransactionalId", "kt-open").len(), 1, "{t:?}");

    // --transactional-id-pattern (ListTransactions v2, KIP-1152): a regular expression that
    // must match the whole id; one that does not compile is the tool's error.
    let t = tool
        .run(&["list", "--transactional-id-pattern", "kt-o.*"])
        .table();
    assert_eq!(t.rows_where("TransactionalId", "kt-open").len(), 1, "{t:?}");
    assert!(
        t.rows_where("TransactionalId", "kt-late").is_empty(),
        "{t:?}"
    );
    let t = tool
        .run(&["list", "--transactional-id-pattern", "kt"])
        .table();
    assert!(t.rows.is_empty(), "a prefix is not a whole-id match: {t:?}");
    // Kafka's Admin client (4.1 and 4.4) maps INVALID_REGULAR_EXPRESSION to no exception of its
    // own: the tool reports the failed request and exits 1.
    let run = tool.run(&["list", "--transactional-id-pattern", "kt-(open"]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stderr.contains("Failed to list transactions"),
        "{run:?}"
    );

    // ----- describe -----
    let describe_open = ["describe", "--transactional-id", "kt-open"];
    let t = tool.run(&describe_open).table();
    assert_eq!(t.header, admin::DESCRIBE_COLUMNS);
    let row = t.row("TransactionalId", "kt-open");
    assert_eq!(row("CoordinatorId"), open_node.to_string());
    assert_eq!(row("ProducerId"), open_pid);
    assert_eq!(row("ProducerEpoch"), open_epoch);
    assert_eq!(row("TransactionState"), "Ongoing");
    assert_eq!(row("TransactionTimeoutMs"), "300000");
    assert_eq!(row("TopicPartitions"), "kt-0");
    assert!(row("TransactionDurationMs").parse::<i64>().is_ok(), "{t:?}");

    // ----- describe-producers -----
    let producers_on_0 = ["describe-producers", "--topic", TOPIC, "--partition", "0"];
    let t = tool.run(&producers_on_0).table();
    assert_eq!(
        t.header,
        [
            "ProducerId",
            "ProducerEpoch",
            "LatestCoordinatorEpoch",
            "LastSequence",
            "LastTimestamp",
            "CurrentTransactionStartOffset"
        ]
    );
    let row = t.row("ProducerId", &open_pid);
    assert_eq!(row("ProducerEpoch"), open_epoch);
    assert_eq!(row("LastSequence"), "1");
    assert_eq!(row("LatestCoordinatorEpoch"), "-1", "no marker on kt-0 yet");
    assert_eq!(
        row("CurrentTransactionStartOffset"),
        open_offset.to_string()
    );

    // ----- find-hanging -----
    // every open transaction on the topic is a candidate (see HANGING_ON_TOPIC)
    let t = tool.run(&HANGING_ON_TOPIC).table();
    assert_eq!(t.header, admin::HANGING_COLUMNS);
    assert_eq!(t.rows.len(), 1, "only kt-late's transaction hangs: {t:?}");
    let row = t.row("ProducerId", &late_pid);
    assert_eq!(row("Partition"), "1");
    assert_eq!(row("StartOffset"), late_offset.to_string());
    // by broker, with the default 15 minutes (the records carry a 2023 timestamp)
    let t = tool
        .run(&["find-hanging", "--broker-id", &leaders[1].to_string()])
        .table();
    assert_eq!(t.header, admin::HANGING_COLUMNS);
    assert_eq!(t.rows.len(), 1, "only kt-late's transaction hangs: {t:?}");
    assert_eq!(t.row("ProducerId", &late_pid)("Partition"), "1");

    // ----- abort (partition level) -----
    let late_offset = late_offset.to_string();
    let abort_late = [
        "abort",
        "--topic",
        TOPIC,
        "--partition",
        "1",
        "--start-offset",
        &late_offset,
    ];
    let run = tool.run(&abort_late);
    assert_eq!(run.code, Some(0), "abort: {run:?}");
    let t = tool
        .run(&["describe-producers", "--topic", TOPIC, "--partition", "1"])
        .table();
    assert_eq!(
        t.row("ProducerId", &late_pid)("CurrentTransactionStartOffset"),
        "None"
    );
    let t = tool.run(&HANGING_ON_TOPIC).table();
    assert!(t.rows.is_empty(), "nothing hangs after the abort: {t:?}");
    // an offset where no transaction starts is refused with exit 1
    let run = tool.run(&abort_late);
    assert_eq!(run.code, Some(1), "abort of nothing: {run:?}");
    assert!(
        run.stderr
            .contains("Could not find any open transactions starting at offset"),
        "{run:?}"
    );

    // ----- forceTerminateTransaction (KIP-939: InitProducerId with the id, fencing it) -----
    let run = tool.run(&["forceTerminateTransaction", "--transactionalId", "kt-open"]);
    assert_eq!(run.code, Some(0), "forceTerminateTransaction: {run:?}");
    let open_coordinator = rt.block_on(async {
        let mut pool = Pool::new("kafka-tools-test", Duration::from_secs(3));
        let view = ClusterView::discover(bootstrap, TOPIC, "kt-open", Duration::from_secs(20))
            .await
            .expect("discover");
        // The fence's InitProducerId is answered once the abort is complete: Empty, with
        // the epoch the fence bumped.
        let epoch =
            txn_testkit::requests::await_txn_state(&mut pool, view.coordinator, "kt-open", "Empty")
                .await
                .producer_epoch;
        assert!(epoch > open.1, "the epoch was bumped: {epoch} > {}", open.1);
        view.coordinator
    });
    let t = tool.run(&describe_open).table();
    let row = t.row("TransactionalId", "kt-open");
    assert_eq!(row("TransactionState"), "Empty");
    assert_eq!(row("TopicPartitions"), "");
    let t = tool.run(&producers_on_0).table();
    assert_eq!(
        t.row("ProducerId", &open_pid)("CurrentTransactionStartOffset"),
        "None",
        "the fence's ABORT marker closed kt-open's transaction on kt-0"
    );

    eprintln!(
        "{test}: {} tool runs against {} (coordinator of kt-open {open_coordinator}) in {:?}",
        tool.runs,
        cluster.bootstrap(),
        started.elapsed()
    );
}

#[test]
fn kafka_transactions_sh_standalone() {
    scenario(Mode::Standalone);
}

#[test]
fn kafka_transactions_sh_embedded() {
    scenario(Mode::Embedded);
}

/// The two APIs kafka-transactions.sh needs from every broker, on the wire (no Java needed):
/// ApiVersions advertises them; DescribeProducers reports the participant's producer state,
/// UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist and NOT_LEADER_OR_FOLLOWER
/// for one another node leads; a standalone broker's ListTransactions is an empty list
/// without error (it coordinates nothing) that echoes unknown state filters.
#[tokio::test]
async fn refbroker_answers_describe_producers_and_list_transactions() {
    use kafka_protocol::messages::describe_producers_request::TopicRequest;
    let dir = tempfile::tempdir().expect("tempdir");
    // Two nodes in the cluster, only node 1 runs: node 2 leads half the partitions.
    let port = txn_testkit::wire::free_port();
    let me = format!("127.0.0.1:{port}");
    let cluster = format!("1={me},2=127.0.0.1:9");
    let args = [
        "--listen",
        me.as_str(),
        "--data-dir",
        dir.path().to_str().expect("utf-8 path"),
        "--topics",
        "dp:4",
        "--node-id",
        "1",
        "--cluster",
        cluster.as_str(),
        "--coordinator",
        "127.0.0.1:9",
        "--offsets-partitions",
        "2",
    ];
    let broker = BrokerProcess::start(Path::new(env!("CARGO_BIN_EXE_refbroker")), &args);
    let addr = broker.addr();
    let mut pool = Pool::new("kafka-tools-wire", Duration::from_secs(5));

    let v = pool
        .call(addr, &ApiVersionsRequest::default(), 3)
        .await
        .expect("api versions");
    let versions = Versions::of(&v);
    let range = |k: ApiKey| versions.range(k);
    assert_eq!(range(ApiKey::DescribeProducers), Some((0, 0)));
    assert_eq!(range(ApiKey::ListTransactions), Some((0, 2)));
    // transaction.version: supported 0..2 (refbroker adds the partition on a TV2 Produce) and
    // finalized at its `transaction.version` setting, 2 by default (Kafka 4.x's), at epoch 1, above the
    // standalone daemon's 0
    let tv = |min, max| vec![("transaction.version".to_owned(), min, max)];
    assert_eq!(
        Features::of(&v),
        Features {
            supported: tv(0, 2),
            finalized_epoch: 1,
            finalized: tv(2, 2),
        }
    );

    // which partitions node 1 leads
    let leaders = partition_leaders(&mut pool, addr, "dp").await;
    let mine = leaders
        .iter()
        .find(|(_, l)| *l == 1)
        .expect("a partition")
        .0;
    let theirs = leaders
        .iter()
        .find(|(_, l)| *l == 2)
        .expect("a partition")
        .0;

    // an idempotent producer's batch on a partition node 1 leads
    let batch = txn_testkit::wire::record_batch(
        Some((4242, 3, 0)),
        false,
        &["a".to_owned(), "b".to_owned(), "c".to_owned()],
    );
    {
        use kafka_protocol::messages::ProduceRequest;
        use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
        let r = pool
            .call(
                addr,
                &ProduceRequest::default()
                    .with_acks(-1)
                    .with_timeout_ms(5000)
                    .with_topic_data(vec![
                        TopicProduceData::default()
                            .with_name(TopicName(sb("dp")))
                            .with_partition_data(vec![
                                PartitionProduceData::default()
                                    .with_index(mine)
                                    .with_records(Some(batch)),
                            ]),
                    ]),
                9,
            )
            .await
            .expect("produce");
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    }

    let describe = DescribeProducersRequest::default().with_topics(vec![
        TopicRequest::default()
            .with_name(TopicName(sb("dp")))
            .with_partition_indexes(vec![mine, theirs, 99]),
        TopicRequest::default()
            .with_name(TopicName(sb("no-such-topic")))
            .with_partition_indexes(vec![0]),
    ]);
    let r = pool.call(addr, &describe, 0).await.expect("describe");
    assert_eq!(r.topics.len(), 2);
    let dp = &r.topics[0].partitions;
    assert_eq!(
        dp.iter()
            .map(|p| (p.partition_index, p.error_code))
            .collect::<Vec<_>>(),
        vec![(mine, 0), (theirs, 6), (99, 3)],
        "NONE, NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION"
    );
    assert_eq!(dp[0].active_producers.len(), 1);
    let p = &dp[0].active_producers[0];
    assert_eq!(p.producer_id.0, 4242);
    assert_eq!(p.producer_epoch, 3);
    assert_eq!(p.last_sequence, 2);
    // the batch's largest timestamp: record_batch stamps record i at 1_700_000_000_000 + i
    assert_eq!(p.last_timestamp, 1_700_000_000_002);
    assert_eq!(p.coordinator_epoch, -1);
    assert_eq!(p.current_txn_start_offset, -1);
    assert_eq!(r.topics[1].partitions[0].error_code, 3);

    let list = ListTransactionsRequest::default()
        .with_state_filters(vec![sb("Ongoing"), sb("NoSuchState")])
        .with_duration_filter(0);
    let r = pool.call(addr, &list, 1).await.expect("list");
    assert_eq!(r.error_code, 0);
    assert!(r.transaction_states.is_empty());
    assert_eq!(
        r.unknown_state_filters
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>(),
        ["NoSuchState"]
    );
}

/// Our own admin CLI (`txn-coordinator`) on the same scenario, no Java needed: `list` and
/// `describe` print Kafka's columns in Kafka's order; `abort --topic --partition
/// --start-offset` writes the ABORT marker for the hanging transaction on its partition, as
/// Kafka's `abort` does (and refuses an offset where no transaction starts, with Kafka's
/// message and exit 1); `find-hanging --topic` / `--broker-id` answer Kafka's question with
/// Kafka's columns, before and after; `force-terminate` fences an id. Standalone (asking the
/// daemon) and embedded (asking a broker).
fn our_cli(mode: Mode) {
    let mut cluster = Cluster::start(ClusterSpec::new(mode, &["kt:2"]).broker_set(NO_VERIFICATION));
    let bootstrap = cluster.brokers[0].addr;
    let admin = match mode {
        Mode::Standalone => cluster.coordinator_host("kt-open").addr,
        Mode::Embedded => bootstrap,
    }
    .to_string();
    let bin = std::env::var_os("TXN_COORDINATOR_BIN").map_or_else(
        || {
            let exe = std::env::current_exe().expect("current_exe");
            // target/<profile>/deps/<test> -> target/<profile>/txn-coordinator
            exe.parent()
                .and_then(Path::parent)
                .expect("profile dir")
                .join("txn-coordinator")
        },
        PathBuf::from,
    );
    let run = |args: &[&str]| {
        let out = Command::new(&bin)
            .args(args)
            .args(["--bootstrap-server", &admin])
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", bin.display()));
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let cells = |out: &str, line: usize| -> Vec<String> {
        out.lines()
            .nth(line)
            .unwrap_or("")
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let tt = rt.block_on(two_transactions(bootstrap));
    let (open_pid, late_pid) = (tt.open.0.to_string(), tt.late.0.to_string());

    // list: Kafka's columns; the coordinator's node id
    let (code, out, err) = run(&["list"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(cells(&out, 0), admin::LIST_COLUMNS);
    let open_row = out
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|r| r.first() == Some(&"kt-open"))
        .unwrap_or_else(|| panic!("no kt-open in {out}"))
        .join(" ");
    assert_eq!(
        open_row,
        format!("kt-open {} {open_pid} Ongoing", tt.open_node),
        "{out}"
    );
    // --transactional-id-pattern: ListTransactions v2 on every node, whole-id matches only.
    let (code, out, err) = run(&["list", "--transactional-id-pattern", "kt-l[a-z]+"]);
    assert_eq!(code, Some(0), "{err}");
    let ids: Vec<String> = out
        .lines()
        .skip(1)
        .map(|l| cells(l, 0)[0].clone())
        .collect();
    assert_eq!(ids, ["kt-late"], "{out}");
    let (code, _, err) = run(&["list", "--transactional-id-pattern", "kt-(open"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("INVALID_REGULAR_EXPRESSION"), "{err}");
    // describe: Kafka's columns
    let (code, out, err) = run(&["describe", "--transactional-id", "kt-open"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(cells(&out, 0)[0], "CoordinatorId", "{out}");
    assert_eq!(cells(&out, 0)[8], "TopicPartitions", "{out}");
    let row = cells(&out, 1);
    assert_eq!(
        (row[0].as_str(), row[1].as_str(), row[8].as_str()),
        (tt.open_node.to_string().as_str(), "kt-open", "kt-0"),
        "{out}"
    );

    // find-hanging, Kafka's question (with --topic or --broker-id): kt-late's transaction on
    // kt-1 only (kt-open's is in its coordinator's transaction)
    let broker = tt.leaders[1].to_string();
    let start = tt.late_offset.to_string();
    for args in [
        &HANGING_ON_TOPIC[..],
        // the default 15 minutes; the records carry a 2023 timestamp
        &["find-hanging", "--broker-id", &broker][..],
    ] {
        let (code, out, err) = run(args);
        assert_eq!(code, Some(0), "{args:?}: {out}{err}");
        assert_eq!(cells(&out, 0), admin::HANGING_COLUMNS, "{out}");
        assert_eq!(out.lines().count(), 2, "{args:?}: only kt-late's: {out}");
        let row = cells(&out, 1);
        assert_eq!(
            (
                row[0].as_str(),
                row[1].as_str(),
                row[2].as_str(),
                row[5].as_str()
            ),
            (TOPIC, "1", late_pid.as_str(), start.as_str()),
            "{out}"
        );
    }

    // abort the hanging transaction on kt-1 by its start offset
    let abort = [
        "abort",
        "--topic",
        TOPIC,
        "--partition",
        "1",
        "--start-offset",
        &start,
    ];
    let (code, out, err) = run(&abort);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(
        cells(&out, 0),
        [
            "Topic",
            "Partition",
            "ProducerId",
            "ProducerEpoch",
            "CoordinatorEpoch",
            "StartOffset"
        ]
    );
    assert_eq!(
        cells(&out, 1)[..3],
        [TOPIC.to_owned(), "1".to_owned(), late_pid.clone()],
        "{out}"
    );
    // kt-1's leader reports no open transaction any more
    let leader = rt.block_on(async {
        let mut pool = Pool::new("our-cli-test", Duration::from_secs(3));
        let md = pool
            .call(bootstrap, &MetadataRequest::default().with_topics(None), 9)
            .await
            .expect("metadata");
        let b = md
            .brokers
            .iter()
            .find(|b| b.node_id.0 == tt.leaders[1])
            .expect("leader in metadata");
        let addr: std::net::SocketAddr = format!("{}:{}", b.host, b.port).parse().expect("address");
        let r = pool
            .call(
                addr,
                &DescribeProducersRequest::default().with_topics(vec![
                    kafka_protocol::messages::describe_producers_request::TopicRequest::default()
                        .with_name(TopicName(sb(TOPIC)))
                        .with_partition_indexes(vec![1]),
                ]),
                0,
            )
            .await
            .expect("describe producers");
        let p = &r.topics[0].partitions[0];
        assert_eq!(p.error_code, 0);
        assert!(
            p.active_producers
                .iter()
                .all(|a| a.current_txn_start_offset == -1),
            "{p:?}"
        );
        addr
    });
    let (code, out, err) = run(&HANGING_ON_TOPIC);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(
        out.lines().count(),
        1,
        "nothing hangs after the abort: {out}"
    );
    // nothing starts there any more: Kafka's message, exit 1
    let (code, out, err) = run(&abort);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains("Could not find any open transactions starting at offset"),
        "{err}"
    );

    // force-terminate kt-open: fenced, Empty or CompleteAbort, marker on kt-0
    let (code, out, err) = run(&["force-terminate", "--transactional-id", "kt-open"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let row = cells(&out, 1);
    assert_eq!(row[1], "kt-open", "{out}");
    assert!(
        matches!(row[4].as_str(), "Empty" | "CompleteAbort"),
        "{out}"
    );
    assert!(
        row[3].parse::<i16>().expect("epoch") > tt.open.1,
        "the epoch was bumped: {out}"
    );
    eprintln!(
        "our_cli_{}: abort on kt-1 via leader {leader}, force-terminate kt-open",
        mode.tag()
    );
}

#[test]
fn our_cli_matches_kafkas_tool_standalone() {
    our_cli(Mode::Standalone);
}

#[test]
fn our_cli_matches_kafkas_tool_embedded() {
    our_cli(Mode::Embedded);
}
