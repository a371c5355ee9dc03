//! Kafka's ACL and SCRAM admin APIs, so that `kafka-acls.sh` and `kafka-configs.sh` manage the
//! daemon: CreateAcls, DescribeAcls, DeleteAcls as Kafka's
//! [`AclApis`](https://github.com/apache/kafka/blob/4.1/core/src/main/scala/kafka/server/AclApis.scala),
//! DescribeUserScramCredentials and AlterUserScramCredentials as
//! [`KafkaApis`](https://github.com/apache/kafka/blob/4.1/core/src/main/scala/kafka/server/KafkaApis.scala)
//! and Kafka's
//! [`ScramControlManager`](https://github.com/apache/kafka/blob/4.1/metadata/src/main/java/org/apache/kafka/controller/ScramControlManager.java).
//!
//! Who may call them: ALTER on the Cluster for CreateAcls, DeleteAcls and
//! AlterUserScramCredentials; DESCRIBE on the Cluster for DescribeAcls and
//! DescribeUserScramCredentials (everyone without an authorizer). The ACL APIs answer
//! SECURITY_DISABLED without an authorizer. Changes are written to the log backend's
//! [`txn_log::SecurityStore`] first, then applied in memory
//! ([`super::security_store::SecurityState`]).

use std::collections::BTreeMap;

use kafka_protocol::messages as km;
use kafka_protocol::protocol::StrBytes;
use security::acl::{
    AccessControlEntry, AccessControlEntryFilter, AclBinding, AclBindingFilter, AclOperation,
    AclPermissionType, Authorizer, PatternType, ResourcePattern, ResourcePatternFilter,
    ResourceType,
};
use security::sasl::{
    Alteration, ScramDeletion, ScramMechanism, ScramUpsertion, validate_alterations,
};
use txn_log::{SecurityChange, StoredScram};

use super::authz::Authz;
use super::security_store::SecurityState;
use crate::ErrorCode;
use crate::shell::Metrics;

/// Kafka's SECURITY_DISABLED.
const SECURITY_DISABLED: i16 = 54;
const NO_AUTHORIZER: &str = "No Authorizer is configured.";
const CLUSTER_DENIED: &str = "Cluster authorization failed.";
const CLUSTER_AUTHORIZATION_FAILED: i16 = ErrorCode::CLUSTER_AUTHORIZATION_FAILED.0;
const UNKNOWN_SERVER_ERROR: i16 = -1;
const RESOURCE_NOT_FOUND: i16 = 91;
const DUPLICATE_RESOURCE: i16 = 92;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn record(metrics: &Metrics, api: &'static str, code: i16) {
    metrics.record(api, ErrorCode(code));
}

/// CreateAcls.
pub async fn create_acls(
    security: &SecurityState,
    metrics: &Metrics,
    authz: &Authz<'_>,
    r: km::CreateAclsRequest,
) -> km::CreateAclsResponse {
    let all = |code: i16, msg: &str| {
        record(metrics, "CreateAcls", code);
        km::CreateAclsResponse::default().with_results(
            r.creations
                .iter()
                .map(|_| {
                    km::create_acls_response::AclCreationResult::default()
                        .with_error_code(code)
                        .with_error_message(Some(s(msg)))
                })
                .collect(),
        )
    };
    if !authz.cluster(AclOperation::Alter) {
        return all(CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED);
    }
    if !authz.enabled() {
        return all(SECURITY_DISABLED, NO_AUTHORIZER);
    }
    let mut results: Vec<Result<(), (i16, String)>> = Vec::with_capacity(r.creations.len());
    let mut valid = Vec::new();
    for c in &r.creations {
        let b = AclBinding::new(
            ResourcePattern::new(
                ResourceType::from_code(c.resource_type),
                c.resource_name.to_string(),
                PatternType::from_code(c.resource_pattern_type),
            ),
            AccessControlEntry::new(
                c.principal.to_string(),
                c.host.to_string(),
                AclOperation::from_code(c.operation),
                AclPermissionType::from_code(c.permission_type),
            ),
        );
        match b.validate_for_create() {
            Ok(()) => {
                valid.push(b);
                results.push(Ok(()));
            }
            Err(e) => results.push(Err((e.code(), e.to_string()))),
        }
    }
    let stored = security.add_acls(valid).await;
    if let Err(e) = &stored {
        tracing::error!(error = %e, "CreateAcls: the ACLs could not be stored");
    }
    let out = results
        .into_iter()
        .map(|res| {
            let (code, msg) = match (res, &stored) {
                (Err((code, msg)), _) => (code, Some(msg)),
                (Ok(()), Ok(())) => (0, None),
                (Ok(()), Err(e)) => (UNKNOWN_SERVER_ERROR, Some(e.to_string())),
            };
            record(metrics, "CreateAcls", code);
            km::create_acls_response::AclCreationResult::default()
                .with_error_code(code)
                .with_error_message(msg.map(|m| s(&m)))
        })
        .collect();
    km::CreateAclsResponse::default().with_results(out)
}

