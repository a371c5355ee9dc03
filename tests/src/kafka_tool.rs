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

/// One of Kafka's command-line tools: its main class and its script's name (for messages).
#[derive(Debug, Clone, Copy)]
pub struct Tool {
    /// The class `java` runs.
    pub main_class: &'static str,
    /// The script that wraps it in a Kafka distribution, e.g. `kafka-acls.sh`.
    pub name: &'static str,
}

/// `kafka-acls.sh`.
pub const ACLS: Tool = Tool {
    main_class: "org.apache.kafka.tools.AclCommand",
    name: "kafka-acls.sh",
};

/// `kafka-configs.sh` (in the kafka-tools jar since Kafka 4.4; `kafka.admin.ConfigCommand` in
/// the core jar before).
pub const CONFIGS: Tool = Tool {
    main_class: "org.apache.kafka.tools.ConfigCommand",
    name: "kafka-configs.sh",
};

impl Tool {
    /// Runs the tool with Kafka's jars on `classpath` against `bootstrap` with `args`; asserts
    /// that it succeeded and returns its stdout followed by its stderr.
    pub fn run(self, classpath: &str, bootstrap: &str, args: &[&str]) -> String {
        let out = java(classpath)
            .arg(self.main_class)
            .args(["--bootstrap-server", bootstrap])
            .args(args)
            .output()
            .expect("java");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{} {args:?}:\n{text}", self.name);
        text
    }
}
