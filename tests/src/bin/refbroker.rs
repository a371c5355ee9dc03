//! `refbroker`: the reference broker (see `txn_tests::refbroker` and
//! `docs/broker-integration.md`). `refbroker --help` lists the flags.

use std::process::ExitCode;

use clap::Parser;

/// jemalloc, as in the daemon: glibc's malloc took about 4.5% of the refbroker's CPU under load
/// (`_int_malloc`, `_int_free`, `malloc_consolidate`, ...).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    // --help and --version exit 0 here; a malformed command line exits 2 with clap's message.
    let args = txn_tests::refbroker::Args::parse();
    let config = match args.into_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("refbroker: {e:#}");
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("refbroker: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(txn_tests::refbroker::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("refbroker: {e:#}");
            ExitCode::from(1)
        }
    }
}