fn filter(
    resource_type: i8,
    name: Option<&StrBytes>,
    pattern_type: i8,
    principal: Option<&StrBytes>,
    host: Option<&StrBytes>,
    operation: i8,
    permission: i8,
) -> AclBindingFilter {
    AclBindingFilter::new(
        ResourcePatternFilter::new(
            ResourceType::from_code(resource_type),
            name.map(ToString::to_string),
            PatternType::from_code(pattern_type),
        ),
        AccessControlEntryFilter {
            principal: principal.map(ToString::to_string),
            host: host.map(ToString::to_string),
            operation: AclOperation::from_code(operation),
            permission_type: AclPermissionType::from_code(permission),
        },
    )
}

/// DescribeAcls.
pub fn describe_acls(
    security: &SecurityState,
    metrics: &Metrics,
    authz: &Authz<'_>,
    r: &km::DescribeAclsRequest,
) -> km::DescribeAclsResponse {
    let error = |code: i16, msg: &str| {
        record(metrics, "DescribeAcls", code);
        km::DescribeAclsResponse::default()
            .with_error_code(code)
            .with_error_message(Some(s(msg)))
    };
    if !authz.cluster(AclOperation::Describe) {
        return error(CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED);
    }
    let Some(authorizer) = security.authorizer() else {
        return error(SECURITY_DISABLED, NO_AUTHORIZER);
    };
    let f = filter(
        r.resource_type_filter,
        r.resource_name_filter.as_ref(),
        r.pattern_type_filter,
        r.principal_filter.as_ref(),
        r.host_filter.as_ref(),
        r.operation,
        r.permission_type,
    );
    if let Err(e) = f.validate() {
        return error(e.code(), &e.to_string());
    }
    record(metrics, "DescribeAcls", 0);
    let mut by_pattern: BTreeMap<ResourcePattern, Vec<AccessControlEntry>> = BTreeMap::new();
    for b in authorizer.describe(&f) {
        by_pattern.entry(b.pattern).or_default().push(b.entry);
    }
    km::DescribeAclsResponse::default().with_resources(
        by_pattern
            .into_iter()
            .map(|(p, entries)| {
                km::describe_acls_response::DescribeAclsResource::default()
                    .with_resource_type(p.resource_type.code())
                    .with_resource_name(s(&p.name))
                    .with_pattern_type(p.pattern_type.code())
                    .with_acls(
                        entries
                            .into_iter()
                            .map(|e| {
                                km::describe_acls_response::AclDescription::default()
                                    .with_principal(s(&e.principal))
                                    .with_host(s(&e.host))
                                    .with_operation(e.operation.code())
                                    .with_permission_type(e.permission_type.code())
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}

/// DeleteAcls.
pub async fn delete_acls(
    security: &SecurityState,
    metrics: &Metrics,
    authz: &Authz<'_>,
    r: km::DeleteAclsRequest,
) -> km::DeleteAclsResponse {
    let all = |code: i16, msg: &str| {
        record(metrics, "DeleteAcls", code);
        km::DeleteAclsResponse::default().with_filter_results(
            r.filters
                .iter()
                .map(|_| {
                    km::delete_acls_response::DeleteAclsFilterResult::default()
                        .with_error_code(code)
                        .with_error_message(Some(s(msg)))
                })
                .collect(),
        )
    };
    if !authz.cluster(AclOperation::Alter) {
        return all(CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED);
    }
    let Some(authorizer) = security.authorizer() else {
        return all(SECURITY_DISABLED, NO_AUTHORIZER);
    };
    let filters: Vec<AclBindingFilter> = r
        .filters
        .iter()
        .map(|f| {
            filter(
                f.resource_type_filter,
                f.resource_name_filter.as_ref(),
                f.pattern_type_filter,
                f.principal_filter.as_ref(),
                f.host_filter.as_ref(),
                f.operation,
                f.permission_type,
            )
        })
        .collect();
    let mut scratch = (*authorizer).clone();
    let matched = scratch.delete(&filters);
    let mut doomed: Vec<AclBinding> = matched.iter().flatten().flatten().cloned().collect();
    doomed.sort();
    doomed.dedup();
    let stored = security.remove_acls(doomed).await;
    if let Err(e) = &stored {
        tracing::error!(error = %e, "DeleteAcls: the ACLs could not be removed from the store");
    }
    let out = matched
        .into_iter()
        .map(|m| {
            let result = km::delete_acls_response::DeleteAclsFilterResult::default();
            match (m, &stored) {
                (Err(e), _) => {
                    record(metrics, "DeleteAcls", e.code());
                    result
                        .with_error_code(e.code())
                        .with_error_message(Some(s(&e.to_string())))
                }
                (Ok(_), Err(e)) => {
                    record(metrics, "DeleteAcls", UNKNOWN_SERVER_ERROR);
                    result
                        .with_error_code(UNKNOWN_SERVER_ERROR)
                        .with_error_message(Some(s(&e.to_string())))
                }
                (Ok(bindings), Ok(())) => {
                    record(metrics, "DeleteAcls", 0);
                    result.with_matching_acls(
                        bindings
                            .into_iter()
                            .map(|b| {
                                km::delete_acls_response::DeleteAclsMatchingAcl::default()
                                    .with_resource_type(b.pattern.resource_type.code())
                                    .with_resource_name(s(&b.pattern.name))
                                    .with_pattern_type(b.pattern.pattern_type.code())
                                    .with_principal(s(&b.entry.principal))
                                    .with_host(s(&b.entry.host))
                                    .with_operation(b.entry.operation.code())
                                    .with_permission_type(b.entry.permission_type.code())
                            })
                            .collect(),
                    )
                }
            }
        })
        .collect();
    km::DeleteAclsResponse::default().with_filter_results(out)
}

/// DescribeUserScramCredentials: every user with a credential when none is named; a user
/// named twice DUPLICATE_RESOURCE, one without credentials RESOURCE_NOT_FOUND.
pub fn describe_scram(
    security: &SecurityState,
    metrics: &Metrics,
    authz: &Authz<'_>,
    r: &km::DescribeUserScramCredentialsRequest,
) -> km::DescribeUserScramCredentialsResponse {
    use km::describe_user_scram_credentials_response::{
        CredentialInfo, DescribeUserScramCredentialsResult,
    };
    let named: Vec<String> = r
        .users
        .iter()
        .flatten()
        .map(|u| u.name.to_string())
        .collect();
    if !authz.cluster(AclOperation::Describe) {
        record(
            metrics,
            "DescribeUserScramCredentials",
            CLUSTER_AUTHORIZATION_FAILED,
        );
        return km::DescribeUserScramCredentialsResponse::default()
            .with_error_code(CLUSTER_AUTHORIZATION_FAILED)
            .with_error_message(Some(s(CLUSTER_DENIED)))
            .with_results(
                named
                    .iter()
                    .map(|u| {
                        DescribeUserScramCredentialsResult::default()
                            .with_user(s(u))
                            .with_error_code(CLUSTER_AUTHORIZATION_FAILED)
                            .with_error_message(Some(s(CLUSTER_DENIED)))
                    })
                    .collect(),
            );
    }
    let creds = security.credential_map();
    // User -> named twice.
    let mut users: BTreeMap<String, bool> = BTreeMap::new();
    if named.is_empty() {
        for (user, _) in creds.keys() {
            users.insert(user.clone(), false);
        }
    } else {
        for u in named {
            let twice = users.contains_key(&u);
            users.insert(u, twice);
        }
    }
    record(metrics, "DescribeUserScramCredentials", 0);
    let results = users
        .into_iter()
        .map(|(user, twice)| {
            let result = DescribeUserScramCredentialsResult::default().with_user(s(&user));
            if twice {
                return result.with_error_code(DUPLICATE_RESOURCE).with_error_message(Some(
                    s(&format!(
                        "Cannot describe SCRAM credentials for the same user twice in a single request: {user}"
                    )),
                ));
            }
            let infos: Vec<CredentialInfo> = ScramMechanism::ALL
                .into_iter()
                .filter_map(|m| {
                    creds.get(&(user.clone(), m)).map(|c| {
                        CredentialInfo::default()
                            .with_mechanism(m.type_code())
                            .with_iterations(i32::try_from(c.iterations).unwrap_or(i32::MAX))
                    })
                })
                .collect();
            if infos.is_empty() {
                result.with_error_code(RESOURCE_NOT_FOUND).with_error_message(Some(s(&format!(
                    "Attempt to describe a user credential that does not exist: {user}"
                ))))
            } else {
                result.with_credential_infos(infos)
            }
        })
        .collect();
    km::DescribeUserScramCredentialsResponse::default().with_results(results)
}

/// AlterUserScramCredentials: validated as Kafka's controller does
/// ([`validate_alterations`]), the valid changes stored at once.
pub async fn alter_scram(
    security: &SecurityState,
    metrics: &Metrics,
    authz: &Authz<'_>,
    r: km::AlterUserScramCredentialsRequest,
) -> km::AlterUserScramCredentialsResponse {
    use km::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
    let result = |user: &str, code: i16, msg: Option<String>| {
        record(metrics, "AlterUserScramCredentials", code);
        AlterUserScramCredentialsResult::default()
            .with_user(s(user))
            .with_error_code(code)
            .with_error_message(msg.map(|m| s(&m)))
    };
    if !authz.cluster(AclOperation::Alter) {
        let users = r
            .deletions
            .iter()
            .map(|d| &d.name)
            .chain(r.upsertions.iter().map(|u| &u.name));
        return km::AlterUserScramCredentialsResponse::default().with_results(
            users
                .map(|u| {
                    result(
                        u.as_str(),
                        CLUSTER_AUTHORIZATION_FAILED,
                        Some(CLUSTER_DENIED.to_owned()),
                    )
                })
                .collect(),
        );
    }
    let deletions: Vec<ScramDeletion<'_>> = r
        .deletions
        .iter()
        .map(|d| ScramDeletion {
            user: d.name.as_str(),
            mechanism: d.mechanism,
        })
        .collect();
    let upsertions: Vec<ScramUpsertion<'_>> = r
        .upsertions
        .iter()
        .map(|u| ScramUpsertion {
            user: u.name.as_str(),
            mechanism: u.mechanism,
            iterations: u.iterations,
            salt: &u.salt,
            salted_password: &u.salted_password,
        })
        .collect();
    let creds = security.credential_map();
    let outcomes = validate_alterations(&deletions, &upsertions, |user, m| {
        creds.contains_key(&(user.to_owned(), m))
    });
    let changes: Vec<SecurityChange> = outcomes
        .iter()
        .filter_map(|o| match &o.outcome {
            Ok(Alteration::Delete(m)) => Some(SecurityChange::DeleteScram {
                user: o.user.clone(),
                mechanism: *m,
            }),
            Ok(Alteration::Upsert(m, c)) => Some(SecurityChange::PutScram(StoredScram {
                user: o.user.clone(),
                mechanism: *m,
                credential: c.clone(),
            })),
            Err(_) => None,
        })
        .collect();
    let stored = security.alter_credentials(changes).await;
    if let Err(e) = &stored {
        tracing::error!(error = %e, "AlterUserScramCredentials: the credentials could not be stored");
    }
    let results = outcomes
        .into_iter()
        .map(|o| match (o.outcome, &stored) {
            (Err(e), _) => result(&o.user, e.code, Some(e.message.to_owned())),
            (Ok(_), Ok(())) => result(&o.user, 0, None),
            (Ok(_), Err(e)) => result(&o.user, UNKNOWN_SERVER_ERROR, Some(e.to_string())),
        })
        .collect();
    km::AlterUserScramCredentialsResponse::default().with_results(results)
}

/// DescribeClientQuotas: the daemon has no quotas, so every filter matches nothing (an empty
/// list, as from a Kafka cluster without quotas). Served for `kafka-configs.sh --describe
/// --entity-type users`, which asks for the users' quotas before their SCRAM credentials.
/// Needs DESCRIBE_CONFIGS on the cluster, as in Kafka.
pub fn describe_client_quotas(
    authz: &Authz<'_>,
    _r: &km::DescribeClientQuotasRequest,
) -> km::DescribeClientQuotasResponse {
    if !authz.cluster(AclOperation::DescribeConfigs) {
        return km::DescribeClientQuotasResponse::default()
            .with_error_code(CLUSTER_AUTHORIZATION_FAILED)
            .with_error_message(Some(s(CLUSTER_DENIED)))
            .with_entries(None);
    }
    km::DescribeClientQuotasResponse::default().with_entries(Some(Vec::new()))
}
