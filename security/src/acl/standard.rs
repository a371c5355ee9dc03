//! Kafka's standard authorizer: the rules of
//! [`StandardAuthorizerData`](https://github.com/apache/kafka/blob/4.1/metadata/src/main/java/org/apache/kafka/metadata/authorizer/StandardAuthorizerData.java)
//! over indexes that make one check touch only the ACLs that can apply.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ops::ControlFlow;

use super::authorizer::{PROBE_RESOURCE_NAME, ResourceTypeScan, check_resource_type_args};
use super::trie::PrefixTrie;
use super::{
    AclBinding, AclBindingFilter, AclError, AclOperation, AclPermissionType, Action,
    AuthorizationResult, Authorizer, CreateOutcome, PatternType, Principal, PrincipalParseError,
    RequestContext, ResourceType, WILDCARD_HOST, WILDCARD_RESOURCE,
};

/// The standard authorizer's settings (Kafka's broker configs of the same names).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StandardAuthorizerConfig {
    /// `super.users`: principals allowed everything, whatever the ACLs.
    pub super_users: HashSet<Principal>,
    /// `allow.everyone.if.no.acl.found` (default false): the answer when no ACL at all applies
    /// to the resource (for any principal, host or operation).
    pub allow_everyone_if_no_acl_found: bool,
}

impl StandardAuthorizerConfig {
    /// The name of the super users config.
    pub const SUPER_USERS: &'static str = "super.users";
    /// The name of the no-ACL default config.
    pub const ALLOW_EVERYONE_IF_NO_ACL_FOUND: &'static str = "allow.everyone.if.no.acl.found";

    /// Parses `super.users` as Kafka does: `;`-separated principals, each trimmed, empty
    /// items skipped (`"User:bob; User:alice;"`).
    pub fn parse_super_users(value: &str) -> Result<HashSet<Principal>, PrincipalParseError> {
        value
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::parse)
            .collect()
    }

    /// Parses `allow.everyone.if.no.acl.found` as Kafka does (Java's `Boolean.parseBoolean`
    /// of the trimmed value): `true` in any case is true, anything else false.
    pub fn parse_allow_everyone_if_no_acl_found(value: &str) -> bool {
        value.trim().eq_ignore_ascii_case("true")
    }
}

/// What a check needs of one ACL, in the by-resource index.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MatchEntry {
    principal: Principal,
    host: String,
    operation: AclOperation,
    permission: AclPermissionType,
}

/// What `authorize_by_resource_type` needs of one ACL, in the by-principal index.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ScanEntry {
    pattern_type: PatternType,
    name: String,
    host: String,
    operation: AclOperation,
    permission: AclPermissionType,
}

/// The ACLs of one resource type, indexed.
#[derive(Debug, Clone, Default)]
struct TypeIndex {
    /// Literal ACLs by resource name (the wildcard under `*`).
    literal: HashMap<String, Vec<MatchEntry>>,
    /// Prefixed ACLs by prefix.
    prefixed: PrefixTrie<MatchEntry>,
    /// Every ACL of the type by principal, for `authorize_by_resource_type`.
    by_principal: HashMap<Principal, Vec<ScanEntry>>,
}

/// Kafka's `StandardAuthorizer` as a library: holds ACL bindings and answers with Kafka's
/// rules.
///
/// For one action (operation, resource type, name), with client principal P and host H:
/// - P in `super.users`: allowed.
/// - The ACLs that apply to the resource are those of its type whose pattern is the literal
///   name, the literal `*`, or a prefix of the name (`Prefixed "ab"` applies to `ab` and
///   `abc`, not to `a`). None at all (whatever their principal, host or operation): the
///   `allow.everyone.if.no.acl.found` answer.
/// - Of those, an ACL matches when its principal is P or `User:*`, its host is H or `*`, and
///   its operation is ALL or the action's, where an ALLOW (not a DENY) of READ, WRITE, DELETE
///   or ALTER also grants DESCRIBE and an ALLOW of ALTER_CONFIGS grants DESCRIBE_CONFIGS.
/// - A matching DENY denies, whatever ALLOWs match; else a matching ALLOW allows; else
///   denied (there are ACLs on the resource, none for this caller).
///
/// Cost of one check: a hash lookup of the name and of `*`, and a walk of the prefix trie
/// along the name, so O(|name| + a) where a is the number of ACLs whose pattern applies to
/// the resource, independent of the total number of ACLs (Kafka's own authorizer is
/// O(log n) per divergence point of its sorted set, plus a).
/// [`authorize_by_resource_type`](Authorizer::authorize_by_resource_type) is
/// O(p·L) where p is the number of ACLs of the type for the caller's principal and `User:*`
/// and L the longest of their names. [`describe`](Authorizer::describe) and
/// [`delete`](Authorizer::delete) scan every binding (O(n) per filter, as in Kafka);
/// [`create`](Authorizer::create) is O(log n + |name|) per binding.
#[derive(Debug, Clone, Default)]
pub struct StandardAuthorizer {
    config: StandardAuthorizerConfig,
    /// Every binding, once.
    bindings: BTreeSet<AclBinding>,
    indexes: HashMap<ResourceType, TypeIndex>,
}

