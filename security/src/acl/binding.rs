//! ACL bindings (a resource pattern and an access control entry), the filters of DescribeAcls
//! and DeleteAcls, and the checks Kafka applies to the bindings of CreateAcls.
//!
//! Kafka: [`AclBinding`](https://github.com/apache/kafka/blob/4.1/clients/src/main/java/org/apache/kafka/common/acl/AclBinding.java),
//! [`AclBindingFilter`](https://github.com/apache/kafka/blob/4.1/clients/src/main/java/org/apache/kafka/common/acl/AclBindingFilter.java),
//! [`ResourcePatternFilter`](https://github.com/apache/kafka/blob/4.1/clients/src/main/java/org/apache/kafka/common/resource/ResourcePatternFilter.java),
//! [`AccessControlEntryFilter`](https://github.com/apache/kafka/blob/4.1/clients/src/main/java/org/apache/kafka/common/acl/AccessControlEntryFilter.java);
//! validation in [`AclControlManager.validateNewAcl`](https://github.com/apache/kafka/blob/4.1/metadata/src/main/java/org/apache/kafka/controller/AclControlManager.java)
//! and the broker's [`AclApis.handleCreateAcls`](https://github.com/apache/kafka/blob/4.1/core/src/main/scala/kafka/server/AclApis.scala).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{AclOperation, AclPermissionType, PatternType, Principal, ResourceType};

/// The literal resource name that names every resource of its type.
pub const WILDCARD_RESOURCE: &str = "*";
/// The host of an ACL that applies from every host.
pub const WILDCARD_HOST: &str = "*";
/// The only name of the `Cluster` resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// Kafka's error code INVALID_REQUEST.
pub const INVALID_REQUEST: i16 = 42;
/// Kafka's error code UNKNOWN_SERVER_ERROR (what a broker answers when its authorizer throws).
pub const UNKNOWN_SERVER_ERROR: i16 = -1;

/// A refused ACL operation, with the Kafka error code the response carries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AclError {
    /// The binding or filter is not acceptable (CreateAcls, DeleteAcls): INVALID_REQUEST.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A caller passed an argument the API does not take (Kafka throws
    /// `IllegalArgumentException`, which a broker answers with UNKNOWN_SERVER_ERROR).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl AclError {
    /// The Kafka error code.
    pub const fn code(&self) -> i16 {
        match self {
            Self::InvalidRequest(_) => INVALID_REQUEST,
            Self::InvalidArgument(_) => UNKNOWN_SERVER_ERROR,
        }
    }
}

/// What an ACL applies to: a resource type and a literal name or a name prefix (Kafka's
/// `ResourcePattern`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourcePattern {
    /// The resource type.
    pub resource_type: ResourceType,
    /// The literal name (`*`: every resource of the type) or the prefix.
    pub name: String,
    /// `Literal` or `Prefixed` in a valid ACL.
    pub pattern_type: PatternType,
}

impl ResourcePattern {
    /// A pattern.
    pub fn new(
        resource_type: ResourceType,
        name: impl Into<String>,
        pattern_type: PatternType,
    ) -> Self {
        Self {
            resource_type,
            name: name.into(),
            pattern_type,
        }
    }

    /// A literal pattern.
    pub fn literal(resource_type: ResourceType, name: impl Into<String>) -> Self {
        Self::new(resource_type, name, PatternType::Literal)
    }

    /// A prefixed pattern.
    pub fn prefixed(resource_type: ResourceType, name: impl Into<String>) -> Self {
        Self::new(resource_type, name, PatternType::Prefixed)
    }

    /// The literal `*` of a type, which matches every resource of the type.
    pub fn wildcard(resource_type: ResourceType) -> Self {
        Self::literal(resource_type, WILDCARD_RESOURCE)
    }

    /// True for the literal `*`.
    pub fn is_wildcard(&self) -> bool {
        self.pattern_type == PatternType::Literal && self.name == WILDCARD_RESOURCE
    }

    /// True if this pattern applies to the resource `(resource_type, name)`: a literal equal
    /// to the name, the literal `*`, or a prefix of the name.
    pub fn matches_resource(&self, resource_type: ResourceType, name: &str) -> bool {
        self.resource_type == resource_type
            && match self.pattern_type {
                PatternType::Literal => self.name == name || self.name == WILDCARD_RESOURCE,
                PatternType::Prefixed => name.starts_with(&self.name),
                _ => false,
            }
    }

