//! refbroker with a coordinator cluster on etcd, in both modes:
//!
//! - embedded: three `refbroker --embedded-coordinator --set txn.log.backend=etcd` nodes share
//!   the log; the log partitions of a SIGKILLed broker move to the two survivors, which carry
//!   its open transaction on to its commit (markers included);
//! - standalone: one `refbroker --coordinator H:P1,H:P2,H:P3` in front of three daemons on
//!   etcd; FindCoordinator asked of the broker names the id's owner, Metadata lists the live
//!   daemons, and after the owner is SIGKILLed the broker names the survivor that took over.
//!
//! In both, the transaction open at the kill (AddPartitionsToTxn acknowledged by the dead
//! owner) is found Ongoing at the new owner with its partition, and commits there.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kafka_protocol::messages as km;
use txn_testkit::pool::Pool;
use txn_testkit::wire::free_port;
use txn_tests::etcd::requests::{add, end, find, init_at_owner, wait_state};
use txn_tests::etcd::{EtcdCluster, daemon_on_etcd};
use txn_tests::fault::process::{Proc, Spec};

const LEASE_MS: u64 = 2000;
const LOG_PARTITIONS: &str = "transaction.state.log.num.partitions=12";
const STARTUP: Duration = Duration::from_secs(60);

fn refbroker(name: &str, port: u16, dir: &Path, args: &[String]) -> Proc {
    let mut all: Vec<String> = [
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--data-dir",
        &dir.join(name).to_string_lossy(),
        "--topics",
        "t:6",
    ]
    .map(str::to_owned)
    .to_vec();
    all.extend(args.iter().cloned());
    Proc::start(
        Spec {
            name: name.to_owned(),
            bin: PathBuf::from(env!("CARGO_BIN_EXE_refbroker")),
            args: all,
            ready_prefix: "refbroker listening on ".into(),
            log_file: Some(dir.join(format!("{name}.log"))),
            env: vec![("RUST_LOG".into(), "info".into())],
        },
        STARTUP,
    )
    .expect("refbroker starts")
}

/// The owners `ask` name for `ids`, once every address in `ask` agrees on each id and the
/// owners are `expect` distinct nodes (bounded).
async fn agreed_owners(
    pool: &mut Pool,
    ask: &[SocketAddr],
    ids: &[String],
    expect: usize,
) -> Vec<(i32, SocketAddr)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut owners = Vec::new();
        let mut agreed = true;
        for id in ids {
            let mut answers = Vec::new();
            for &a in ask {
                answers.push(find(pool, a, id).await);
            }
            agreed &= answers[0].is_some() && answers.iter().all(|x| *x == answers[0]);
            owners.push(answers[0]);
        }
        let nodes: std::collections::BTreeSet<i32> = owners.iter().flatten().map(|o| o.0).collect();
        if agreed && nodes.len() == expect {
            return owners.into_iter().flatten().collect();
        }
        assert!(
            Instant::now() < deadline,
            "never agreed on {expect} owners: {owners:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The leader of each partition of `t`, from Metadata asked of `at`.
async fn leaders(pool: &mut Pool, at: SocketAddr) -> Vec<(i32, i32)> {
    use km::metadata_request::MetadataRequestTopic;
    let req = km::MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(km::TopicName("t".into()))),
    ]));
    let md = pool.call(at, &req, 4).await.expect("metadata");
    md.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.leader_id.0))
        .collect()
}

/// The node ids Metadata asked of `at` lists.
async fn listed_nodes(pool: &mut Pool, at: SocketAddr) -> Vec<i32> {
    let md = pool
        .call(
            at,
            &km::MetadataRequest::default().with_topics(Some(vec![])),
            4,
        )
        .await
        .expect("metadata");
    let mut ids: Vec<i32> = md.brokers.iter().map(|b| b.node_id.0).collect();
    ids.sort_unstable();
    ids
}

