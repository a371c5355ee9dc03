//! The authorizer interface a broker calls, as Kafka's
//! [`Authorizer`](https://github.com/apache/kafka/blob/4.1/clients/src/main/java/org/apache/kafka/server/authorizer/Authorizer.java).

use std::collections::HashSet;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::ops::ControlFlow;

use super::trie::PrefixTrie;
use super::{
    AccessControlEntryFilter, AclBinding, AclBindingFilter, AclError, AclOperation,
    AclPermissionType, PatternType, Principal, ResourcePatternFilter, ResourceType, WILDCARD_HOST,
    WILDCARD_RESOURCE,
};

/// Who is asking, from where.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RequestContext {
    /// The authenticated principal.
    pub principal: Principal,
    /// The client's address as Kafka prints it, compared as a string with ACL hosts (see
    /// [`java_host_address`]; [`RequestContext::from_ip`] formats it).
    pub client_host: String,
}

impl RequestContext {
    /// A context with the client's host already formatted.
    pub fn new(principal: Principal, client_host: impl Into<String>) -> Self {
        Self {
            principal,
            client_host: client_host.into(),
        }
    }

    /// A context for a client at `ip`, formatted as Kafka formats client addresses.
    pub fn from_ip(principal: Principal, ip: IpAddr) -> Self {
        Self::new(principal, java_host_address(ip))
    }
}

/// The text Kafka compares with ACL hosts for a client at `ip`: Java's
/// `InetAddress.getHostAddress()`. IPv4 is dotted decimal; an IPv4-mapped IPv6 address
/// (`::ffff:a.b.c.d`, what a dual-stack listener sees) is the IPv4 address, since Java makes
/// it an `Inet4Address`; other IPv6 addresses are eight lower-case hex groups without
/// leading zeros and *without* `::` compression (`0:0:0:0:0:0:0:1`, not `::1`), so an ACL
/// written with `::1` never matches in Kafka and does not here either.
pub fn java_host_address(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let mut out = String::with_capacity(39);
                for (i, group) in v6.segments().iter().enumerate() {
                    if i > 0 {
                        out.push(':');
                    }
                    let _ = write!(out, "{group:x}");
                }
                out
            }
        },
    }
}

/// An operation on one resource, to authorize (Kafka's `Action` with a literal pattern;
/// Kafka's logging flags and reference count are not needed here).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Action {
    /// The operation.
    pub operation: AclOperation,
    /// The resource's type.
    pub resource_type: ResourceType,
    /// The resource's name (`kafka-cluster` for the cluster).
    pub resource_name: String,
}

impl Action {
    /// An action.
    pub fn new(
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: impl Into<String>,
    ) -> Self {
        Self {
            operation,
            resource_type,
            resource_name: resource_name.into(),
        }
    }
}

/// The answer for one action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuthorizationResult {
    /// The action is allowed.
    Allowed,
    /// The action is denied.
    Denied,
}

impl AuthorizationResult {
    /// True for `Allowed`.
    pub const fn is_allowed(self) -> bool {
        matches!(self, Self::Allowed)
    }
}

/// The result of creating one binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CreateOutcome {
    /// The binding was added.
    Created,
    /// The same binding was already there; nothing changed (Kafka answers success).
    AlreadyExists,
}

/// Decides what principals may do and holds the ACLs (Kafka's `Authorizer`); a broker may
/// plug in its own. Thread-safety is the caller's: mutations take `&mut self`, so a daemon
/// holds the authorizer behind a lock or swaps an `Arc` of an updated clone.
pub trait Authorizer: Send + Sync {
    /// One result per action, in order.
    fn authorize(&self, ctx: &RequestContext, actions: &[Action]) -> Vec<AuthorizationResult>;

