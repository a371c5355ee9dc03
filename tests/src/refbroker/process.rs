//! Starting a `refbroker` binary from tests: spawn, wait for its "listening" line, kill on
//! drop.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use txn_testkit::process::StdoutLines;

/// The arguments of node `node` (1-based) of a cluster of refbrokers with embedded
/// coordinators, `cluster` naming every node (`1=host:port,2=host:port`): data in `data_dir`,
/// topic `t` with three partitions, four offsets partitions and four transaction log
/// partitions. The listener is the caller's to add (`--listen` or a `listeners=` setting).
pub fn embedded_cluster_args(node: usize, cluster: &str, data_dir: &str) -> Vec<String> {
    [
        "--data-dir",
        data_dir,
        "--topics",
        "t:3",
        "--embedded-coordinator",
        "--node-id",
        &node.to_string(),
        "--cluster",
        cluster,
        "--offsets-partitions",
        "4",
        "--set",
        "transaction.state.log.num.partitions=4",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// A running `refbroker` process (killed when dropped).
#[derive(Debug)]
pub struct BrokerProcess {
    child: Child,
    addr: SocketAddr,
}

impl BrokerProcess {
    /// Runs the refbroker `bin` with `args` as `spawn` does, with 30 s to start; panics if it
    /// does not.
    pub fn start(bin: &Path, args: &[impl AsRef<str>]) -> Self {
        let args: Vec<String> = args.iter().map(|a| a.as_ref().to_owned()).collect();
        Self::spawn(bin, &args, Duration::from_secs(30)).expect("refbroker starts")
    }

    /// Runs `bin` with `args` (use `--listen 127.0.0.1:0` for a free port) and waits up to
    /// `startup` for the broker to report its address.
    pub fn spawn(bin: &Path, args: &[String], startup: Duration) -> anyhow::Result<Self> {
        let mut child = Command::new(bin)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let stdout = child.stdout.take().context("no stdout")?;
        match StdoutLines::read(stdout).listening("refbroker listening on ", startup) {
            Ok(listening) => Ok(Self {
                child,
                addr: listening.addr,
            }),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(e.context("refbroker did not report its address"))
            }
        }
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// SIGKILLs the process and waits for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
