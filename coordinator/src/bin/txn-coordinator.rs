//! The standalone `txn-coordinator` daemon and its admin commands.
//!
//! `txn-coordinator serve` runs the Kafka transaction coordinator on 127.0.0.1:9093 with its
//! log in ./txn-data; see `--help` and docs/operations.md.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use coordinator::server::admin::{self, AdminClient, Format};
use coordinator::server::{self, LogFormat, ServeConfig, ServeOptions};

/// jemalloc with background purging: memory freed after recovery (sled's read of the whole
/// log) goes back to the system within its decay time (10 s), where glibc's malloc kept it
/// resident.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Debug, Parser)]
#[command(
    name = "txn-coordinator",
    version,
    about = "Kafka transaction coordinator daemon and admin tool"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the coordinator (with the default sled log it owns every transaction log partition;
    /// with `txn.log.backend=etcd` the live daemons share them).
    Serve(ServeArgs),
    /// List transactions (ListTransactions).
    List {
        #[command(flatten)]
        target: Target,
        /// Only these states (repeatable), e.g. Ongoing.
        #[arg(long = "state")]
        states: Vec<String>,
        /// Only these producer ids (repeatable).
        #[arg(long = "producer-id")]
        producer_ids: Vec<i64>,
        /// Only transactions running longer than this (ms). Kafka's name; `--duration-ms` is
        /// the same flag.
        #[arg(
            long = "duration-filter",
            visible_alias = "duration-ms",
            value_name = "MS"
        )]
        duration_ms: Option<i64>,
        /// Only transactional ids this regular expression (RE2 syntax) matches as a whole.
        #[arg(long = "transactional-id-pattern", value_name = "REGEX")]
        transactional_id_pattern: Option<String>,
    },
    /// Describe one transactional id (DescribeTransactions).
    Describe {
        #[command(flatten)]
        target: Target,
        /// The transactional id.
        #[arg(long = "transactional-id")]
        transactional_id: String,
    },
    /// Transactions open longer than their timeout (a Prepare* one holds its partitions' LSO).
    /// With --topic or --broker-id: Kafka's question instead, transactions open on those
    /// partitions that no coordinator will close (DescribeProducers on the leaders).
    FindHanging {
        #[command(flatten)]
        target: Target,
        /// Search the partitions of this topic (Kafka's find-hanging).
        #[arg(long)]
        topic: Option<String>,
        /// Only this partition of --topic.
        #[arg(long, requires = "topic")]
        partition: Option<i32>,
        /// Search the partitions this broker leads (Kafka's find-hanging).
        #[arg(long = "broker-id")]
        broker_id: Option<i32>,
        /// With --topic or --broker-id: only producers whose last write is older than this
        /// many minutes (Kafka's default 15).
        #[arg(
            long = "max-transaction-timeout",
            default_value_t = 15,
            value_name = "MINUTES"
        )]
        max_transaction_timeout: i64,
    },
    /// With --transactional-id: force-terminate (the same command). With --topic, --partition
    /// and --start-offset: write an ABORT marker for the transaction open on that partition at
    /// that offset (a hanging one), as Kafka's `kafka-transactions.sh abort`.
    Abort {
        #[command(flatten)]
        target: Target,
        /// The transactional id (force-terminate it).
        #[arg(
            long = "transactional-id",
            required_unless_present = "topic",
            conflicts_with_all = ["topic", "partition", "start_offset"]
        )]
        transactional_id: Option<String>,
        /// Topic of the partition with the open transaction.
        #[arg(long, requires_all = ["partition", "start_offset"])]
        topic: Option<String>,
        /// The partition.
        #[arg(long, requires = "topic")]
        partition: Option<i32>,
        /// Offset of the first record of the transaction (describe-producers'
        /// CurrentTransactionStartOffset, find-hanging's StartOffset in Kafka's tool).
        #[arg(long = "start-offset", requires = "topic")]
        start_offset: Option<i64>,
        /// With --transactional-id: how long to wait for the abort to complete (its markers
        /// delivered) before giving up.
        #[arg(long = "timeout-ms", default_value_t = admin::DEFAULT_ABORT_TIMEOUT_MS)]
        timeout_ms: u64,
    },
    /// Abort the open transaction of an id by fencing its producer (Kafka 4.1's
    /// forceTerminateTransaction, Admin.fenceProducers); a transaction already decided keeps
    /// its decision and has its markers delivered again. Waits until the id is idle, at most
    /// --timeout-ms; exits 1 if it is not idle by then.
    #[command(alias = "forceTerminateTransaction")]
    ForceTerminate {
        #[command(flatten)]
        target: Target,
        /// The transactional id.
        #[arg(long = "transactional-id", alias = "transactionalId")]
        transactional_id: String,
        /// How long to wait for the abort to complete (its markers delivered) before giving up.
        #[arg(long = "timeout-ms", default_value_t = admin::DEFAULT_ABORT_TIMEOUT_MS)]
        timeout_ms: u64,
    },
    /// SCRAM credentials in the log backend, offline.
    #[command(subcommand)]
    Scram(ScramCommand),
    /// ACL bindings in the log backend, offline.
    #[command(subcommand)]
    Acl(AclCommand),
    /// Decode the sled transaction log offline (stop the daemon first).
    DumpLog {
        /// The daemon's data directory (the sled log; default: the `data-dir` key of --config;
        /// not needed with `--set txn.log.backend=etcd`).
        #[arg(long = "data-dir")]
        data_dir: Option<PathBuf>,
        /// The daemon's TOML configuration file (`serve --config`): its
        /// transaction.state.log.num.partitions, data-dir and etcd keys are used.
        #[arg(long = "config")]
        config: Option<PathBuf>,
        /// Override a key (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
}

