//! The four enumerations of Kafka's ACL model, with their wire codes (INT8 fields of
//! CreateAcls, DescribeAcls and DeleteAcls) and their names.
//!
//! Kafka: [`ResourceType`](https://github.com/apache/kafka/blob/4.1/clients/src/main/java/org/apache/kafka/common/resource/ResourceType.java),
//! [`PatternType`](https://github.com/apache/kafka/blob/4.1/clients/src/main/java/org/apache/kafka/common/resource/PatternType.java),
//! [`AclOperation`](https://github.com/apache/kafka/blob/4.1/clients/src/main/java/org/apache/kafka/common/acl/AclOperation.java),
//! [`AclPermissionType`](https://github.com/apache/kafka/blob/4.1/clients/src/main/java/org/apache/kafka/common/acl/AclPermissionType.java),
//! names as in [`SecurityUtils`](https://github.com/apache/kafka/blob/4.1/clients/src/main/java/org/apache/kafka/common/utils/SecurityUtils.java).

use std::fmt;
use std::str::FromStr;

/// A name that none of an enumeration's values has (see the `FromStr` impls).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{name}` is not a {kind} name")]
pub struct UnknownNameError {
    /// Which enumeration was parsed (`resource type`, `operation`, ...).
    pub kind: &'static str,
    /// The text that matched no value.
    pub name: String,
}

/// Compares a name with a value's Pascal-case name ignoring ASCII case and underscores, so
/// that `TransactionalId`, `TRANSACTIONAL_ID`, `transactionalid` and `transactional_id` all
/// name the same value.
fn name_matches(input: &str, pascal: &str) -> bool {
    let mut chars = input.chars().filter(|&c| c != '_');
    let mut expected = pascal.chars();
    loop {
        match (chars.next(), expected.next()) {
            (None, None) => return true,
            (Some(a), Some(b)) if a.eq_ignore_ascii_case(&b) => {}
            _ => return false,
        }
    }
}