    /// The filter that matches exactly this pattern.
    pub fn to_filter(&self) -> ResourcePatternFilter {
        ResourcePatternFilter::new(
            self.resource_type,
            Some(self.name.clone()),
            self.pattern_type,
        )
    }
}

impl fmt::Display for ResourcePattern {
    /// `Topic:LITERAL:orders`, as Kafka's authorizer logs a resource.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}",
            self.resource_type,
            self.pattern_type.constant_name(),
            self.name
        )
    }
}

/// Who may or may not do what, from where (Kafka's `AccessControlEntry`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AccessControlEntry {
    /// The principal as a string (`User:alice`, `User:*`), as it travels on the wire.
    pub principal: String,
    /// The client address as Kafka prints it (see
    /// [`java_host_address`](super::java_host_address)), or `*` for every host.
    pub host: String,
    /// The operation.
    pub operation: AclOperation,
    /// Allow or deny.
    pub permission_type: AclPermissionType,
}

impl AccessControlEntry {
    /// An entry.
    pub fn new(
        principal: impl Into<String>,
        host: impl Into<String>,
        operation: AclOperation,
        permission_type: AclPermissionType,
    ) -> Self {
        Self {
            principal: principal.into(),
            host: host.into(),
            operation,
            permission_type,
        }
    }

    /// The filter that matches exactly this entry.
    pub fn to_filter(&self) -> AccessControlEntryFilter {
        AccessControlEntryFilter {
            principal: Some(self.principal.clone()),
            host: Some(self.host.clone()),
            operation: self.operation,
            permission_type: self.permission_type,
        }
    }
}

impl fmt::Display for AccessControlEntry {
    /// `User:alice has Allow permission for operations: Read from hosts: *`, the form of
    /// Kafka's ACL command.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} has {} permission for operations: {} from hosts: {}",
            self.principal, self.permission_type, self.operation, self.host
        )
    }
}

/// An ACL: a resource pattern and an entry (Kafka's `AclBinding`).
///
/// Serialized (serde) as a flat, versioned record with the enumerations as their wire codes,
/// so that stored bindings do not depend on Rust names; in JSON:
/// `{"version":1,"resource_type":2,"resource_name":"orders","pattern_type":3,
/// "principal":"User:alice","host":"*","operation":3,"permission_type":3}`.
/// Deserializing refuses other versions; a code this version does not know reads as
/// `Unknown`, as Kafka reads its metadata records.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "AclBindingRecord", try_from = "AclBindingRecord")]
pub struct AclBinding {
    /// What the ACL applies to.
    pub pattern: ResourcePattern,
    /// Who, from where, which operation, allow or deny.
    pub entry: AccessControlEntry,
}

impl AclBinding {
    /// A binding.
    pub fn new(pattern: ResourcePattern, entry: AccessControlEntry) -> Self {
        Self { pattern, entry }
    }

    /// The filter that matches exactly this binding.
    pub fn to_filter(&self) -> AclBindingFilter {
        AclBindingFilter::new(self.pattern.to_filter(), self.entry.to_filter())
    }

    /// True if a code of the binding is `Unknown` (Kafka's `isUnknown`).
    pub fn is_unknown(&self) -> bool {
        self.pattern.resource_type.is_unknown()
            || self.pattern.pattern_type.is_unknown()
            || self.entry.operation.is_unknown()
            || self.entry.permission_type.is_unknown()
    }