/// Where an offline command writes: the daemon's log backend.
#[derive(Debug, Args)]
struct Store {
    /// The daemon's data directory (the sled log; default: the `data-dir` key of --config;
    /// not needed with `--set txn.log.backend=etcd`). No daemon may run on it.
    #[arg(long = "data-dir")]
    data_dir: Option<PathBuf>,
    /// The daemon's TOML configuration file (`serve --config`).
    #[arg(long = "config")]
    config: Option<PathBuf>,
    /// Override a key (repeatable), e.g. txn.log.backend=etcd.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
}

#[derive(Debug, Subcommand)]
enum ScramCommand {
    /// Store a user's SCRAM credential (the first administrator, before any daemon runs).
    Add {
        /// The user (the principal User:<user>).
        #[arg(long)]
        user: String,
        /// SCRAM-SHA-256 or SCRAM-SHA-512.
        #[arg(long, default_value = "SCRAM-SHA-512")]
        mechanism: String,
        /// File whose first line is the password.
        #[arg(long = "password-file")]
        password_file: PathBuf,
        /// Iterations (4096 to 16384).
        #[arg(long, default_value_t = 8192)]
        iterations: u32,
        #[command(flatten)]
        store: Store,
    },
}

#[derive(Debug, Subcommand)]
enum AclCommand {
    /// Store one ACL binding (kafka-acls.sh --add does the same through a running daemon).
    Add {
        /// The principal, e.g. User:alice.
        #[arg(long)]
        principal: String,
        /// Topic, Group, Cluster, TransactionalId, ...
        #[arg(long = "resource-type")]
        resource_type: String,
        /// The resource name (kafka-cluster for the Cluster).
        #[arg(long = "resource-name")]
        resource_name: String,
        /// literal or prefixed.
        #[arg(long = "pattern-type", default_value = "literal")]
        pattern_type: String,
        /// Read, Write, Describe, All, ...
        #[arg(long)]
        operation: String,
        /// allow or deny.
        #[arg(long, default_value = "allow")]
        permission: String,
        /// The client host (* for any).
        #[arg(long, default_value = "*")]
        host: String,
        #[command(flatten)]
        store: Store,
    },
}