    /// Whether the principal may do `operation` on at least one resource of `resource_type`
    /// (InitProducerId without a transactional id asks for WRITE on any topic). The default
    /// is Kafka's default method, [`default_authorize_by_resource_type`]; `operation` and
    /// `resource_type` must not be `Any` or `Unknown` ([`AclError::InvalidArgument`]).
    fn authorize_by_resource_type(
        &self,
        ctx: &RequestContext,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> Result<AuthorizationResult, AclError> {
        default_authorize_by_resource_type(self, ctx, operation, resource_type)
    }

    /// The bindings the filter selects (DescribeAcls).
    fn describe(&self, filter: &AclBindingFilter) -> Vec<AclBinding>;

    /// Adds bindings (CreateAcls): one result per binding, in order. An invalid binding fails
    /// alone; one already present is not duplicated.
    fn create(&mut self, bindings: &[AclBinding]) -> Vec<Result<CreateOutcome, AclError>>;

    /// Removes the bindings the filters select (DeleteAcls): for each filter, in order, the
    /// bindings it selected, or why the filter is invalid.
    fn delete(&mut self, filters: &[AclBindingFilter]) -> Vec<Result<Vec<AclBinding>, AclError>>;
}

/// Kafka's check of `authorize_by_resource_type`'s arguments.
pub(crate) fn check_resource_type_args(
    operation: AclOperation,
    resource_type: ResourceType,
) -> Result<(), AclError> {
    let invalid = |what: &str| {
        Err(AclError::InvalidArgument(format!(
            "authorize_by_resource_type with {what}"
        )))
    };
    match (resource_type, operation) {
        (ResourceType::Any, _) => invalid("resource type ANY"),
        (ResourceType::Unknown, _) => invalid("resource type UNKNOWN"),
        (_, AclOperation::Any) => invalid("operation ANY"),
        (_, AclOperation::Unknown) => invalid("operation UNKNOWN"),
        _ => Ok(()),
    }
}

/// The resource name Kafka's default `authorizeByResourceType` authorizes first, so that
/// super users (and whatever else allows that name) pass whatever the DENY ACLs.
pub(crate) const PROBE_RESOURCE_NAME: &str = "hardcode";

/// Kafka's default `Authorizer.authorizeByResourceType`, on any authorizer's `authorize` and
/// `describe`:
///
/// 1. If `authorize` allows `operation` on the literal resource named `hardcode`, allowed.
///    (This is how super users pass; it also lets `allow.everyone.if.no.acl.found` answer
///    allowed when no ACL applies to a resource named `hardcode`, and lets an ALLOW that
///    implies the operation, e.g. READ for DESCRIBE, count when its pattern covers
///    `hardcode`.)
/// 2. Otherwise only the bindings of the type whose principal is the caller's or `User:*`,
///    whose host is the client's or `*` and whose operation is `operation` or ALL count
///    (no implied operations here): a DENY on the literal `*` denies; an ALLOW on the literal
///    `*` allows; else allowed if some ALLOW literal is neither DENY-ed as the same literal
///    nor covered by a DENY prefix, or some ALLOW prefix is not covered by a DENY prefix
///    (a DENY prefix covers a name when it is a non-empty prefix of it, the name included).
///    Otherwise denied.
///
/// Cost: one `authorize` plus one `describe` of the type, so O(ACLs of the type) here;
/// [`StandardAuthorizer`](super::StandardAuthorizer) overrides it with an index by principal.
pub fn default_authorize_by_resource_type<A: Authorizer + ?Sized>(
    authorizer: &A,
    ctx: &RequestContext,
    operation: AclOperation,
    resource_type: ResourceType,
) -> Result<AuthorizationResult, AclError> {
    check_resource_type_args(operation, resource_type)?;
    let probe = Action::new(operation, resource_type, PROBE_RESOURCE_NAME);
    if authorizer.authorize(ctx, &[probe]).first() == Some(&AuthorizationResult::Allowed) {
        return Ok(AuthorizationResult::Allowed);
    }
    let filter = AclBindingFilter::new(
        ResourcePatternFilter::new(resource_type, None, PatternType::Any),
        AccessControlEntryFilter::ANY,
    );
    let bindings = authorizer.describe(&filter);
    let mut scan = ResourceTypeScan::default();
    for b in &bindings {
        let entry = &b.entry;
        if entry.host != ctx.client_host && entry.host != WILDCARD_HOST {
            continue;
        }
        let principal_matches = entry.principal == Principal::WILDCARD
            || entry
                .principal
                .parse::<Principal>()
                .is_ok_and(|p| p == ctx.principal);
        if !principal_matches
            || (entry.operation != operation && entry.operation != AclOperation::All)
        {
            continue;
        }
        if scan
            .add(
                entry.permission_type,
                b.pattern.pattern_type,
                &b.pattern.name,
            )
            .is_break()
        {
            return Ok(AuthorizationResult::Denied);
        }
    }
    Ok(scan.result())
}

/// The patterns `authorize_by_resource_type` collects for one principal, host and operation.
#[derive(Default)]
pub(crate) struct ResourceTypeScan<'a> {
    deny_literal: HashSet<&'a str>,
    /// Non-empty DENY prefixes (Kafka never tests the empty prefix of a name).
    deny_prefixed: PrefixTrie<()>,
    allow_literal: HashSet<&'a str>,
    allow_prefixed: HashSet<&'a str>,
    allow_wildcard: bool,
}