    /// The checks a Kafka cluster applies to each binding of CreateAcls, broker side then
    /// controller side; a failure is that binding's INVALID_REQUEST:
    /// a `Cluster` resource must be named `kafka-cluster`; the name must not be empty; the
    /// resource type must not be `Unknown` or `Any`; the pattern type must be `Literal` or
    /// `Prefixed`; the operation must not be `Unknown` or `Any`; the permission must be
    /// `Allow` or `Deny`; the principal must be `Type:name`. The host is not checked.
    pub fn validate_for_create(&self) -> Result<(), AclError> {
        let invalid = |msg: String| Err(AclError::InvalidRequest(msg));
        let p = &self.pattern;
        let e = &self.entry;
        if p.resource_type == ResourceType::Cluster && p.name != CLUSTER_NAME {
            return invalid(format!(
                "a Cluster resource must be named {CLUSTER_NAME}, not `{}`",
                p.name
            ));
        }
        if p.name.is_empty() {
            return invalid("empty resource name".into());
        }
        if matches!(p.resource_type, ResourceType::Unknown | ResourceType::Any) {
            return invalid(format!("resource type {} in an ACL", p.resource_type));
        }
        if !p.pattern_type.is_specific() {
            return invalid(format!("pattern type {} in an ACL", p.pattern_type));
        }
        if matches!(e.operation, AclOperation::Unknown | AclOperation::Any) {
            return invalid(format!("operation {} in an ACL", e.operation));
        }
        if !matches!(
            e.permission_type,
            AclPermissionType::Allow | AclPermissionType::Deny
        ) {
            return invalid(format!("permission type {} in an ACL", e.permission_type));
        }
        if let Err(err) = e.principal.parse::<Principal>() {
            return invalid(err.to_string());
        }
        Ok(())
    }
}

impl fmt::Display for AclBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on {}", self.entry, self.pattern)
    }
}

/// The stored form of an [`AclBinding`], version 1.
#[derive(Serialize, Deserialize)]
struct AclBindingRecord {
    version: u16,
    resource_type: i8,
    resource_name: String,
    pattern_type: i8,
    principal: String,
    host: String,
    operation: i8,
    permission_type: i8,
}

const RECORD_VERSION: u16 = 1;

impl From<AclBinding> for AclBindingRecord {
    fn from(b: AclBinding) -> Self {
        Self {
            version: RECORD_VERSION,
            resource_type: b.pattern.resource_type.code(),
            resource_name: b.pattern.name,
            pattern_type: b.pattern.pattern_type.code(),
            principal: b.entry.principal,
            host: b.entry.host,
            operation: b.entry.operation.code(),
            permission_type: b.entry.permission_type.code(),
        }
    }
}

impl TryFrom<AclBindingRecord> for AclBinding {
    type Error = String;

    fn try_from(r: AclBindingRecord) -> Result<Self, Self::Error> {
        if r.version != RECORD_VERSION {
            return Err(format!(
                "ACL binding record version {} (this version reads {RECORD_VERSION})",
                r.version
            ));
        }
        Ok(Self {
            pattern: ResourcePattern {
                resource_type: ResourceType::from_code(r.resource_type),
                name: r.resource_name,
                pattern_type: PatternType::from_code(r.pattern_type),
            },
            entry: AccessControlEntry {
                principal: r.principal,
                host: r.host,
                operation: AclOperation::from_code(r.operation),
                permission_type: AclPermissionType::from_code(r.permission_type),
            },
        })
    }
}

/// Selects resource patterns (Kafka's `ResourcePatternFilter`). `name: None` matches every
/// name.
///
/// With pattern type `Any` the name (if any) is compared exactly whatever the pattern's type;
/// with `Literal` or `Prefixed` only patterns of that type with that exact name match; with
/// `Match` the name is a resource name and the filter selects the patterns that apply to it:
/// the literal of that name, the literal `*`, and every prefix pattern the name starts with.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResourcePatternFilter {
    /// A type, or `Any`.
    pub resource_type: ResourceType,
    /// A name, or `None` for any name.
    pub name: Option<String>,
    /// A pattern type, `Any` or `Match`.
    pub pattern_type: PatternType,
}

impl ResourcePatternFilter {
    /// Matches every pattern.
    pub const ANY: Self = Self {
        resource_type: ResourceType::Any,
        name: None,
        pattern_type: PatternType::Any,
    };

    /// A filter.
    pub fn new(
        resource_type: ResourceType,
        name: Option<String>,
        pattern_type: PatternType,
    ) -> Self {
        Self {
            resource_type,
            name,
            pattern_type,
        }
    }

    /// True if the filter selects `pattern`.
    pub fn matches(&self, pattern: &ResourcePattern) -> bool {
        if self.resource_type != ResourceType::Any && self.resource_type != pattern.resource_type {
            return false;
        }
        if !matches!(self.pattern_type, PatternType::Any | PatternType::Match)
            && self.pattern_type != pattern.pattern_type
        {
            return false;
        }
        let Some(name) = &self.name else {
            return true;
        };
        if self.pattern_type == PatternType::Any || self.pattern_type == pattern.pattern_type {
            return *name == pattern.name;
        }
        // MATCH: the patterns that apply to the resource `name`.
        match pattern.pattern_type {
            PatternType::Literal => *name == pattern.name || pattern.name == WILDCARD_RESOURCE,
            PatternType::Prefixed => name.starts_with(&pattern.name),
            // Kafka throws here; no stored pattern has another type.
            _ => false,
        }
    }