impl StandardAuthorizer {
    /// An authorizer without ACLs.
    pub fn new(config: StandardAuthorizerConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    /// The settings.
    pub fn config(&self) -> &StandardAuthorizerConfig {
        &self.config
    }

    /// Replaces the settings (the ACLs stay).
    pub fn set_config(&mut self, config: StandardAuthorizerConfig) {
        self.config = config;
    }

    /// The number of bindings.
    pub fn len(&self) -> usize {
        self.bindings.len()
    }

    /// True if there is no binding.
    pub fn is_empty(&self) -> bool {
        self.bindings.is_empty()
    }

    /// Every binding, in a stable order (resource type code, name, pattern type, principal,
    /// host, operation code, permission code).
    pub fn bindings(&self) -> impl Iterator<Item = &AclBinding> {
        self.bindings.iter()
    }

    /// The answer for one action.
    pub fn authorize_action(&self, ctx: &RequestContext, action: &Action) -> AuthorizationResult {
        if self.config.super_users.contains(&ctx.principal) {
            return AuthorizationResult::Allowed;
        }
        let no_acl = if self.config.allow_everyone_if_no_acl_found {
            AuthorizationResult::Allowed
        } else {
            AuthorizationResult::Denied
        };
        let Some(index) = self.indexes.get(&action.resource_type) else {
            return no_acl;
        };
        let mut any_acl = false;
        let mut allowed = false;
        // Visits a list of ACLs that apply to the resource; `Break` on a matching DENY.
        let mut check = |entries: &[MatchEntry]| -> ControlFlow<()> {
            any_acl |= !entries.is_empty();
            for e in entries {
                match matching_permission(e, ctx, action.operation) {
                    Some(AclPermissionType::Deny) => return ControlFlow::Break(()),
                    Some(_) => allowed = true,
                    None => {}
                }
            }
            ControlFlow::Continue(())
        };
        let name = action.resource_name.as_str();
        let mut denied = index.literal.get(name).is_some_and(|e| check(e).is_break());
        if !denied && name != WILDCARD_RESOURCE {
            denied = index
                .literal
                .get(WILDCARD_RESOURCE)
                .is_some_and(|e| check(e).is_break());
        }
        if !denied {
            index.prefixed.visit_prefixes_of(name, |e| {
                denied = check(e).is_break();
                !denied
            });
        }
        if denied {
            AuthorizationResult::Denied
        } else if allowed {
            AuthorizationResult::Allowed
        } else if any_acl {
            AuthorizationResult::Denied
        } else {
            no_acl
        }
    }

    fn add_to_index(&mut self, b: &AclBinding, principal: Principal) {
        let index = self.indexes.entry(b.pattern.resource_type).or_default();
        let entry = MatchEntry {
            principal: principal.clone(),
            host: b.entry.host.clone(),
            operation: b.entry.operation,
            permission: b.entry.permission_type,
        };
        match b.pattern.pattern_type {
            PatternType::Literal => index
                .literal
                .entry(b.pattern.name.clone())
                .or_default()
                .push(entry),
            _ => index.prefixed.insert(&b.pattern.name, entry),
        }
        index
            .by_principal
            .entry(principal)
            .or_default()
            .push(scan_entry(b));
    }

    fn remove_from_index(&mut self, b: &AclBinding) {
        let principal: Principal = b.entry.principal.parse().expect("stored principals parse");
        let Some(index) = self.indexes.get_mut(&b.pattern.resource_type) else {
            return;
        };
        let is_entry = |e: &MatchEntry| {
            e.principal == principal
                && e.host == b.entry.host
                && e.operation == b.entry.operation
                && e.permission == b.entry.permission_type
        };
        match b.pattern.pattern_type {
            PatternType::Literal => {
                if let Some(list) = index.literal.get_mut(&b.pattern.name) {
                    list.retain(|e| !is_entry(e));
                    if list.is_empty() {
                        index.literal.remove(&b.pattern.name);
                    }
                }
            }
            _ => {
                index.prefixed.remove(&b.pattern.name, is_entry);
            }
        }
        let scan = scan_entry(b);
        if let Some(list) = index.by_principal.get_mut(&principal) {
            list.retain(|e| *e != scan);
            if list.is_empty() {
                index.by_principal.remove(&principal);
            }
        }
        if index.by_principal.is_empty() {
            self.indexes.remove(&b.pattern.resource_type);
        }
    }
}

fn scan_entry(b: &AclBinding) -> ScanEntry {
    ScanEntry {
        pattern_type: b.pattern.pattern_type,
        name: b.pattern.name.clone(),
        host: b.entry.host.clone(),
        operation: b.entry.operation,
        permission: b.entry.permission_type,
    }
}

/// The permission of an ACL that applies to the resource if it also matches the caller and
/// the operation (Kafka's `findResult`), else `None`.
fn matching_permission(
    e: &MatchEntry,
    ctx: &RequestContext,
    op: AclOperation,
) -> Option<AclPermissionType> {
    if e.principal != ctx.principal && !e.principal.is_wildcard() {
        return None;
    }
    if e.host != WILDCARD_HOST && e.host != ctx.client_host {
        return None;
    }
    if e.operation != AclOperation::All && e.operation != op {
        // Implication works for ALLOW only: a DENY of READ does not deny DESCRIBE.
        let implied = e.permission == AclPermissionType::Allow
            && match op {
                AclOperation::Describe => matches!(
                    e.operation,
                    AclOperation::Read
                        | AclOperation::Write
                        | AclOperation::Delete
                        | AclOperation::Alter
                ),
                AclOperation::DescribeConfigs => e.operation == AclOperation::AlterConfigs,
                _ => false,
            };
        if !implied {
            return None;
        }
    }
    Some(e.permission)
}

impl Authorizer for StandardAuthorizer {
    fn authorize(&self, ctx: &RequestContext, actions: &[Action]) -> Vec<AuthorizationResult> {
        actions
            .iter()
            .map(|a| self.authorize_action(ctx, a))
            .collect()
    }