#[derive(Debug, Args)]
struct Target {
    /// The coordinator to ask: HOST:PORT, or a comma-separated list of them (the first that
    /// answers is used).
    #[arg(long = "bootstrap-server", default_value = server::DEFAULT_LISTEN)]
    bootstrap_server: String,
    /// Client security, as Kafka's tools take it: a properties file with security.protocol,
    /// ssl.truststore.location, ssl.keystore.location, ssl.endpoint.identification.algorithm,
    /// sasl.mechanism and sasl.jaas.config (PEM stores only). None: PLAINTEXT.
    #[arg(long = "command-config", value_name = "FILE")]
    command_config: Option<PathBuf>,
    /// JSON output.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = server::DEFAULT_LISTEN, value_name = "HOST:PORT")]
    listen: String,
    /// Address clients are told to connect to (default: the bound address).
    #[arg(long = "advertised-listener", value_name = "HOST:PORT")]
    advertised_listener: Option<String>,
    /// Directory of the sled transaction log.
    #[arg(long = "data-dir", default_value = server::DEFAULT_DATA_DIR)]
    data_dir: PathBuf,
    /// Broker id of this node in Metadata and FindCoordinator answers.
    #[arg(long = "node-id", default_value_t = server::DEFAULT_NODE_ID)]
    node_id: i32,
    /// Brokers leading the data partitions (metadata, group coordinators, marker destinations).
    #[arg(
        long = "bootstrap-servers",
        value_name = "HOST:PORT[,...]",
        value_delimiter = ','
    )]
    bootstrap_servers: Vec<String>,
    /// TOML file with Kafka-named keys.
    #[arg(long = "config", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Override a key (repeatable), e.g. --set transaction.max.timeout.ms=60000.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Serve Prometheus metrics at http://HOST:PORT/metrics, and /health and /ready.
    #[arg(long = "metrics-listen", value_name = "HOST:PORT")]
    metrics_listen: Option<String>,
    /// Log line format on stderr: text, or json (one JSON object per line).
    #[arg(long = "log-format", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
}

/// The `serve` flags given on the command line (by their clap ids), which win over the same
/// keys in --config and --set.
#[derive(Debug, Default)]
struct GivenFlags(Vec<String>);

impl GivenFlags {
    fn of(matches: &ArgMatches) -> Self {
        let Some(("serve", sub)) = matches.subcommand() else {
            return Self::default();
        };
        Self(
            sub.ids()
                .filter(|id| sub.value_source(id.as_str()) == Some(ValueSource::CommandLine))
                .map(|id| id.as_str().to_owned())
                .collect(),
        )
    }

    fn has(&self, id: &str) -> bool {
        self.0.iter().any(|g| g == id)
    }
}

/// Reads --config and applies --set; the settings are validated.
fn configuration(config: Option<&PathBuf>, set: &[String]) -> Result<ServeConfig, String> {
    let mut c = ServeConfig::default();
    if let Some(path) = config {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read --config {}: {e}", path.display()))?;
        c.apply_toml(&path.display().to_string(), &text)
            .map_err(|e| e.to_string())?;
    }
    for kv in set {
        c.apply_override(kv).map_err(|e| e.to_string())?;
    }
    c.settings = c.settings.validate().map_err(|e| e.to_string())?;
    Ok(c)
}

/// The serve options: a flag given on the command line, else its key from --set or
/// --config, else the flag's default.
fn serve_options(a: ServeArgs, given: &GivenFlags, c: ServeConfig) -> (ServeOptions, LogFormat) {
    let f = c.flags;
    let pick = |id: &str| given.has(id);
    let log_format = if pick("log_format") {
        LogFormat::parse(&a.log_format).unwrap_or_default()
    } else {
        f.log_format
            .or_else(|| LogFormat::parse(&a.log_format))
            .unwrap_or_default()
    };
    let bootstrap_servers = if pick("bootstrap_servers") {
        a.bootstrap_servers
    } else {
        f.bootstrap_servers.unwrap_or(a.bootstrap_servers)
    };
    let opts = ServeOptions {
        listen_given: pick("listen") || f.listen.is_some(),
        listen: if pick("listen") {
            a.listen
        } else {
            f.listen.unwrap_or(a.listen)
        },
        advertised_listener: if pick("advertised_listener") {
            a.advertised_listener
        } else {
            f.advertised_listener.or(a.advertised_listener)
        },
        data_dir: if pick("data_dir") {
            a.data_dir
        } else {
            f.data_dir.unwrap_or(a.data_dir)
        },
        node_id: if pick("node_id") {
            a.node_id
        } else {
            f.node_id.unwrap_or(a.node_id)
        },
        bootstrap_servers: bootstrap_servers
            .into_iter()
            .filter(|b| !b.is_empty())
            .collect(),
        metrics_listen: if pick("metrics_listen") {
            a.metrics_listen
        } else {
            f.metrics_listen.unwrap_or(a.metrics_listen)
        },
        settings: c.settings,
    };
    (opts, log_format)
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().with_ansi(false).init(),
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
    }
}

