//! Apache Kafka's Java tools and clients (jars on a classpath, `TXN_TEST_KAFKA_CLASSPATH` in
//! the tests) as the tests start them.

use std::process::Command;

/// `java` with `classpath`, set up for a short-lived tool or client: C1 only and the serial
/// collector, for a fast start.
pub fn java(classpath: &str) -> Command {
    let mut cmd = Command::new("java");
    cmd.args([
        "-XX:TieredStopAtLevel=1",
        "-XX:+UseSerialGC",
        "-cp",
        classpath,
    ]);
    cmd
}

/// Runs the tool `main_class` (`name` in failure messages) against `bootstrap` with `args`;
/// asserts that it succeeded and returns its stdout followed by its stderr.
pub fn run(
    classpath: &str,
    main_class: &str,
    name: &str,
    bootstrap: &str,
    args: &[&str],
) -> String {
    let out = java(classpath)
        .arg(main_class)
        .args(["--bootstrap-server", bootstrap])
        .args(args)
        .output()
        .expect("java");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{name} {args:?}:\n{text}");
    text
}
