//! Kafka's ACL model and its standard authorizer.
//!
//! - The enumerations with their wire codes and names: [`ResourceType`], [`PatternType`],
//!   [`AclOperation`], [`AclPermissionType`].
//! - [`Principal`] (`User:alice`, the wildcard `User:*`).
//! - [`AclBinding`] (a [`ResourcePattern`] and an [`AccessControlEntry`]), the
//!   [`AclBindingFilter`] of DescribeAcls and DeleteAcls, and the checks of CreateAcls
//!   ([`AclBinding::validate_for_create`], errors as [`AclError`] with Kafka's codes).
//! - The [`Authorizer`] trait a broker calls, and [`StandardAuthorizer`], Kafka's
//!   [`StandardAuthorizer`](https://github.com/apache/kafka/blob/4.1/metadata/src/main/java/org/apache/kafka/metadata/authorizer/StandardAuthorizer.java)
//!   with indexes so that a check reads only the ACLs that can apply.

mod authorizer;
mod binding;
mod principal;
mod standard;
mod trie;
mod types;

pub use authorizer::{
    Action, AuthorizationResult, Authorizer, CreateOutcome, RequestContext,
    default_authorize_by_resource_type, java_host_address,
};
pub use binding::{
    AccessControlEntry, AccessControlEntryFilter, AclBinding, AclBindingFilter, AclError,
    CLUSTER_NAME, INVALID_REQUEST, ResourcePattern, ResourcePatternFilter, UNKNOWN_SERVER_ERROR,
    WILDCARD_HOST, WILDCARD_RESOURCE,
};
pub use principal::{Principal, PrincipalParseError};
pub use standard::{StandardAuthorizer, StandardAuthorizerConfig};
pub use types::{AclOperation, AclPermissionType, PatternType, ResourceType, UnknownNameError};
