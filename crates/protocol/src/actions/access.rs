//! Who may touch a queue: its own account always; another account only where the queue's
//! `Policy` (what AddPermission writes) allows it the action. A queue another account may not
//! use does not exist for it, as on AWS, so a caller learns nothing of other accounts' queues.

use leasehold_backend::Backend;
use leasehold_engine::EngineError;
use serde_json::Value;

use super::Context;
use crate::error::Result;
use crate::request::Request;

/// Refuses a request about another account's queue unless that queue's policy allows it,
/// with the error the action gives for a queue that does not exist.
pub(crate) async fn check(backend: &dyn Backend, ctx: &Context, request: &Request) -> Result<()> {
    let Some((key, refusal)) = foreign_queue(backend, ctx, request) else {
        return Ok(());
    };
    let naming = backend.naming();
    let policy = match backend
        .get_attributes(&key, vec!["Policy".to_string()])
        .await
    {
        Ok(attributes) => attributes
            .into_iter()
            .find(|(name, _)| name == "Policy")
            .map(|(_, policy)| policy),
        Err(_) => return Err(refusal.into()),
    };
    let allowed = policy.is_some_and(|policy| {
        allows(
            &policy,
            ctx.account(backend),
            request.action(),
            &naming.queue_arn(&key),
        )
    });
    if allowed {
        Ok(())
    } else {
        Err(refusal.into())
    }
}

/// The key of the queue of another account the request is about, if it is about one (its
/// QueueUrl, GetQueueUrl's owner, or a move task's source, by ARN or inside its handle), and
/// the error its action gives for a queue that does not exist.
fn foreign_queue(
    backend: &dyn Backend,
    ctx: &Context,
    request: &Request,
) -> Option<(String, EngineError)> {
    let naming = backend.naming();
    let source = || EngineError::resource_not_found("SourceArn");
    let (key, refusal) = match request {
        Request::GetQueueUrl(input) => {
            let owner = input.queue_owner_aws_account_id.as_deref()?;
            let name = input.queue_name.as_deref()?;
            let key = naming.queue_key_in(Some(owner), ctx.region.as_deref(), name);
            (key, EngineError::QueueDoesNotExist)
        }
        Request::StartMessageMoveTask(input) => {
            (naming.key_of_arn(input.source_arn.as_deref()?)?, source())
        }
        Request::ListMessageMoveTasks(input) => {
            (naming.key_of_arn(input.source_arn.as_deref()?)?, source())
        }
        Request::CancelMessageMoveTask(input) => {
            let handle = input.task_handle.as_deref()?;
            let (_, source_arn) = leasehold_engine::MoveTask::read_handle(handle).ok()?;
            (naming.key_of_arn(&source_arn)?, source())
        }
        other => {
            let key = ctx
                .queue(backend, Some(other.queue_url()?.to_string()))
                .ok()?;
            (key, EngineError::QueueDoesNotExist)
        }
    };
    (naming.key_account(&key) != ctx.account(backend)).then_some((key, refusal))
}

/// Whether a queue policy allows `account` the SQS `action` on the queue `arn`: an `Allow`
/// statement naming the account (or everyone), the action (or a wildcard) and the queue, and
/// no `Deny` statement doing the same. A statement with conditions is not evaluated and
/// allows nothing.
pub fn allows(policy: &str, account: &str, action: &str, arn: &str) -> bool {
    let Ok(document) = serde_json::from_str::<Value>(policy) else {
        return false;
    };
    let statements: Vec<&Value> = match &document["Statement"] {
        Value::Array(all) => all.iter().collect(),
        one @ Value::Object(_) => vec![one],
        _ => return false,
    };
    let applies = |statement: &&Value| {
        statement.get("Condition").is_none()
            && names_principal(&statement["Principal"], account)
            && any_matches(&statement["Action"], |a| action_matches(a, action))
            && any_matches(&statement["Resource"], |r| r == "*" || r == arn)
    };
    let effect = |s: &&Value| s["Effect"].as_str().unwrap_or_default().to_string();
    let applying: Vec<&Value> = statements.into_iter().filter(applies).collect();
    applying.iter().any(|s| effect(s) == "Allow") && !applying.iter().any(|s| effect(s) == "Deny")
}

fn names_principal(principal: &Value, account: &str) -> bool {
    let root = format!("arn:aws:iam::{account}:root");
    let names = |p: &str| p == "*" || p == account || p == root;
    match principal {
        Value::String(p) => p == "*",
        Value::Object(map) => map.get("AWS").is_some_and(|aws| any_matches(aws, names)),
        _ => false,
    }
}

/// Whether a policy's action (`SQS:SendMessage`, `sqs:*`, `*`) covers the action.
fn action_matches(pattern: &str, action: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    let Some((service, name)) = pattern.split_once(':') else {
        return false;
    };
    service.eq_ignore_ascii_case("sqs") && (name == "*" || name.eq_ignore_ascii_case(action))
}

/// A policy member that is one string or a list of them.
fn any_matches(value: &Value, matches: impl Fn(&str) -> bool) -> bool {
    match value {
        Value::String(one) => matches(one),
        Value::Array(all) => all.iter().filter_map(Value::as_str).any(matches),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::allows;

    const ARN: &str = "arn:aws:sqs:us-east-1:000000000000:q";

    fn policy(statement: &str) -> String {
        format!(r#"{{"Version":"2012-10-17","Statement":[{statement}]}}"#)
    }

    #[test]
    fn an_add_permission_statement_allows_its_accounts_the_actions_it_names() {
        let p = policy(&format!(
            r#"{{"Sid":"l","Effect":"Allow","Principal":{{"AWS":["arn:aws:iam::111111111111:root","222222222222"]}},"Action":["SQS:SendMessage","SQS:ReceiveMessage"],"Resource":"{ARN}"}}"#
        ));
        assert!(allows(&p, "111111111111", "SendMessage", ARN));
        assert!(allows(&p, "222222222222", "ReceiveMessage", ARN));
        assert!(!allows(&p, "111111111111", "DeleteMessage", ARN));
        assert!(!allows(&p, "333333333333", "SendMessage", ARN));
        assert!(!allows(
            &p,
            "111111111111",
            "SendMessage",
            "arn:aws:sqs:us-east-1:000000000000:other"
        ));
    }

    #[test]
    fn wildcards_deny_and_conditions_are_read_as_aws_does() {
        let everyone = policy(&format!(
            r#"{{"Effect":"Allow","Principal":"*","Action":"sqs:*","Resource":"{ARN}"}}"#
        ));
        assert!(allows(&everyone, "111111111111", "PurgeQueue", ARN));
        let denied = policy(
            r#"{"Effect":"Allow","Principal":"*","Action":"*","Resource":"*"},{"Effect":"Deny","Principal":{"AWS":"111111111111"},"Action":"SQS:PurgeQueue","Resource":"*"}"#,
        );
        assert!(!allows(&denied, "111111111111", "PurgeQueue", ARN));
        assert!(allows(&denied, "111111111111", "SendMessage", ARN));
        let conditional = policy(&format!(
            r#"{{"Effect":"Allow","Principal":"*","Action":"*","Resource":"{ARN}","Condition":{{"ArnEquals":{{"aws:SourceArn":"x"}}}}}}"#
        ));
        assert!(!allows(&conditional, "111111111111", "SendMessage", ARN));
        assert!(!allows("not json", "111111111111", "SendMessage", ARN));
    }
}
