//! The compatibility record: every end-to-end test that passes notes which real clients it ran
//! against which deployment, and at which `transaction.version` the brokers finalized;
//! `scripts/compat-table` (run by `scripts/test` after the suite) turns the notes into the
//! matrix of docs/compatibility.md. A test that fails or is skipped notes nothing.
//!
//! Clients note themselves when they start ([`used`]); the cluster writes the note when it is
//! dropped at the end of a passing test, after asking a broker for its finalized features.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use kafka_protocol::messages::ApiVersionsRequest;
use kafka_protocol::protocol::StrBytes;
use txn_testkit::blocking;

thread_local! {
    /// The clients the current test (one thread per test) has started.
    static CLIENTS: RefCell<BTreeSet<&'static str>> = const { RefCell::new(BTreeSet::new()) };
}

/// Notes that the current test ran `client` (`librdkafka`, `kafka-python`, `java`,
/// `kafka-transactions.sh`).
pub fn used(client: &'static str) {
    CLIENTS.with(|c| c.borrow_mut().insert(client));
}

/// Where the notes go, one file per test: `compat/` under the target directory's test scratch
/// space `<target>/tmp` (what cargo passes to integration tests as `CARGO_TARGET_TMPDIR`),
/// found from the running test executable, `<target>/<profile>/deps/<crate>-<hash>`.
pub fn dir() -> PathBuf {
    let profile = super::profile_dir();
    let target = profile.parent().expect("target dir");
    target.join("tmp").join("compat")
}

/// The crate name of the running test executable (`e2e_basic` for `tests/tests/e2e_basic.rs`,
/// what cargo passes to it as `CARGO_CRATE_NAME`).
pub fn test_crate_name() -> String {
    let exe = std::env::current_exe().expect("current_exe");
    let stem = exe.file_stem().map(|s| s.to_string_lossy().into_owned());
    crate_name(&stem.unwrap_or_default()).to_owned()
}

/// `name` from an executable's file stem `name-<16 hex digits>` as cargo names test
/// executables; a stem without such a suffix as it is.
fn crate_name(stem: &str) -> &str {
    match stem.rsplit_once('-') {
        Some((name, hash))
            if !name.is_empty()
                && hash.len() == 16
                && hash.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            name
        }
        _ => stem,
    }
}

/// Writes the current test's note (nothing if it started no client): its name, the mode, etcd
/// or not, and the `transaction.version` finalized by `broker` (0 when it lists none).
pub(crate) fn record(mode: &str, etcd: bool, broker: SocketAddr) {
    let clients: Vec<&'static str> = CLIENTS
        .with(|c| std::mem::take(&mut *c.borrow_mut()))
        .into_iter()
        .collect();
    if clients.is_empty() {
        return;
    }
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("unknown").replace("::", "-");
    let finalized = finalized_transaction_version(broker).unwrap_or(-1);
    let clients: Vec<String> = clients.iter().map(|c| format!("\"{c}\"")).collect();
    let file = test_crate_name();
    let note = format!(
        "{{\"file\":\"{file}\",\"test\":\"{test}\",\"mode\":\"{mode}\",\"etcd\":{etcd},\
         \"finalized_transaction_version\":{finalized},\"clients\":[{}]}}\n",
        clients.join(",")
    );
    let dir = dir();
    let written = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(dir.join(format!("{file}-{test}.json")), note));
    if let Err(e) = written {
        eprintln!("compat: could not write the note of {test}: {e}");
    }
}

/// ApiVersions v3 to `addr`: the finalized `transaction.version` level (0 if not listed).
fn finalized_transaction_version(addr: SocketAddr) -> Option<i16> {
    let request = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("e2e-compat"))
        .with_client_software_version(StrBytes::from_static_str("1"));
    let r = blocking::call(addr, "e2e-compat", &request, 3, Duration::from_secs(5)).ok()?;
    Some(
        r.finalized_features
            .iter()
            .find(|f| f.name.as_str() == "transaction.version")
            .map_or(0, |f| f.max_version_level),
    )
}

#[cfg(test)]
mod tests {
    use super::crate_name;

    #[test]
    fn crate_name_drops_cargos_hash_suffix() {
        assert_eq!(crate_name("e2e_basic-0123456789abcdef"), "e2e_basic");
        assert_eq!(crate_name("txn_tests-FEDCBA9876543210"), "txn_tests");
        // Not a cargo hash: kept whole.
        assert_eq!(crate_name("e2e_basic"), "e2e_basic");
        assert_eq!(crate_name("e2e-basic"), "e2e-basic");
        assert_eq!(
            crate_name("e2e_basic-0123456789abcdeg"),
            "e2e_basic-0123456789abcdeg"
        );
        assert_eq!(
            crate_name("e2e_basic-0123456789abcde"),
            "e2e_basic-0123456789abcde"
        );
        assert_eq!(crate_name("-0123456789abcdef"), "-0123456789abcdef");
        assert_eq!(crate_name(""), "");
    }

    #[test]
    fn this_unit_test_executable_is_txn_tests() {
        assert_eq!(super::test_crate_name(), "txn_tests");
    }
}
