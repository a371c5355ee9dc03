//! `refbroker`: the reference broker (see `txn_tests::refbroker` and
//! `docs/broker-integration.md`).

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let config = txn_tests::refbroker::parse_args(std::env::args().skip(1))?;
    txn_tests::refbroker::run(config).await
}
