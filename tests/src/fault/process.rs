//! Process control for fault runs: start a daemon or refbroker on a chosen loopback port,
//! SIGKILL / SIGSTOP / SIGCONT it (through the `kill` command: the workspace forbids unsafe
//! code), restart it on the same port and data directory. Every process is killed when its
//! handle drops.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use txn_testkit::process::StdoutLines;

/// How to (re)start one process.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Name in logs and reports.
    pub name: String,
    /// The binary.
    pub bin: PathBuf,
    /// Its arguments (must bind a fixed loopback port so restarts keep the address).
    pub args: Vec<String>,
    /// The prefix of the stdout line announcing readiness, followed by the address
    /// ([`StdoutLines::listening`]).
    pub ready_prefix: String,
    /// Where stderr goes (appended), if anywhere.
    pub log_file: Option<PathBuf>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
}

/// A supervised process.
#[derive(Debug)]
pub struct Proc {
    spec: Spec,
    child: Option<Child>,
    addr: Option<SocketAddr>,
    paused: bool,
    starts: u32,
}

/// Sends `sig` (a name such as `STOP`) to process `pid` with the `kill` command.
pub(crate) fn signal(pid: u32, sig: &str) -> anyhow::Result<()> {
    let status = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("running kill")?;
    if !status.success() {
        bail!("kill -{sig} {pid} failed");
    }
    Ok(())
}

impl Proc {
    /// Starts the process and waits up to `startup` for its readiness line.
    pub fn start(spec: Spec, startup: Duration) -> anyhow::Result<Self> {
        let mut p = Self {
            spec,
            child: None,
            addr: None,
            paused: false,
            starts: 0,
        };
        p.restart(startup)?;
        Ok(p)
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The address it reported.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// Whether it is running (not killed; may be paused).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Whether it is stopped with SIGSTOP.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// How many times it was started.
    pub fn starts(&self) -> u32 {
        self.starts
    }

    /// (Re)starts a killed process with the same arguments. Retries while the port is busy.
    pub fn restart(&mut self, startup: Duration) -> anyhow::Result<()> {
        self.kill();
        let deadline = std::time::Instant::now() + startup;
        loop {
            match self.spawn_once(startup) {
                Ok(()) => return Ok(()),
                Err(e) if std::time::Instant::now() < deadline => {
                    tracing::debug!(name = %self.spec.name, "start failed, retrying: {e:#}");
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn spawn_once(&mut self, startup: Duration) -> anyhow::Result<()> {
        let stderr = match &self.spec.log_file {
            Some(f) => Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(f)
                    .with_context(|| format!("opening {}", f.display()))?,
            ),
            None => Stdio::null(),
        };
        let mut child = Command::new(&self.spec.bin)
            .args(&self.spec.args)
            .envs(self.spec.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {}", self.spec.bin.display()))?;
        let stdout = child.stdout.take().context("no stdout")?;
        match StdoutLines::read(stdout).listening(&self.spec.ready_prefix, startup) {
            Ok(listening) => {
                self.addr = Some(listening.addr);
                self.child = Some(child);
                self.paused = false;
                self.starts += 1;
                Ok(())
            }
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(e.context(format!(
                    "{} did not become ready within {startup:?}",
                    self.spec.name
                )))
            }
        }
    }

    /// SIGKILLs the process (continuing it first if paused) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.paused = false;
    }

    /// SIGSTOPs the process.
    pub fn pause(&mut self) -> anyhow::Result<()> {
        if let Some(c) = &self.child
            && !self.paused
        {
            signal(c.id(), "STOP")?;
            self.paused = true;
        }
        Ok(())
    }

    /// SIGCONTs the process.
    pub fn resume(&mut self) -> anyhow::Result<()> {
        if let Some(c) = &self.child
            && self.paused
        {
            signal(c.id(), "CONT")?;
            self.paused = false;
        }
        Ok(())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Where the workspace binaries are: next to the running test executable's `deps` directory.
pub fn bin_path(name: &str) -> PathBuf {
    if let Ok(p) = std::env::var(format!(
        "TXN_FAULT_BIN_{}",
        name.to_uppercase().replace('-', "_")
    )) {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir.join(name)
}
