//! The standalone `txn-coordinator` daemon.

fn main() {
    eprintln!("txn-coordinator: the daemon is not built yet (see the open daemon issue)");
    std::process::exit(2);
}
