//! A single-node Apache Kafka (KRaft, one process that is broker and controller) run from the
//! jars of `TXN_TEST_KAFKA_CLASSPATH` (`tests/java/pom.xml`, resolved by `scripts/test`): the
//! reference of `kafka_differential` and the data broker of `kafka_participant`.
//!
//! The node's stdout and stderr go to `kafka.log` in its directory. Kafka logs through SLF4J;
//! the tools' classpath binds it to `slf4j-nop` (the tools' output stays clean), so the node
//! logs only when `TXN_TEST_KAFKA_NODE_LOGGING` names the jars of a logging binding
//! (`log4j-slf4j-impl`, which `scripts/test` resolves beside the tools' jars): the node then runs
//! on the tools' classpath without `slf4j-nop` and with that binding, at INFO.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use kafka_protocol::messages::{ApiVersionsRequest, MetadataRequest};
use txn_log::sync::{AtomicBool, Mutex, Ordering};
use txn_testkit::wire::{self, free_port};

use crate::fault::process::signal;

/// The environment variable naming the jars of an SLF4J binding for the node's own log
/// (a classpath, e.g. `DIR/*`).
pub const LOGGING_VAR: &str = "TXN_TEST_KAFKA_NODE_LOGGING";

/// How long the node gets to format its storage and answer.
const STARTUP: Duration = Duration::from_secs(120);

/// What a node is started with beyond the defaults of [`KafkaNode::start`].
#[derive(Debug, Clone, Default)]
pub struct KafkaNodeOptions {
    /// Features set when the storage is formatted (`kafka-storage format --feature NAME=LEVEL`),
    /// e.g. `("transaction.version", 1)`; the release's defaults otherwise.
    pub features: Vec<(String, i16)>,
    /// Server properties, each replacing a default of the same key or added after them.
    pub properties: Vec<(String, String)>,
}

impl KafkaNodeOptions {
    /// Adds a feature level set at format time.
    pub fn feature(mut self, name: &str, level: i16) -> Self {
        self.features.push((name.to_owned(), level));
        self
    }

    /// Adds (or replaces) a server property.
    pub fn property(mut self, key: &str, value: impl ToString) -> Self {
        self.properties.push((key.to_owned(), value.to_string()));
        self
    }
}

/// A running Kafka node; killed (continued first if stopped) on drop.
#[derive(Debug)]
pub struct KafkaNode {
    child: Mutex<Child>,
    addr: SocketAddr,
    log: PathBuf,
    paused: AtomicBool,
}