/// The admin connection `target` names, with the security of its `--command-config`.
async fn connect(target: &Target) -> Result<AdminClient, (u8, String)> {
    let security = match &target.command_config {
        Some(path) => {
            let (security, ignored) =
                admin::command_config(path).map_err(|e| (2, format!("{e:#}")))?;
            for key in ignored {
                eprintln!(
                    "warning: --command-config {}: {key} is not read (only the security keys are)",
                    path.display()
                );
            }
            security
        }
        None => server::outgoing::ClientSecurity::from_keys("", |_| None)
            .map_err(|e| (2, format!("{e:#}")))?,
    };
    AdminClient::connect(&target.bootstrap_server, security)
        .await
        .map_err(|e| (1, format!("{e:#}")))
}

fn fmt_of(json: bool) -> Format {
    if json { Format::Json } else { Format::Table }
}

/// What `run` does: a command, with `serve` already configured (its options are needed
/// before the runtime starts, to set up logging).
enum Run {
    Serve(Box<ServeOptions>),
    Other(Box<Command>),
}

async fn run(what: Run) -> Result<(), (u8, String)> {
    let fail = |e: anyhow::Error| (1u8, format!("{e:#}"));
    let command = match what {
        Run::Serve(opts) => {
            return server::serve(*opts).await.map_err(|e| {
                let code = if e.downcast_ref::<server::SettingsError>().is_some() {
                    2
                } else {
                    1
                };
                (code, format!("{e:#}"))
            });
        }
        Run::Other(c) => *c,
    };
    match command {
        Command::Serve(_) => Err((1, "serve is configured before the runtime".to_owned())),
        Command::List {
            target,
            states,
            producer_ids,
            duration_ms,
            transactional_id_pattern,
        } => {
            let mut c = connect(&target).await?;
            let filters = admin::ListFilters {
                states,
                producer_ids,
                duration_ms,
                transactional_id_pattern,
            };
            let rows = c.list(&filters).await.map_err(fail)?;
            print!("{}", admin::render_rows(&rows, fmt_of(target.json), false));
            Ok(())
        }
        Command::Describe {
            target,
            transactional_id,
        } => {
            let mut c = connect(&target).await?;
            let mut rows = Vec::new();
            for (id, r) in c.describe(&[transactional_id]).await.map_err(fail)? {
                match r {
                    Ok(row) => rows.push(row),
                    Err(e) => return Err((1, format!("{id}: {e}"))),
                }
            }
            print!("{}", admin::render_rows(&rows, fmt_of(target.json), true));
            Ok(())
        }
        Command::FindHanging {
            target,
            topic,
            partition,
            broker_id,
            max_transaction_timeout,
        } => {
            let mut c = connect(&target).await?;
            if topic.is_some() || broker_id.is_some() {
                let rows = c
                    .find_hanging_on_partitions(
                        topic.as_deref(),
                        partition,
                        broker_id,
                        max_transaction_timeout.saturating_mul(60_000),
                    )
                    .await
                    .map_err(fail)?;
                print!("{}", admin::render_open_txns(&rows, fmt_of(target.json)));
                return Ok(());
            }
            let rows = c.find_hanging().await.map_err(fail)?;
            print!("{}", admin::render_rows(&rows, fmt_of(target.json), true));
            Ok(())
        }
        Command::Abort {
            target,
            transactional_id: Some(transactional_id),
            timeout_ms,
            ..
        }
        | Command::ForceTerminate {
            target,
            transactional_id,
            timeout_ms,
        } => {
            let mut c = connect(&target).await?;
            let row = c
                .abort_within(
                    &transactional_id,
                    std::time::Duration::from_millis(timeout_ms),
                )
                .await
                .map_err(fail)?;
            print!("{}", admin::render_rows(&[row], fmt_of(target.json), true));
            Ok(())
        }
        Command::Abort {
            target,
            topic,
            partition,
            start_offset,
            ..
        } => {
            let (Some(topic), Some(partition), Some(start_offset)) =
                (topic, partition, start_offset)
            else {
                return Err((
                    2,
                    "abort needs --transactional-id, or --topic, --partition and --start-offset"
                        .to_owned(),
                ));
            };
            let mut c = connect(&target).await?;
            let row = c
                .abort_partition(&topic, partition, start_offset)
                .await
                .map_err(fail)?;
            print!("{}", admin::render_aborted(&row, fmt_of(target.json)));
            Ok(())
        }
        Command::Scram(ScramCommand::Add {
            user,
            mechanism,
            password_file,
            iterations,
            store,
        }) => {
            let mechanism: security::sasl::ScramMechanism = mechanism
                .parse()
                .map_err(|e| (2, format!("--mechanism {mechanism}: {e}")))?;
            let text = std::fs::read_to_string(&password_file)
                .map_err(|e| (2, format!("cannot read {}: {e}", password_file.display())))?;
            let password = text.lines().next().unwrap_or_default();
            if user.is_empty() || password.is_empty() {
                return Err((2, "the user and the password must not be empty".to_owned()));
            }
            let credential =
                security::sasl::ScramCredential::from_password(mechanism, password, iterations)
                    .map_err(|e| (2, e.to_string()))?;
            let change = txn_log::SecurityChange::PutScram(txn_log::StoredScram {
                user: user.clone(),
                mechanism,
                credential,
            });
            offline_write(&store, &[change]).await?;
            println!("stored the {mechanism} credential of {user}");
            Ok(())
        }
        Command::Acl(AclCommand::Add {
            principal,
            resource_type,
            resource_name,
            pattern_type,
            operation,
            permission,
            host,
            store,
        }) => {
            use security::acl::{
                AccessControlEntry, AclBinding, AclOperation, AclPermissionType, PatternType,
                ResourcePattern, ResourceType,
            };
            let bad = |e: String| (2u8, e);
            let binding = AclBinding::new(
                ResourcePattern::new(
                    resource_type
                        .parse::<ResourceType>()
                        .map_err(|e| bad(e.to_string()))?,
                    resource_name,
                    pattern_type
                        .parse::<PatternType>()
                        .map_err(|e| bad(e.to_string()))?,
                ),
                AccessControlEntry::new(
                    principal,
                    host,
                    operation
                        .parse::<AclOperation>()
                        .map_err(|e| bad(e.to_string()))?,
                    permission
                        .parse::<AclPermissionType>()
                        .map_err(|e| bad(e.to_string()))?,
                ),
            );
            binding
                .validate_for_create()
                .map_err(|e| bad(e.to_string()))?;
            offline_write(&store, &[txn_log::SecurityChange::PutAcl(binding.clone())]).await?;
            println!("stored {binding}");
            Ok(())
        }
        Command::DumpLog {
            data_dir,
            config,
            set,
            json,
        } => {
            let c = configuration(config.as_ref(), &set).map_err(|e| (2, e))?;
            let s = &c.settings;
            let out = if s.txn_log_backend == server::LogBackend::Etcd {
                admin::dump_etcd(s, fmt_of(json)).await.map_err(fail)?
            } else {
                let Some(data_dir) = data_dir.or(c.flags.data_dir.clone()) else {
                    return Err((
                        2,
                        "dump-log needs --data-dir (the sled log), or a data-dir key in --config"
                            .to_owned(),
                    ));
                };
                let recorded = server::recorded_partition_count(&data_dir).map_err(fail)?;
                let partitions = dump_partitions(
                    recorded,
                    c.is_given(PARTITIONS_KEY)
                        .then_some(s.engine.transaction_state_log_num_partitions),
                    s.engine.transaction_state_log_num_partitions,
                    &data_dir,
                )
                .map_err(|e| (2, e))?;
                admin::dump_log(&data_dir, partitions, fmt_of(json))
                    .await
                    .map_err(fail)?
            };
            print!("{out}");
            Ok(())
        }
    }
}

