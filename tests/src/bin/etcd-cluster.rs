//! `etcd-cluster [--members N]`: starts N etcd members (default 3) on free loopback ports with
//! the test fixture (`txn_tests::etcd::EtcdCluster`), prints
//! `etcd endpoints: http://127.0.0.1:P1,...` once they answer, and stops them on SIGINT or
//! SIGTERM. For scripts that need an etcd cluster (bench/run.sh's `etcd` scenario).

use tokio::signal::unix::{SignalKind, signal};
use txn_tests::etcd::EtcdCluster;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let mut members = 3usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--members" => {
                members = args
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("--members needs a value"))?
                    .parse()?;
            }
            other => {
                anyhow::bail!("unknown argument {other:?} (usage: etcd-cluster [--members N])")
            }
        }
    }
    let mut term = signal(SignalKind::terminate())?;
    let cluster = EtcdCluster::start(members).await?;
    println!("etcd endpoints: {}", cluster.endpoints_arg());
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    drop(cluster);
    Ok(())
}