impl KafkaNode {
    /// Formats and starts a node in `dir` (its data in `dir/logs`, its log in `dir/kafka.log`)
    /// on free loopback ports; returns once it answers ApiVersions and lists itself in
    /// Metadata (bounded: 120 s). The defaults: node id 1, one PLAINTEXT listener, replication
    /// factor 1 for the internal topics, one `__transaction_state` partition.
    pub async fn start(
        classpath: &str,
        dir: &Path,
        options: &KafkaNodeOptions,
    ) -> anyhow::Result<Self> {
        let (port, controller) = (free_port(), free_port());
        let log = dir.join("kafka.log");
        let mut props: Vec<(String, String)> = [
            ("process.roles", "broker,controller".to_owned()),
            ("node.id", "1".to_owned()),
            (
                "controller.quorum.voters",
                format!("1@127.0.0.1:{controller}"),
            ),
            (
                "listeners",
                format!("PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}"),
            ),
            (
                "advertised.listeners",
                format!("PLAINTEXT://127.0.0.1:{port}"),
            ),
            ("controller.listener.names", "CONTROLLER".to_owned()),
            ("inter.broker.listener.name", "PLAINTEXT".to_owned()),
            (
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT".to_owned(),
            ),
            ("log.dirs", dir.join("logs").display().to_string()),
            ("offsets.topic.replication.factor", "1".to_owned()),
            ("transaction.state.log.replication.factor", "1".to_owned()),
            ("transaction.state.log.min.isr", "1".to_owned()),
            ("transaction.state.log.num.partitions", "1".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        for (k, v) in &options.properties {
            match props.iter_mut().find(|(key, _)| key == k) {
                Some(p) => p.1.clone_from(v),
                None => props.push((k.clone(), v.clone())),
            }
        }
        let server_props = dir.join("server.properties");
        let text: String = props.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        std::fs::write(&server_props, text).context("server.properties")?;
        let server_props = server_props.to_str().context("utf-8 path")?.to_owned();

        let (classpath, logging) = node_classpath(classpath, dir)?;
        let out = std::fs::File::create(&log).context("kafka.log")?;
        let note = |text: &str| {
            use std::io::Write;
            let _ = writeln!(&out, "=== kafka_node: {text}");
        };
        if logging.is_none() {
            note(&format!(
                "{LOGGING_VAR} is not set: Kafka's own log is off (slf4j-nop)"
            ));
        }
        let java = |args: &[&str]| {
            let mut cmd = Command::new("java");
            if let Some(config) = &logging {
                cmd.arg(format!("-Dlog4j2.configurationFile={}", config.display()));
            }
            cmd.arg("-cp").arg(&classpath).args(args);
            cmd
        };
        let uuid = java(&["kafka.tools.StorageTool", "random-uuid"])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .context("run kafka-storage random-uuid")?;
        let uuid = String::from_utf8_lossy(&uuid.stdout)
            .lines()
            .last()
            .context("a cluster id from kafka-storage random-uuid")?
            .trim()
            .to_owned();
        let mut format_args = vec![
            "kafka.tools.StorageTool".to_owned(),
            "format".to_owned(),
            "--cluster-id".to_owned(),
            uuid,
            "--config".to_owned(),
            server_props.clone(),
        ];
        for (name, level) in &options.features {
            format_args.push("--feature".to_owned());
            format_args.push(format!("{name}={level}"));
        }
        note(&format!(
            "kafka-storage format {}",
            format_args[1..].join(" ")
        ));
        let format_args: Vec<&str> = format_args.iter().map(String::as_str).collect();
        let format = java(&format_args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out.try_clone()?))
            .stderr(Stdio::from(out.try_clone()?))
            .status()
            .context("run kafka-storage format")?;
        if !format.success() {
            bail!(
                "kafka-storage format failed ({format}); {}:\n{}",
                log.display(),
                tail(&log, 30)
            );
        }
        note(&format!("starting Kafka on 127.0.0.1:{port}"));
        let child = java(&["-Xmx512m"])
            .arg("kafka.Kafka")
            .arg(&server_props)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out.try_clone()?))
            .stderr(Stdio::from(out))
            .spawn()
            .context("start Kafka")?;
        let node = Self {
            child: Mutex::new(child),
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            log,
            paused: AtomicBool::new(false),
        };
        node.await_ready().await?;
        Ok(node)
    }

    async fn await_ready(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + STARTUP;
        while Instant::now() < deadline {
            if let Some(status) = self.exited() {
                bail!(
                    "Kafka exited during startup ({status}); {}:\n{}",
                    self.log.display(),
                    self.tail(40)
                );
            }
            if let Ok(mut c) = wire::try_connect(self.addr, "kafka-node-probe").await
                && let Ok(Ok(v)) = tokio::time::timeout(
                    Duration::from_secs(3),
                    c.call(
                        &ApiVersionsRequest::default()
                            .with_client_software_name(wire::sb("kafka-node-probe"))
                            .with_client_software_version(wire::sb("1")),
                        3,
                    ),
                )
                .await
                && v.error_code == 0
                && let Ok(Ok(md)) = tokio::time::timeout(
                    Duration::from_secs(3),
                    c.call(&MetadataRequest::default().with_topics(Some(vec![])), 12),
                )
                .await
                && md.brokers.iter().any(|b| b.node_id.0 == 1)
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        bail!(
            "Kafka did not answer on {} within {STARTUP:?}; {}:\n{}",
            self.addr,
            self.log.display(),
            self.tail(40)
        )
    }

    fn exited(&self) -> Option<std::process::ExitStatus> {
        self.child.lock().try_wait().ok().flatten()
    }

    /// The PLAINTEXT listener.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The node's stdout and stderr (and its log when logging is on).
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// The last `n` lines of the node's log.
    pub fn tail(&self, n: usize) -> String {
        tail(&self.log, n)
    }

    /// The JVM's process id.
    pub fn pid(&self) -> u32 {
        self.child.lock().id()
    }

    /// SIGSTOPs the JVM: the node stops answering, its connections stay open.
    pub fn pause(&self) -> anyhow::Result<()> {
        signal(self.pid(), "STOP")?;
        self.paused.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// SIGCONTs the JVM after [`pause`](Self::pause).
    pub fn resume(&self) -> anyhow::Result<()> {
        if self.paused.swap(false, Ordering::SeqCst) {
            signal(self.pid(), "CONT")?;
        }
        Ok(())
    }
}

impl Drop for KafkaNode {
    fn drop(&mut self) {
        let _ = self.resume();
        let mut child = self.child.lock();
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The node's classpath and its log4j configuration: `classpath` as it is when
/// [`LOGGING_VAR`] is unset; otherwise the binding's jars, then the jars of `classpath`
/// without `slf4j-nop` (a `DIR/*` entry is expanded to list them), logging at INFO by the
/// configuration written to `dir/log4j2.properties`.
fn node_classpath(classpath: &str, dir: &Path) -> anyhow::Result<(String, Option<PathBuf>)> {
    let Some(binding) = std::env::var(LOGGING_VAR)
        .ok()
        .filter(|v| !v.trim().is_empty())
    else {
        return Ok((classpath.to_owned(), None));
    };
    let mut entries = vec![binding];
    for entry in std::env::split_paths(classpath) {
        let is_nop = |p: &Path| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("slf4j-nop"))
        };
        if entry.file_name().and_then(|n| n.to_str()) == Some("*") {
            let jars_dir = entry.parent().context("a DIR/* classpath entry")?;
            let mut jars: Vec<PathBuf> = std::fs::read_dir(jars_dir)
                .with_context(|| format!("list {}", jars_dir.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "jar") && !is_nop(p))
                .collect();
            jars.sort();
            entries.extend(jars.iter().map(|p| p.display().to_string()));
        } else if !is_nop(&entry) {
            entries.push(entry.display().to_string());
        }
    }
    let config = dir.join("log4j2.properties");
    std::fs::write(
        &config,
        "rootLogger.level=INFO\n\
         rootLogger.appenderRef.stdout.ref=STDOUT\n\
         appender.stdout.type=Console\n\
         appender.stdout.name=STDOUT\n\
         appender.stdout.layout.type=PatternLayout\n\
         appender.stdout.layout.pattern=[%d] %p %m (%c)%n\n",
    )
    .context("log4j2.properties")?;
    Ok((entries.join(":"), Some(config)))
}

/// The last `n` lines of a file.
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