const PARTITIONS_KEY: &str = "transaction.state.log.num.partitions";

/// Writes security records into the log backend `store` names, with no daemon needed.
async fn offline_write(
    store: &Store,
    changes: &[txn_log::SecurityChange],
) -> Result<(), (u8, String)> {
    let c = configuration(store.config.as_ref(), &store.set).map_err(|e| (2, e))?;
    let data_dir = store
        .data_dir
        .clone()
        .or(c.flags.data_dir.clone())
        .unwrap_or_else(|| PathBuf::from(server::DEFAULT_DATA_DIR));
    server::security_store::apply_offline(&c.settings, &data_dir, changes)
        .await
        .map_err(|e| (1, format!("{e:#}")))
}

/// The partition count `dump-log` reads: the one the log records (`txn-coordinator.partitions`)
/// when there is one, which a count given in --config or --set must then match (as `serve`
/// refuses a different one); without a record, the given count or the default.
fn dump_partitions(
    recorded: Option<u32>,
    given: Option<u32>,
    default: u32,
    data_dir: &std::path::Path,
) -> Result<u32, String> {
    match (recorded, given) {
        (Some(r), Some(g)) if r != g => Err(format!(
            "{PARTITIONS_KEY} is {g}, but the log in {} was written with {r}",
            data_dir.display()
        )),
        (Some(r), _) => Ok(r),
        (None, g) => Ok(g.unwrap_or(default)),
    }
}

