//! The standalone `txn-coordinator` daemon and its admin commands.
//!
//! `txn-coordinator serve` runs the Kafka transaction coordinator on 127.0.0.1:9093 with its
//! log in ./txn-data; see `--help` and docs/operations.md.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use coordinator::server::admin::{self, AdminClient, Format};
use coordinator::server::{self, ServeOptions, Settings};

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
    /// Run the coordinator (single node: owns every transaction log partition).
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
        /// Only transactions running longer than this (ms).
        #[arg(long = "duration-ms")]
        duration_ms: Option<i64>,
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
    FindHanging {
        #[command(flatten)]
        target: Target,
    },
    /// Abort the open transaction of an id by fencing its producer (like Admin.fenceProducers).
    Abort {
        #[command(flatten)]
        target: Target,
        /// The transactional id.
        #[arg(long = "transactional-id")]
        transactional_id: String,
    },
    /// Decode the sled transaction log offline (stop the daemon first).
    DumpLog {
        /// The daemon's data directory (the sled log; not needed with
        /// `--set txn.log.backend=etcd`).
        #[arg(long = "data-dir")]
        data_dir: Option<PathBuf>,
        /// Read transaction.state.log.num.partitions from this TOML file.
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

#[derive(Debug, Args)]
struct Target {
    /// The coordinator to ask.
    #[arg(long = "bootstrap-server", default_value = server::DEFAULT_LISTEN)]
    bootstrap_server: String,
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
    /// Serve Prometheus metrics at http://HOST:PORT/metrics.
    #[arg(long = "metrics-listen", value_name = "HOST:PORT")]
    metrics_listen: Option<String>,
}

fn settings(config: Option<&PathBuf>, set: &[String]) -> Result<Settings, String> {
    let mut s = Settings::default();
    if let Some(path) = config {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read --config {}: {e}", path.display()))?;
        s.apply_toml(&path.display().to_string(), &text)
            .map_err(|e| e.to_string())?;
    }
    for kv in set {
        s.apply_override(kv).map_err(|e| e.to_string())?;
    }
    s.validate().map_err(|e| e.to_string())
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

fn fmt_of(json: bool) -> Format {
    if json { Format::Json } else { Format::Table }
}

async fn run(cli: Cli) -> Result<(), (u8, String)> {
    let fail = |e: anyhow::Error| (1u8, format!("{e:#}"));
    match cli.command {
        Command::Serve(a) => {
            let settings = settings(a.config.as_ref(), &a.set).map_err(|e| (2, e))?;
            let opts = ServeOptions {
                listen: a.listen,
                advertised_listener: a.advertised_listener,
                data_dir: a.data_dir,
                node_id: a.node_id,
                bootstrap_servers: a
                    .bootstrap_servers
                    .into_iter()
                    .filter(|b| !b.is_empty())
                    .collect(),
                metrics_listen: a.metrics_listen,
                settings,
            };
            server::serve(opts).await.map_err(|e| {
                let code = if e.downcast_ref::<server::SettingsError>().is_some() {
                    2
                } else {
                    1
                };
                (code, format!("{e:#}"))
            })
        }
        Command::List {
            target,
            states,
            producer_ids,
            duration_ms,
        } => {
            let mut c = AdminClient::connect(&target.bootstrap_server)
                .await
                .map_err(fail)?;
            let rows = c
                .list(&states, &producer_ids, duration_ms)
                .await
                .map_err(fail)?;
            print!("{}", admin::render_rows(&rows, fmt_of(target.json), false));
            Ok(())
        }
        Command::Describe {
            target,
            transactional_id,
        } => {
            let mut c = AdminClient::connect(&target.bootstrap_server)
                .await
                .map_err(fail)?;
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
        Command::FindHanging { target } => {
            let mut c = AdminClient::connect(&target.bootstrap_server)
                .await
                .map_err(fail)?;
            let rows = c.find_hanging().await.map_err(fail)?;
            print!("{}", admin::render_rows(&rows, fmt_of(target.json), true));
            Ok(())
        }
        Command::Abort {
            target,
            transactional_id,
        } => {
            let mut c = AdminClient::connect(&target.bootstrap_server)
                .await
                .map_err(fail)?;
            let row = c.abort(&transactional_id).await.map_err(fail)?;
            print!("{}", admin::render_rows(&[row], fmt_of(target.json), true));
            Ok(())
        }
        Command::DumpLog {
            data_dir,
            config,
            set,
            json,
        } => {
            let s = settings(config.as_ref(), &set).map_err(|e| (2, e))?;
            let out = if s.txn_log_backend == server::LogBackend::Etcd {
                admin::dump_etcd(&s, fmt_of(json)).await.map_err(fail)?
            } else {
                let Some(data_dir) = data_dir else {
                    return Err((2, "dump-log needs --data-dir (the sled log)".to_owned()));
                };
                // The count the log was written with, unless given explicitly.
                let explicit = config.is_some()
                    || set
                        .iter()
                        .any(|kv| kv.contains("transaction.state.log.num.partitions"));
                let recorded = server::recorded_partition_count(&data_dir).map_err(fail)?;
                let partitions = match recorded {
                    Some(n) if !explicit => n,
                    _ => s.engine.transaction_state_log_num_partitions,
                };
                admin::dump_log(&data_dir, partitions, fmt_of(json))
                    .await
                    .map_err(fail)?
            };
            print!("{out}");
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    let keys: String = server::KEYS
        .iter()
        .map(|(k, default, what)| format!("  {k} (default {default}): {what}\n"))
        .collect();
    let command = Cli::command().mut_subcommand("serve", |c| {
        c.after_help(format!(
            "Configuration keys (--config FILE or --set KEY=VALUE):\n{keys}"
        ))
    });
    let cli = match Cli::from_arg_matches(&command.get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    if matches!(cli.command, Command::Serve(_)) {
        init_tracing();
    }
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
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, msg)) => {
            eprintln!("txn-coordinator: {msg}");
            tracing::error!("{msg}");
            ExitCode::from(code)
        }
    }
}