    /// True if a code of the filter is `Unknown`.
    pub fn is_unknown(&self) -> bool {
        self.resource_type.is_unknown() || self.pattern_type.is_unknown()
    }

    /// The first field that lets the filter match more than one pattern, described; `None`
    /// if it matches at most one (Kafka's `findIndefiniteField`).
    pub fn find_indefinite_field(&self) -> Option<&'static str> {
        match (self.resource_type, &self.name, self.pattern_type) {
            (ResourceType::Any, _, _) => Some("resource type is ANY"),
            (ResourceType::Unknown, _, _) => Some("resource type is UNKNOWN"),
            (_, None, _) => Some("resource name is any"),
            (_, _, PatternType::Match) => Some("pattern type is MATCH"),
            (_, _, PatternType::Unknown) => Some("pattern type is UNKNOWN"),
            _ => None,
        }
    }
}

/// Selects access control entries (Kafka's `AccessControlEntryFilter`); `None` and `Any`
/// match everything. Principal and host compare as exact strings (`User:*` selects the
/// wildcard entries only).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AccessControlEntryFilter {
    /// A principal string, or `None`.
    pub principal: Option<String>,
    /// A host, or `None`.
    pub host: Option<String>,
    /// An operation, or `Any`.
    pub operation: AclOperation,
    /// A permission type, or `Any`.
    pub permission_type: AclPermissionType,
}

impl AccessControlEntryFilter {
    /// Matches every entry.
    pub const ANY: Self = Self {
        principal: None,
        host: None,
        operation: AclOperation::Any,
        permission_type: AclPermissionType::Any,
    };

    /// True if the filter selects `entry`.
    pub fn matches(&self, entry: &AccessControlEntry) -> bool {
        self.principal
            .as_ref()
            .is_none_or(|p| *p == entry.principal)
            && self.host.as_ref().is_none_or(|h| *h == entry.host)
            && (self.operation == AclOperation::Any || self.operation == entry.operation)
            && (self.permission_type == AclPermissionType::Any
                || self.permission_type == entry.permission_type)
    }

    /// True if a code of the filter is `Unknown`.
    pub fn is_unknown(&self) -> bool {
        self.operation.is_unknown() || self.permission_type.is_unknown()
    }

    /// The first field that lets the filter match more than one entry, described; `None` if
    /// it matches at most one.
    pub fn find_indefinite_field(&self) -> Option<&'static str> {
        if self.principal.is_none() {
            Some("principal is any")
        } else if self.host.is_none() {
            Some("host is any")
        } else {
            match (self.operation, self.permission_type) {
                (AclOperation::Any, _) => Some("operation is ANY"),
                (AclOperation::Unknown, _) => Some("operation is UNKNOWN"),
                (_, AclPermissionType::Any) => Some("permission type is ANY"),
                (_, AclPermissionType::Unknown) => Some("permission type is UNKNOWN"),
                _ => None,
            }
        }
    }
}

/// Selects ACL bindings, in DescribeAcls and DeleteAcls (Kafka's `AclBindingFilter`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AclBindingFilter {
    /// Selects the pattern.
    pub pattern_filter: ResourcePatternFilter,
    /// Selects the entry.
    pub entry_filter: AccessControlEntryFilter,
}

impl AclBindingFilter {
    /// Matches every binding.
    pub const ANY: Self = Self {
        pattern_filter: ResourcePatternFilter::ANY,
        entry_filter: AccessControlEntryFilter::ANY,
    };

    /// A filter.
    pub fn new(
        pattern_filter: ResourcePatternFilter,
        entry_filter: AccessControlEntryFilter,
    ) -> Self {
        Self {
            pattern_filter,
            entry_filter,
        }
    }

    /// True if the filter selects `binding`.
    pub fn matches(&self, binding: &AclBinding) -> bool {
        self.pattern_filter.matches(&binding.pattern) && self.entry_filter.matches(&binding.entry)
    }

    /// True if a code of the filter is `Unknown`.
    pub fn is_unknown(&self) -> bool {
        self.pattern_filter.is_unknown() || self.entry_filter.is_unknown()
    }