fn main() -> ExitCode {
    let keys: String = server::KEYS
        .iter()
        .map(|(k, default, what)| format!("  {k} (default {default}): {what}\n"))
        .collect();
    let flag_keys: String = server::SERVE_KEYS
        .iter()
        .map(|(k, default, what)| {
            let default = if default.is_empty() { "none" } else { default };
            format!("  {k} (default {default}): {what}\n")
        })
        .collect();
    let command = Cli::command().mut_subcommand("serve", |c| {
        c.after_help(format!(
            "Configuration keys (--config FILE or --set KEY=VALUE):\n{keys}\n\
             The flags as keys (a flag on the command line wins over --set, which wins over \
             the file):\n{flag_keys}"
        ))
    });
    let matches = command.get_matches();
    let given = GivenFlags::of(&matches);
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let what = match cli.command {
        Command::Serve(a) => {
            let c = match configuration(a.config.as_ref(), &a.set) {
                Ok(c) => c,
                Err(msg) => {
                    eprintln!("txn-coordinator: {msg}");
                    return ExitCode::from(2);
                }
            };
            let (opts, log_format) = serve_options(a, &given, c);
            init_tracing(log_format);
            Run::Serve(Box::new(opts))
        }
        other => Run::Other(Box::new(other)),
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("txn-coordinator: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(run(what)) {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, msg)) => {
            eprintln!("txn-coordinator: {msg}");
            tracing::error!("{msg}");
            ExitCode::from(code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dump_log_reads_the_recorded_count_unless_there_is_none() {
        let d = std::path::Path::new("/d");
        assert_eq!(dump_partitions(Some(6), None, 50, d), Ok(6));
        assert_eq!(dump_partitions(Some(6), Some(6), 50, d), Ok(6));
        assert_eq!(dump_partitions(None, None, 50, d), Ok(50));
        assert_eq!(dump_partitions(None, Some(8), 50, d), Ok(8));
        let e = dump_partitions(Some(6), Some(50), 50, d).expect_err("mismatch");
        assert!(e.contains("is 50") && e.contains("written with 6"), "{e}");
    }

    #[test]
    fn command_line_flags_win_over_the_configuration() {
        let parse = |args: &[&str]| {
            let matches = Cli::command().try_get_matches_from(args).expect("parses");
            let given = GivenFlags::of(&matches);
            let Ok(Cli {
                command: Command::Serve(a),
            }) = Cli::from_arg_matches(&matches)
            else {
                panic!("serve");
            };
            let c = configuration(None, &a.set).expect("valid");
            serve_options(a, &given, c)
        };
        let (o, f) = parse(&["t", "serve"]);
        assert_eq!(o.listen, server::DEFAULT_LISTEN);
        assert_eq!(o.node_id, server::DEFAULT_NODE_ID);
        assert_eq!(f, LogFormat::Text);
        let (o, f) = parse(&[
            "t",
            "serve",
            "--set",
            "listen=127.0.0.1:1",
            "--set",
            "node-id=5",
            "--set",
            "log-format=json",
            "--set",
            "metrics-listen=127.0.0.1:2",
        ]);
        assert_eq!(o.listen, "127.0.0.1:1");
        assert_eq!(o.node_id, 5);
        assert_eq!(o.metrics_listen.as_deref(), Some("127.0.0.1:2"));
        assert_eq!(f, LogFormat::Json);
        let (o, f) = parse(&[
            "t",
            "serve",
            "--set",
            "listen=127.0.0.1:1",
            "--listen",
            "127.0.0.1:3",
            "--log-format",
            "text",
            "--set",
            "log-format=json",
            "--set",
            "bootstrap-servers=b:1",
        ]);
        assert_eq!(o.listen, "127.0.0.1:3");
        assert_eq!(f, LogFormat::Text);
        assert_eq!(o.bootstrap_servers, ["b:1"]);
    }
}