impl<'a> ResourceTypeScan<'a> {
    /// Records one applicable ACL; `Break` when it is a DENY on the wildcard literal, which
    /// settles the answer (denied).
    pub(crate) fn add(
        &mut self,
        permission: AclPermissionType,
        pattern_type: PatternType,
        name: &'a str,
    ) -> ControlFlow<()> {
        let wildcard = name == WILDCARD_RESOURCE;
        match (permission, pattern_type) {
            (AclPermissionType::Deny, PatternType::Literal) if wildcard => {
                return ControlFlow::Break(());
            }
            (AclPermissionType::Deny, PatternType::Literal) => {
                self.deny_literal.insert(name);
            }
            (AclPermissionType::Deny, PatternType::Prefixed) if !name.is_empty() => {
                self.deny_prefixed.insert(name, ());
            }
            (AclPermissionType::Allow, PatternType::Literal) if wildcard => {
                self.allow_wildcard = true
            }
            (AclPermissionType::Allow, PatternType::Literal) => {
                self.allow_literal.insert(name);
            }
            (AclPermissionType::Allow, PatternType::Prefixed) => {
                self.allow_prefixed.insert(name);
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }

    /// True if a DENY prefix is a prefix of `name` (or `name` itself): O(|name|).
    fn covered_by_deny_prefix(&self, name: &str) -> bool {
        let mut covered = false;
        self.deny_prefixed.visit_prefixes_of(name, |_| {
            covered = true;
            false
        });
        covered
    }

    /// The answer once every applicable ACL was added.
    pub(crate) fn result(&self) -> AuthorizationResult {
        let allowed = self.allow_wildcard
            || self.allow_literal.iter().any(|name| {
                !self.deny_literal.contains(name) && !self.covered_by_deny_prefix(name)
            })
            || self
                .allow_prefixed
                .iter()
                .any(|name| !self.covered_by_deny_prefix(name));
        if allowed {
            AuthorizationResult::Allowed
        } else {
            AuthorizationResult::Denied
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn host_addresses_print_as_java_does() {
        assert_eq!(
            java_host_address(IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1))),
            "192.168.0.1"
        );
        assert_eq!(
            java_host_address(IpAddr::V6(Ipv6Addr::LOCALHOST)),
            "0:0:0:0:0:0:0:1"
        );
        assert_eq!(
            java_host_address(IpAddr::V6(Ipv6Addr::UNSPECIFIED)),
            "0:0:0:0:0:0:0:0"
        );
        let v6: Ipv6Addr = "2001:db8::0a:ff00".parse().unwrap();
        assert_eq!(java_host_address(IpAddr::V6(v6)), "2001:db8:0:0:0:0:a:ff00");
        let mapped: Ipv6Addr = "::ffff:10.1.2.3".parse().unwrap();
        assert_eq!(java_host_address(IpAddr::V6(mapped)), "10.1.2.3");
        let ctx = RequestContext::from_ip(Principal::user("a"), IpAddr::V6(mapped));
        assert_eq!(ctx.client_host, "10.1.2.3");
    }

    #[test]
    fn resource_type_arguments_must_be_specific() {
        for (op, rt) in [
            (AclOperation::Read, ResourceType::Any),
            (AclOperation::Read, ResourceType::Unknown),
            (AclOperation::Any, ResourceType::Topic),
            (AclOperation::Unknown, ResourceType::Topic),
        ] {
            let err = check_resource_type_args(op, rt).unwrap_err();
            assert_eq!(err.code(), super::super::UNKNOWN_SERVER_ERROR);
        }
        assert_eq!(
            check_resource_type_args(AclOperation::All, ResourceType::Topic),
            Ok(())
        );
    }

    #[test]
    fn deny_prefixes_cover_at_character_boundaries() {
        let mut scan = ResourceTypeScan::default();
        let _ = scan.add(AclPermissionType::Deny, PatternType::Prefixed, "é");
        assert!(scan.covered_by_deny_prefix("école"));
        assert!(scan.covered_by_deny_prefix("é"));
        assert!(!scan.covered_by_deny_prefix("e"));
        assert!(!scan.covered_by_deny_prefix(""));
        // Kafka tests the non-empty prefixes of a name only.
        let _ = scan.add(AclPermissionType::Deny, PatternType::Prefixed, "");
        assert!(!scan.covered_by_deny_prefix("x"));
    }
}