    /// True if the filter can match at most one binding.
    pub fn matches_at_most_one(&self) -> bool {
        self.find_indefinite_field().is_none()
    }

    /// The first field that lets the filter match more than one binding, described.
    pub fn find_indefinite_field(&self) -> Option<&'static str> {
        self.pattern_filter
            .find_indefinite_field()
            .or_else(|| self.entry_filter.find_indefinite_field())
    }

    /// Kafka's check of a DeleteAcls filter: no `Unknown` code (INVALID_REQUEST otherwise).
    pub fn validate(&self) -> Result<(), AclError> {
        if self.pattern_filter.is_unknown() {
            Err(AclError::InvalidRequest(
                "unknown resource type or pattern type in the filter".into(),
            ))
        } else if self.entry_filter.is_unknown() {
            Err(AclError::InvalidRequest(
                "unknown operation or permission type in the filter".into(),
            ))
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AclOperation::{All, IdempotentWrite, Read, TwoPhaseCommit, Write};
    use AclPermissionType::{Allow, Deny};
    use PatternType::{Literal, Match, Prefixed};
    use ResourceType::{Cluster, DelegationToken, Group, Topic, TransactionalId, User};

    fn pattern_filter(
        rt: ResourceType,
        name: Option<&str>,
        pt: PatternType,
    ) -> ResourcePatternFilter {
        ResourcePatternFilter::new(rt, name.map(String::from), pt)
    }

    fn binding(rt: ResourceType, name: &str, pt: PatternType) -> AclBinding {
        AclBinding::new(
            ResourcePattern::new(rt, name, pt),
            AccessControlEntry::new("User:alice", "*", Read, Allow),
        )
    }

    #[test]
    fn match_filter_selects_literal_wildcard_and_prefixes_of_the_name() {
        let f = pattern_filter(Topic, Some("payments.received"), Match);
        assert!(f.matches(&ResourcePattern::literal(Topic, "payments.received")));
        assert!(f.matches(&ResourcePattern::wildcard(Topic)));
        assert!(f.matches(&ResourcePattern::prefixed(Topic, "payments.")));
        assert!(f.matches(&ResourcePattern::prefixed(Topic, "payments.received")));
        assert!(f.matches(&ResourcePattern::prefixed(Topic, "p")));
        assert!(!f.matches(&ResourcePattern::prefixed(Topic, "payments.received.x")));
        assert!(!f.matches(&ResourcePattern::prefixed(Topic, "payments-")));
        assert!(!f.matches(&ResourcePattern::literal(Topic, "payments.")));
        assert!(!f.matches(&ResourcePattern::literal(Group, "payments.received")));
        assert!(!f.matches(&ResourcePattern::wildcard(Group)));
        // No name: every pattern of the type.
        let f = pattern_filter(Topic, None, Match);
        assert!(f.matches(&ResourcePattern::prefixed(Topic, "x")));
        assert!(f.matches(&ResourcePattern::literal(Topic, "y")));
        assert!(!f.matches(&ResourcePattern::literal(Group, "y")));
        // MATCH for `*` itself: only the wildcard literal (and prefixes of "*").
        let f = pattern_filter(Topic, Some("*"), Match);
        assert!(f.matches(&ResourcePattern::wildcard(Topic)));
        assert!(!f.matches(&ResourcePattern::literal(Topic, "foo")));
    }

    #[test]
    fn any_filter_compares_names_exactly_across_pattern_types() {
        let f = pattern_filter(ResourceType::Any, Some("foo"), PatternType::Any);
        assert!(f.matches(&ResourcePattern::literal(Topic, "foo")));
        assert!(f.matches(&ResourcePattern::prefixed(Group, "foo")));
        assert!(!f.matches(&ResourcePattern::prefixed(Topic, "fo")));
        assert!(!f.matches(&ResourcePattern::wildcard(Topic)));
        assert!(ResourcePatternFilter::ANY.matches(&ResourcePattern::prefixed(User, "x")));
        let f = pattern_filter(Topic, None, PatternType::Any);
        assert!(f.matches(&ResourcePattern::prefixed(Topic, "x")));
        assert!(!f.matches(&ResourcePattern::prefixed(Group, "x")));
    }

    #[test]
    fn literal_and_prefixed_filters_select_their_own_type_only() {
        let f = pattern_filter(Topic, Some("foo"), Literal);
        assert!(f.matches(&ResourcePattern::literal(Topic, "foo")));
        assert!(!f.matches(&ResourcePattern::prefixed(Topic, "foo")));
        assert!(!f.matches(&ResourcePattern::wildcard(Topic)));
        let f = pattern_filter(Topic, Some("*"), Literal);
        assert!(f.matches(&ResourcePattern::wildcard(Topic)));
        assert!(!f.matches(&ResourcePattern::literal(Topic, "foo")));
        let f = pattern_filter(Topic, Some("foo"), Prefixed);
        assert!(f.matches(&ResourcePattern::prefixed(Topic, "foo")));
        assert!(!f.matches(&ResourcePattern::prefixed(Topic, "fo")));
        assert!(!f.matches(&ResourcePattern::literal(Topic, "foo")));
        let f = pattern_filter(ResourceType::Any, None, Prefixed);
        assert!(f.matches(&ResourcePattern::prefixed(Group, "g")));
        assert!(!f.matches(&ResourcePattern::literal(Group, "g")));
    }

    #[test]
    fn entry_filter_fields_are_exact_or_any() {
        let e = AccessControlEntry::new("User:alice", "10.0.0.1", Write, Deny);
        assert!(AccessControlEntryFilter::ANY.matches(&e));
        assert!(e.to_filter().matches(&e));
        let mut f = AccessControlEntryFilter::ANY;
        f.principal = Some("User:*".into());
        assert!(
            !f.matches(&e),
            "the wildcard principal is a plain string to a filter"
        );
        f.principal = Some("User:alice".into());
        f.host = Some("*".into());
        assert!(
            !f.matches(&e),
            "the wildcard host is a plain string to a filter"
        );
        f.host = Some("10.0.0.1".into());
        assert!(f.matches(&e));
        f.operation = All;
        assert!(
            !f.matches(&e),
            "ALL in a filter is the operation ALL, not any operation"
        );
        f.operation = Write;
        f.permission_type = Allow;
        assert!(!f.matches(&e));
        f.permission_type = Deny;
        assert!(f.matches(&e));
    }

    #[test]
    fn binding_filter_and_indefinite_fields() {
        let b = binding(Topic, "foo", Literal);
        assert!(b.to_filter().matches(&b));
        assert!(b.to_filter().matches_at_most_one());
        assert!(AclBindingFilter::ANY.matches(&b));
        assert_eq!(
            AclBindingFilter::ANY.find_indefinite_field(),
            Some("resource type is ANY")
        );
        let mut f = b.to_filter();
        f.pattern_filter.pattern_type = Match;
        assert_eq!(f.find_indefinite_field(), Some("pattern type is MATCH"));
        let mut f = b.to_filter();
        f.entry_filter.host = None;
        assert_eq!(f.find_indefinite_field(), Some("host is any"));
        let mut f = b.to_filter();
        f.entry_filter.permission_type = AclPermissionType::Any;
        assert!(!f.matches_at_most_one());
        let mut other = b.clone();
        other.entry.host = "10.0.0.1".into();
        assert!(!b.to_filter().matches(&other));
    }

    #[test]
    fn delete_filters_with_unknown_codes_are_invalid_requests() {
        assert_eq!(AclBindingFilter::ANY.validate(), Ok(()));
        let mut f = AclBindingFilter::ANY;
        f.pattern_filter.resource_type = ResourceType::Unknown;
        assert_eq!(f.validate().unwrap_err().code(), 42);
        let mut f = AclBindingFilter::ANY;
        f.pattern_filter.pattern_type = PatternType::Unknown;
        assert_eq!(f.validate().unwrap_err().code(), 42);
        let mut f = AclBindingFilter::ANY;
        f.entry_filter.operation = AclOperation::Unknown;
        assert_eq!(f.validate().unwrap_err().code(), 42);
        let mut f = AclBindingFilter::ANY;
        f.entry_filter.permission_type = AclPermissionType::Unknown;
        assert!(matches!(f.validate(), Err(AclError::InvalidRequest(_))));
    }

    #[test]
    fn create_validation_matches_kafka() {
        let ok = [
            binding(Topic, "foo", Literal),
            binding(Topic, "*", Literal),
            binding(Group, "g-", Prefixed),
            binding(Cluster, "kafka-cluster", Literal),
            binding(TransactionalId, "tx", Prefixed),
            binding(DelegationToken, "t", Literal),
            binding(User, "User:bob", Literal),
        ];
        for b in &ok {
            assert_eq!(b.validate_for_create(), Ok(()), "{b}");
        }
        let mut b = binding(Topic, "foo", Literal);
        b.entry.host = "not an address".into();
        assert_eq!(b.validate_for_create(), Ok(()), "hosts are not checked");
        b.entry.operation = TwoPhaseCommit;
        assert_eq!(b.validate_for_create(), Ok(()));

        let bad = |b: AclBinding| {
            let err = b.validate_for_create().unwrap_err();
            assert_eq!(err.code(), INVALID_REQUEST, "{b}: {err}");
            err.to_string()
        };
        assert!(bad(binding(Cluster, "my-cluster", Literal)).contains("kafka-cluster"));
        bad(binding(Cluster, "kafka-", Prefixed));
        assert!(bad(binding(Topic, "", Literal)).contains("empty"));
        bad(binding(Topic, "", Prefixed));
        bad(binding(ResourceType::Any, "foo", Literal));
        bad(binding(ResourceType::Unknown, "foo", Literal));
        bad(binding(Topic, "foo", Match));
        bad(binding(Topic, "foo", PatternType::Any));
        bad(binding(Topic, "foo", PatternType::Unknown));
        for op in [AclOperation::Any, AclOperation::Unknown] {
            let mut b = binding(Topic, "foo", Literal);
            b.entry.operation = op;
            bad(b);
        }
        for perm in [AclPermissionType::Any, AclPermissionType::Unknown] {
            let mut b = binding(Topic, "foo", Literal);
            b.entry.permission_type = perm;
            bad(b);
        }
        let mut b = binding(Topic, "foo", Literal);
        b.entry.principal = "alice".into();
        assert!(bad(b).contains("alice"));
    }

    #[test]
    fn serde_record_is_versioned_with_integer_codes() {
        let b = AclBinding::new(
            ResourcePattern::prefixed(TransactionalId, "tx-"),
            AccessControlEntry::new("User:alice", "10.0.0.1", IdempotentWrite, Deny),
        );
        let json = serde_json::to_string(&b).unwrap();
        assert_eq!(
            json,
            r#"{"version":1,"resource_type":5,"resource_name":"tx-","pattern_type":4,"principal":"User:alice","host":"10.0.0.1","operation":12,"permission_type":2}"#
        );
        assert_eq!(serde_json::from_str::<AclBinding>(&json).unwrap(), b);
        let v2 = json.replace(r#""version":1"#, r#""version":2"#);
        let err = serde_json::from_str::<AclBinding>(&v2)
            .unwrap_err()
            .to_string();
        assert!(err.contains("version 2"), "{err}");
        let future_op = json.replace(r#""operation":12"#, r#""operation":99"#);
        assert_eq!(
            serde_json::from_str::<AclBinding>(&future_op)
                .unwrap()
                .entry
                .operation,
            AclOperation::Unknown
        );
    }

    #[test]
    fn display_forms() {
        let b = AclBinding::new(
            ResourcePattern::literal(TransactionalId, "tx"),
            AccessControlEntry::new("User:alice", "*", Write, Allow),
        );
        assert_eq!(b.pattern.to_string(), "TransactionalId:LITERAL:tx");
        assert_eq!(
            b.entry.to_string(),
            "User:alice has Allow permission for operations: Write from hosts: *"
        );
        assert_eq!(
            b.to_string(),
            "User:alice has Allow permission for operations: Write from hosts: * on TransactionalId:LITERAL:tx"
        );
    }

    #[test]
    fn pattern_matches_resource() {
        assert!(ResourcePattern::prefixed(Topic, "ab").matches_resource(Topic, "abc"));
        assert!(ResourcePattern::prefixed(Topic, "ab").matches_resource(Topic, "ab"));
        assert!(!ResourcePattern::prefixed(Topic, "ab").matches_resource(Topic, "a"));
        assert!(!ResourcePattern::prefixed(Topic, "ab").matches_resource(Group, "abc"));
        assert!(ResourcePattern::wildcard(Topic).matches_resource(Topic, "x"));
        assert!(!ResourcePattern::literal(Topic, "ab").matches_resource(Topic, "abc"));
    }
}