/// Opens a transaction on `id` at its owner (asked of `ask`), adds `t-partition` to it, kills
/// the owner with `kill`, and checks that a survivor (asked of `survivors`) serves the id with
/// its open transaction and commits it. Returns the time from the kill to the survivor's
/// answer.
async fn open_kill_commit(
    pool: &mut Pool,
    ask: &[SocketAddr],
    survivors: &[SocketAddr],
    id: &str,
    partition: i32,
    kill: impl FnOnce(i32),
) -> Duration {
    let (owner, pe) = init_at_owner(pool, ask, id, Duration::from_secs(30)).await;
    let (_, at) = find(pool, ask[0], id).await.expect("owner");
    assert_eq!(add(pool, at, id, pe, "t", partition).await, 0);
    assert_eq!(wait_state(pool, at, id, "Ongoing").await, vec![partition]);

    kill(owner);
    let killed = Instant::now();
    let deadline = killed + Duration::from_secs(30);
    let new_owner = loop {
        let mut found = None;
        for &a in survivors {
            if let Some((node, addr)) = find(pool, a, id).await
                && node != owner
            {
                found = Some(addr);
            }
        }
        if let Some(a) = found {
            break a;
        }
        assert!(
            Instant::now() < deadline,
            "{id} never moved off node {owner}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // The acknowledged add survived the kill: the transaction is open there with its partition.
    assert_eq!(
        wait_state(pool, new_owner, id, "Ongoing").await,
        vec![partition]
    );
    let took = killed.elapsed();
    let mut code = -1;
    for _ in 0..100 {
        code = end(pool, new_owner, id, pe).await;
        if code == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(code, 0, "EndTxn(commit) at the new owner");
    wait_state(pool, new_owner, id, "CompleteCommit").await;
    took
}

/// Standalone mode: `n` daemons (node ids 1001..) on `etcd` with a refbroker in front of them
/// (`--coordinator` naming them all), which is also their bootstrap broker.
struct Standalone {
    daemons: Vec<Proc>,
    addrs: Vec<SocketAddr>,
    broker: Proc,
}

impl Standalone {
    fn start(etcd: &EtcdCluster, dir: &Path, n: i32) -> Self {
        let broker_port = free_port();
        let broker_addr = format!("127.0.0.1:{broker_port}");
        let endpoints = etcd.endpoints_arg();
        let lease = format!("etcd.lease.ttl.ms={LEASE_MS}");
        let extra = [
            "--bootstrap-servers",
            broker_addr.as_str(),
            "--set",
            lease.as_str(),
            "--set",
            LOG_PARTITIONS,
        ];
        let daemons: Vec<Proc> = (1001..1001 + n)
            .map(|n| daemon_on_etcd(n, &endpoints, dir, &extra).expect("daemon"))
            .collect();
        let addrs: Vec<SocketAddr> = daemons.iter().map(|d| d.addr().expect("addr")).collect();
        let list = addrs
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let broker = refbroker(
            "broker",
            broker_port,
            dir,
            &["--coordinator".to_owned(), list],
        );
        Self {
            daemons,
            addrs,
            broker,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_brokers_move_a_dead_brokers_log_partitions_to_the_survivors() {
    let etcd = EtcdCluster::start(3).await.expect("etcd");
    let dir = tempfile::tempdir().expect("tmp");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let cluster = (1..=3)
        .zip(&ports)
        .map(|(n, p)| format!("{n}=127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let endpoints = etcd.endpoints_arg();
    let mut brokers: Vec<Proc> = (1..=3)
        .zip(&ports)
        .map(|(n, &port)| {
            let args = [
                "--embedded-coordinator",
                "--node-id",
                &n.to_string(),
                "--cluster",
                &cluster,
                "--set",
                "txn.log.backend=etcd",
                "--set",
                &format!("etcd.endpoints={endpoints}"),
                "--set",
                &format!("etcd.lease.ttl.ms={LEASE_MS}"),
                "--set",
                LOG_PARTITIONS,
            ]
            .map(str::to_owned);
            refbroker(&format!("broker-{n}"), port, dir.path(), &args)
        })
        .collect();
    let addrs: Vec<SocketAddr> = brokers.iter().map(|b| b.addr().expect("addr")).collect();
    let mut pool = Pool::new("etcd-embedded-test", Duration::from_secs(3));

    let ids: Vec<String> = (0..24).map(|i| format!("tx-{i}")).collect();
    let owners = agreed_owners(&mut pool, &addrs, &ids, 3).await;
    let victim = 2;
    let (id, _) = ids
        .iter()
        .zip(&owners)
        .find(|(_, o)| o.0 == victim)
        .expect("an id owned by broker 2");
    // A data partition led by a survivor (the dead broker's data partitions have no replica).
    let (partition, _) = leaders(&mut pool, addrs[0])
        .await
        .into_iter()
        .find(|(_, l)| *l != victim)
        .expect("a partition led by a survivor");
    let survivors = [addrs[0], addrs[2]];
    let took = open_kill_commit(&mut pool, &addrs, &survivors, id, partition, |owner| {
        assert_eq!(owner, victim);
        brokers[1].kill();
    })
    .await;
    println!(
        "embedded: {id} served by a survivor {took:?} after its broker was SIGKILLed (lease {LEASE_MS} ms)"
    );
    assert!(took < Duration::from_millis(LEASE_MS) + Duration::from_secs(5));
    // Every id now has one of the two survivors as owner, and they agree.
    let owners = agreed_owners(&mut pool, &survivors, &ids, 2).await;
    assert!(owners.iter().all(|o| o.0 != victim));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_broker_follows_the_daemons_of_a_cluster() {
    let etcd = EtcdCluster::start(3).await.expect("etcd");
    let dir = tempfile::tempdir().expect("tmp");
    let Standalone {
        mut daemons,
        addrs: daemon_addrs,
        broker,
    } = Standalone::start(&etcd, dir.path(), 3);
    let b = broker.addr().expect("broker address");
    let mut pool = Pool::new("etcd-standalone-test", Duration::from_secs(3));

    // The broker names the same owners as the daemons themselves, and lists the daemons.
    let ids: Vec<String> = (0..24).map(|i| format!("tx-{i}")).collect();
    let mut ask = vec![b];
    ask.extend(&daemon_addrs);
    let owners = agreed_owners(&mut pool, &ask, &ids, 3).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while listed_nodes(&mut pool, b).await != [1, 1001, 1002, 1003] {
        assert!(
            Instant::now() < deadline,
            "Metadata never listed the daemons"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let (id, (victim, _)) = ids
        .iter()
        .zip(&owners)
        .find(|(_, o)| o.0 == 1002)
        .expect("an id owned by daemon 1002");
    let victim = *victim;
    let survivors = [b, daemon_addrs[0], daemon_addrs[2]];
    let took = open_kill_commit(&mut pool, &[b], &survivors, id, 0, |owner| {
        assert_eq!(owner, victim);
        daemons[1].kill();
    })
    .await;
    println!(
        "standalone: {id} served by a survivor {took:?} after its daemon was SIGKILLed (lease {LEASE_MS} ms)"
    );
    // The broker names survivors only, and stops listing the dead daemon.
    let owners = agreed_owners(&mut pool, &survivors, &ids, 2).await;
    assert!(owners.iter().all(|o| o.0 != victim));
    let deadline = Instant::now() + Duration::from_secs(10);
    while listed_nodes(&mut pool, b).await != [1, 1001, 1003] {
        assert!(
            Instant::now() < deadline,
            "Metadata still lists the dead daemon"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The owner of an id SIGKILLed right after PrepareCommit is durable (the broker is paused, so
/// no marker is delivered yet): a survivor loads the id still PrepareCommit, answers the
/// client's retried EndTxn(commit) as Kafka does (CONCURRENT_TRANSACTIONS while the markers are
/// out, then success once CompleteCommit), and completes the commit when the broker is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_survivor_completes_a_commit_prepared_by_a_killed_owner() {
    let etcd = EtcdCluster::start(3).await.expect("etcd");
    let dir = tempfile::tempdir().expect("tmp");
    let Standalone {
        mut daemons,
        addrs,
        mut broker,
    } = Standalone::start(&etcd, dir.path(), 2);
    let mut pool = Pool::new("etcd-prepared-test", Duration::from_secs(3));

    let id = "prepared";
    let (owner, pe) = init_at_owner(&mut pool, &addrs, id, Duration::from_secs(30)).await;
    let (_, at) = find(&mut pool, addrs[0], id).await.expect("owner");
    assert_eq!(add(&mut pool, at, id, pe, "t", 0).await, 0);
    broker.pause().expect("SIGSTOP the broker");
    assert_eq!(end(&mut pool, at, id, pe).await, 0, "EndTxn(commit)");
    wait_state(&mut pool, at, id, "PrepareCommit").await;

    let victim = usize::try_from(owner - 1001).expect("node ids 1001..=1002");
    daemons[victim].kill();
    let survivor = addrs[1 - victim];
    assert_eq!(
        wait_state(&mut pool, survivor, id, "PrepareCommit").await,
        vec![0],
        "the survivor loaded the prepared commit"
    );
    let retried = end(&mut pool, survivor, id, pe).await;
    assert_eq!(
        retried, 51,
        "a retried EndTxn(commit) while the markers are out: CONCURRENT_TRANSACTIONS"
    );

    broker.resume().expect("SIGCONT the broker");
    wait_state(&mut pool, survivor, id, "CompleteCommit").await;
    assert_eq!(
        end(&mut pool, survivor, id, pe).await,
        0,
        "a retried EndTxn(commit) after CompleteCommit succeeds"
    );
}