    /// Kafka's default method (see
    /// [`default_authorize_by_resource_type`](super::default_authorize_by_resource_type)) over
    /// the by-principal index: only the ACLs of the type for the caller's principal and for
    /// `User:*` are read.
    fn authorize_by_resource_type(
        &self,
        ctx: &RequestContext,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> Result<AuthorizationResult, AclError> {
        check_resource_type_args(operation, resource_type)?;
        let probe = Action::new(operation, resource_type, PROBE_RESOURCE_NAME);
        if self.authorize_action(ctx, &probe).is_allowed() {
            return Ok(AuthorizationResult::Allowed);
        }
        let Some(index) = self.indexes.get(&resource_type) else {
            return Ok(AuthorizationResult::Denied);
        };
        let wildcard = Principal::wildcard();
        let mut lists = vec![index.by_principal.get(&ctx.principal)];
        if ctx.principal != wildcard {
            lists.push(index.by_principal.get(&wildcard));
        }
        let mut scan = ResourceTypeScan::default();
        for e in lists.into_iter().flatten().flatten() {
            if e.host != ctx.client_host && e.host != WILDCARD_HOST {
                continue;
            }
            if e.operation != operation && e.operation != AclOperation::All {
                continue;
            }
            if scan.add(e.permission, e.pattern_type, &e.name).is_break() {
                return Ok(AuthorizationResult::Denied);
            }
        }
        Ok(scan.result())
    }

    fn describe(&self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        self.bindings
            .iter()
            .filter(|b| filter.matches(b))
            .cloned()
            .collect()
    }

    /// Validates each binding ([`AclBinding::validate_for_create`]) and adds the valid ones
    /// that are not there yet.
    fn create(&mut self, bindings: &[AclBinding]) -> Vec<Result<CreateOutcome, AclError>> {
        bindings
            .iter()
            .map(|b| {
                b.validate_for_create()?;
                if self.bindings.contains(b) {
                    return Ok(CreateOutcome::AlreadyExists);
                }
                let principal = b.entry.principal.parse().expect("validated");
                self.add_to_index(b, principal);
                self.bindings.insert(b.clone());
                Ok(CreateOutcome::Created)
            })
            .collect()
    }

    /// As Kafka: every filter is matched against the bindings as they were before the call,
    /// so a binding two filters select is listed under both (and removed once); a filter
    /// with an `Unknown` code fails alone with INVALID_REQUEST.
    fn delete(&mut self, filters: &[AclBindingFilter]) -> Vec<Result<Vec<AclBinding>, AclError>> {
        let results: Vec<Result<Vec<AclBinding>, AclError>> = filters
            .iter()
            .map(|f| {
                f.validate()?;
                Ok(self.describe(f))
            })
            .collect();
        for b in results.iter().flatten().flatten() {
            if self.bindings.remove(b) {
                self.remove_from_index(b);
            }
        }
        results
    }
}

#[cfg(test)]
mod tests;