/// Defines one of Kafka's code-carrying enumerations: the enum, its codes, names, `Display`
/// and `FromStr`.
macro_rules! kafka_enum {
    (
        $(#[$meta:meta])*
        $name:ident, $kind:literal {
            $( $(#[$vmeta:meta])* $variant:ident = $code:literal, $pascal:literal, $constant:literal; )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(i8)]
        pub enum $name {
            $( $(#[$vmeta])* $variant = $code, )+
        }

        impl $name {
            /// Every value, in code order.
            pub const VALUES: &'static [Self] = &[$(Self::$variant,)+];

            /// The wire code.
            pub const fn code(self) -> i8 {
                self as i8
            }

            /// The value with this wire code; `Unknown` for a code this version does not know
            /// (as Kafka's `fromCode`).
            pub const fn from_code(code: i8) -> Self {
                match code {
                    $( $code => Self::$variant, )+
                    _ => Self::Unknown,
                }
            }

            /// Kafka's display name (`SecurityUtils`' Pascal case, as `kafka-acls.sh` takes it).
            pub const fn name(self) -> &'static str {
                match self {
                    $( Self::$variant => $pascal, )+
                }
            }

            /// The name of the Java enum constant (what Kafka's `toString` of a pattern or an
            /// entry shows).
            pub const fn constant_name(self) -> &'static str {
                match self {
                    $( Self::$variant => $constant, )+
                }
            }

            /// True for `Unknown`.
            pub const fn is_unknown(self) -> bool {
                matches!(self, Self::Unknown)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        /// Parses a name ignoring ASCII case and underscores (`Read`, `READ`,
        /// `IdempotentWrite`, `IDEMPOTENT_WRITE`). Kafka maps a name it does not know to
        /// `UNKNOWN`; this returns an error instead (`unwrap_or(Unknown)` restores Kafka's
        /// behaviour).
        impl FromStr for $name {
            type Err = UnknownNameError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::VALUES
                    .iter()
                    .copied()
                    .find(|v| name_matches(s, v.name()))
                    .ok_or_else(|| UnknownNameError { kind: $kind, name: s.to_owned() })
            }
        }
    };
}

kafka_enum! {
    /// What an ACL is about (Kafka's `ResourceType`).
    ResourceType, "resource type" {
        /// A type this version does not know.
        Unknown = 0, "Unknown", "UNKNOWN";
        /// In a filter: any type.
        Any = 1, "Any", "ANY";
        /// A topic.
        Topic = 2, "Topic", "TOPIC";
        /// A consumer group.
        Group = 3, "Group", "GROUP";
        /// The cluster (one resource, named `kafka-cluster`).
        Cluster = 4, "Cluster", "CLUSTER";
        /// A transactional id.
        TransactionalId = 5, "TransactionalId", "TRANSACTIONAL_ID";
        /// A delegation token.
        DelegationToken = 6, "DelegationToken", "DELEGATION_TOKEN";
        /// A user principal (KIP-373 token impersonation).
        User = 7, "User", "USER";
    }
}

kafka_enum! {
    /// How an ACL's resource name is read (Kafka's `PatternType`).
    PatternType, "pattern type" {
        /// A pattern type this version does not know.
        Unknown = 0, "Unknown", "UNKNOWN";
        /// In a filter: any pattern type, the name compared exactly.
        Any = 1, "Any", "ANY";
        /// In a filter: the patterns that match a resource name (the same literal, the
        /// wildcard literal `*`, and prefixes of the name).
        Match = 2, "Match", "MATCH";
        /// The name is the whole resource name; `*` names every resource of the type.
        Literal = 3, "Literal", "LITERAL";
        /// The name is a prefix of resource names.
        Prefixed = 4, "Prefixed", "PREFIXED";
    }
}

impl PatternType {
    /// True for the two pattern types an ACL can have (`Literal`, `Prefixed`), false for the
    /// filter-only ones and `Unknown` (Kafka's `isSpecific`).
    pub const fn is_specific(self) -> bool {
        matches!(self, Self::Literal | Self::Prefixed)
    }
}

kafka_enum! {
    /// What an ACL allows or denies (Kafka's `AclOperation`).
    AclOperation, "operation" {
        /// An operation this version does not know.
        Unknown = 0, "Unknown", "UNKNOWN";
        /// In a filter: any operation.
        Any = 1, "Any", "ANY";
        /// Every operation.
        All = 2, "All", "ALL";
        /// Read.
        Read = 3, "Read", "READ";
        /// Write.
        Write = 4, "Write", "WRITE";
        /// Create.
        Create = 5, "Create", "CREATE";
        /// Delete.
        Delete = 6, "Delete", "DELETE";
        /// Alter.
        Alter = 7, "Alter", "ALTER";
        /// Describe (allowed also by an ALLOW of Read, Write, Delete or Alter).
        Describe = 8, "Describe", "DESCRIBE";
        /// Inter-broker actions on the cluster.
        ClusterAction = 9, "ClusterAction", "CLUSTER_ACTION";
        /// Describe configs (allowed also by an ALLOW of AlterConfigs).
        DescribeConfigs = 10, "DescribeConfigs", "DESCRIBE_CONFIGS";
        /// Alter configs.
        AlterConfigs = 11, "AlterConfigs", "ALTER_CONFIGS";
        /// Idempotent produce (on the cluster).
        IdempotentWrite = 12, "IdempotentWrite", "IDEMPOTENT_WRITE";
        /// Create delegation tokens.
        CreateTokens = 13, "CreateTokens", "CREATE_TOKENS";
        /// Describe delegation tokens.
        DescribeTokens = 14, "DescribeTokens", "DESCRIBE_TOKENS";
        /// Two-phase commit with a transactional id (Kafka 4.x,
        /// [KIP-939](https://cwiki.apache.org/confluence/display/KAFKA/KIP-939%3A+Support+Participation+in+2PC)).
        TwoPhaseCommit = 15, "TwoPhaseCommit", "TWO_PHASE_COMMIT";
    }
}

kafka_enum! {
    /// Whether an ACL allows or denies (Kafka's `AclPermissionType`).
    AclPermissionType, "permission type" {
        /// A permission type this version does not know.
        Unknown = 0, "Unknown", "UNKNOWN";
        /// In a filter: either.
        Any = 1, "Any", "ANY";
        /// Denies; a matching DENY wins over every ALLOW.
        Deny = 2, "Deny", "DENY";
        /// Allows.
        Allow = 3, "Allow", "ALLOW";
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_codes_are_kafkas() {
        let rt: Vec<(i8, &str)> = ResourceType::VALUES
            .iter()
            .map(|v| (v.code(), v.name()))
            .collect();
        assert_eq!(
            rt,
            [
                (0, "Unknown"),
                (1, "Any"),
                (2, "Topic"),
                (3, "Group"),
                (4, "Cluster"),
                (5, "TransactionalId"),
                (6, "DelegationToken"),
                (7, "User")
            ]
        );
        let pt: Vec<(i8, &str)> = PatternType::VALUES
            .iter()
            .map(|v| (v.code(), v.name()))
            .collect();
        assert_eq!(
            pt,
            [
                (0, "Unknown"),
                (1, "Any"),
                (2, "Match"),
                (3, "Literal"),
                (4, "Prefixed")
            ]
        );
        let ops: Vec<(i8, &str)> = AclOperation::VALUES
            .iter()
            .map(|v| (v.code(), v.name()))
            .collect();
        assert_eq!(
            ops,
            [
                (0, "Unknown"),
                (1, "Any"),
                (2, "All"),
                (3, "Read"),
                (4, "Write"),
                (5, "Create"),
                (6, "Delete"),
                (7, "Alter"),
                (8, "Describe"),
                (9, "ClusterAction"),
                (10, "DescribeConfigs"),
                (11, "AlterConfigs"),
                (12, "IdempotentWrite"),
                (13, "CreateTokens"),
                (14, "DescribeTokens"),
                (15, "TwoPhaseCommit")
            ]
        );
        let perm: Vec<(i8, &str)> = AclPermissionType::VALUES
            .iter()
            .map(|v| (v.code(), v.name()))
            .collect();
        assert_eq!(
            perm,
            [(0, "Unknown"), (1, "Any"), (2, "Deny"), (3, "Allow")]
        );
    }

    #[test]
    fn codes_round_trip_and_unknown_codes_map_to_unknown() {
        for code in i8::MIN..=i8::MAX {
            let op = AclOperation::from_code(code);
            if (0..=15).contains(&code) {
                assert_eq!(op.code(), code);
            } else {
                assert_eq!(op, AclOperation::Unknown);
            }
        }
        assert_eq!(ResourceType::from_code(8), ResourceType::Unknown);
        assert_eq!(ResourceType::from_code(-1), ResourceType::Unknown);
        assert_eq!(PatternType::from_code(5), PatternType::Unknown);
        assert_eq!(AclPermissionType::from_code(4), AclPermissionType::Unknown);
        assert_eq!(AclPermissionType::from_code(3), AclPermissionType::Allow);
    }

    #[test]
    fn names_print_in_pascal_case_and_parse_in_any_case() {
        assert_eq!(ResourceType::TransactionalId.to_string(), "TransactionalId");
        assert_eq!(
            ResourceType::TransactionalId.constant_name(),
            "TRANSACTIONAL_ID"
        );
        assert_eq!(AclOperation::IdempotentWrite.to_string(), "IdempotentWrite");
        assert_eq!(AclPermissionType::Allow.to_string(), "Allow");
        assert_eq!(PatternType::Literal.to_string(), "Literal");
        for s in [
            "TransactionalId",
            "TRANSACTIONAL_ID",
            "transactionalid",
            "transactional_id",
        ] {
            assert_eq!(s.parse(), Ok(ResourceType::TransactionalId), "{s}");
        }
        for s in ["IdempotentWrite", "IDEMPOTENT_WRITE", "idempotentwrite"] {
            assert_eq!(s.parse(), Ok(AclOperation::IdempotentWrite), "{s}");
        }
        assert_eq!("prefixed".parse(), Ok(PatternType::Prefixed));
        assert_eq!("DENY".parse(), Ok(AclPermissionType::Deny));
        assert_eq!("TwoPhaseCommit".parse(), Ok(AclOperation::TwoPhaseCommit));
        for v in AclOperation::VALUES {
            assert_eq!(v.name().parse(), Ok(*v));
            assert_eq!(v.constant_name().parse(), Ok(*v));
        }
        let err = "Reed".parse::<AclOperation>().unwrap_err();
        assert_eq!(
            err,
            UnknownNameError {
                kind: "operation",
                name: "Reed".into()
            }
        );
        assert!("Topics".parse::<ResourceType>().is_err());
        assert!("Topi".parse::<ResourceType>().is_err());
        assert!("".parse::<ResourceType>().is_err());
    }

    #[test]
    fn specific_pattern_types() {
        let specific: Vec<_> = PatternType::VALUES
            .iter()
            .filter(|p| p.is_specific())
            .collect();
        assert_eq!(specific, [&PatternType::Literal, &PatternType::Prefixed]);
    }
}
