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
    refuse_a_foreign_destination(backend, ctx, request)?;
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

/// A move task writes only into its caller's own queues: another account's destination is
/// answered as one that does not exist, whether it exists or not, so it tells nothing.
fn refuse_a_foreign_destination(
    backend: &dyn Backend,
    ctx: &Context,
    request: &Request,
) -> Result<()> {
    let Request::StartMessageMoveTask(input) = request else {
        return Ok(());
    };
    let naming = backend.naming();
    let foreign = input
        .destination_arn
        .as_deref()
        .and_then(|arn| naming.key_of_arn(arn))
        .is_some_and(|key| naming.key_account(&key) != ctx.account(backend));
    if foreign {
        return Err(EngineError::resource_not_found("DestinationArn").into());
    }
    Ok(())
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

/// The actions AWS never grants across accounts, whatever a queue's policy says.
pub const OWNER_ONLY: [&str; 12] = [
    "AddPermission",
    "CancelMessageMoveTask",
    "CreateQueue",
    "DeleteQueue",
    "ListMessageMoveTasks",
    "ListQueues",
    "ListQueueTags",
    "RemovePermission",
    "SetQueueAttributes",
    "StartMessageMoveTask",
    "TagQueue",
    "UntagQueue",
];

/// The policy action a request needs: a batch is allowed by its single action, as on AWS.
fn policy_action(action: &str) -> &str {
    action.strip_suffix("Batch").unwrap_or(action)
}

/// Whether a part of a statement applies: surely, surely not, or perhaps (a condition the
/// server cannot evaluate, a principal narrower than an account). Perhaps counts as applying
/// for a Deny and as not applying for an Allow: a policy never fails open.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Applies {
    Yes,
    No,
    Perhaps,
}

impl Applies {
    fn and(self, other: Applies) -> Applies {
        match (self, other) {
            (Applies::No, _) | (_, Applies::No) => Applies::No,
            (Applies::Yes, Applies::Yes) => Applies::Yes,
            _ => Applies::Perhaps,
        }
    }

    fn of(yes: bool) -> Applies {
        if yes {
            Applies::Yes
        } else {
            Applies::No
        }
    }

    /// A `NotX` element: what the `X` element would not match.
    fn not(self) -> Applies {
        match self {
            Applies::Yes => Applies::No,
            Applies::No => Applies::Yes,
            Applies::Perhaps => Applies::Perhaps,
        }
    }
}

/// Whether a queue policy allows `account` the SQS `action` on the queue `arn`, evaluated as
/// AWS evaluates it: an owner-only action never; else an explicit Deny that may apply wins;
/// else an Allow that surely applies allows. Actions, resources and principals may be lists,
/// wildcards (`sqs:Delete*`) or their `Not` forms.
pub fn allows(policy: &str, account: &str, action: &str, arn: &str) -> bool {
    if OWNER_ONLY.contains(&action) {
        return false;
    }
    let Ok(document) = serde_json::from_str::<Value>(policy) else {
        return false;
    };
    let statements: Vec<&Value> = match &document["Statement"] {
        Value::Array(all) => all.iter().collect(),
        one @ Value::Object(_) => vec![one],
        _ => return false,
    };
    let action = policy_action(action);
    let applies = |statement: &Value| {
        let condition = if statement.get("Condition").is_some() {
            Applies::Perhaps
        } else {
            Applies::Yes
        };
        condition
            .and(principal_applies(statement, account))
            .and(element_applies(statement, "Action", |p| {
                action_matches(p, action)
            }))
            .and(element_applies(statement, "Resource", |p| {
                glob(p, arn, false)
            }))
    };
    // Only `"Effect": "Allow"` exactly allows; any other effect (a `"deny"`, a typo) is read
    // as a Deny, so a statement the server cannot read never opens anything.
    let allow = |s: &Value| s["Effect"].as_str() == Some("Allow");
    let denied = statements
        .iter()
        .any(|s| !allow(s) && applies(s) != Applies::No);
    !denied
        && statements
            .iter()
            .any(|s| allow(s) && applies(s) == Applies::Yes)
}

/// `Action`/`NotAction` (or `Resource`/`NotResource`) of a statement against `matches`; a
/// statement with neither, or with a member that is not text, perhaps applies (it denies,
/// never allows).
fn element_applies(statement: &Value, name: &str, matches: impl Fn(&str) -> bool) -> Applies {
    if let Some(value) = statement.get(name) {
        member_applies(value, &matches)
    } else if let Some(value) = statement.get(format!("Not{name}")) {
        member_applies(value, &matches).not()
    } else {
        Applies::Perhaps
    }
}

/// A member that is one string or a list of strings; anything else perhaps applies.
fn member_applies(value: &Value, matches: impl Fn(&str) -> bool) -> Applies {
    match value {
        Value::String(_) | Value::Array(_) if readable(value) => {
            Applies::of(any_matches(value, matches))
        }
        _ => Applies::Perhaps,
    }
}

/// Whether a member is one string or a list of nothing but strings.
fn readable(value: &Value) -> bool {
    match value {
        Value::String(_) => true,
        Value::Array(all) => all.iter().all(Value::is_string),
        _ => false,
    }
}

fn principal_applies(statement: &Value, account: &str) -> Applies {
    if let Some(principal) = statement.get("Principal") {
        names_principal(principal, account)
    } else if let Some(principal) = statement.get("NotPrincipal") {
        names_principal(principal, account).not()
    } else {
        Applies::Perhaps
    }
}

/// Whether a principal names the account: `*`, the account id, its root ARN. Anything of the
/// account's narrower than the account (an IAM user or role, an STS session, another
/// partition's ARN) is perhaps the caller (a key here is its account's, no narrower), and so
/// is a principal of a form this server does not read (`CanonicalUser`, a number); a
/// `Service` principal is never an account's key.
fn names_principal(principal: &Value, account: &str) -> Applies {
    let root = format!("arn:aws:iam::{account}:root");
    let inside = format!("::{account}:");
    let one = |p: &str| {
        if p == "*" || p == account || p == root {
            Applies::Yes
        } else if p.starts_with("arn:") && p.contains(&inside) {
            Applies::Perhaps
        } else {
            Applies::No
        }
    };
    let best = |all: Vec<Applies>| {
        if all.contains(&Applies::Yes) {
            Applies::Yes
        } else if all.contains(&Applies::Perhaps) {
            Applies::Perhaps
        } else {
            Applies::No
        }
    };
    // A form AWS would not take (an account as a number, or as the whole Principal) is read
    // only far enough to deny.
    let at_most_perhaps = |applies: Applies| {
        if applies == Applies::No {
            Applies::No
        } else {
            Applies::Perhaps
        }
    };
    let text = |value: &Value| match value {
        Value::String(p) => one(p),
        Value::Number(n) => at_most_perhaps(one(&n.to_string())),
        _ => Applies::Perhaps,
    };
    let member = |value: &Value| match value {
        Value::Array(all) => best(all.iter().map(text).collect()),
        one_value => text(one_value),
    };
    match principal {
        Value::String(p) if p == "*" => Applies::Yes,
        Value::String(p) => at_most_perhaps(one(p)),
        Value::Object(map) => best(
            map.iter()
                .map(|(kind, value)| match kind.as_str() {
                    "AWS" => member(value),
                    "Service" => Applies::No,
                    _ => Applies::Perhaps,
                })
                .collect(),
        ),
        _ => Applies::Perhaps,
    }
}

/// Whether a policy's action (`SQS:SendMessage`, `sqs:Delete*`, `sqs:*`, `*`) covers the
/// action; the service prefix and the name are matched without regard to case.
fn action_matches(pattern: &str, action: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    let Some((service, name)) = pattern.split_once(':') else {
        return false;
    };
    service.eq_ignore_ascii_case("sqs") && glob(name, action, true)
}

/// IAM's wildcards: `*` any run of characters, `?` any one.
fn glob(pattern: &str, text: &str, ignore_case: bool) -> bool {
    let fold = |c: char| {
        if ignore_case {
            c.to_ascii_lowercase()
        } else {
            c
        }
    };
    let pattern: Vec<char> = pattern.chars().map(fold).collect();
    let text: Vec<char> = text.chars().map(fold).collect();
    // Classic two-pointer matching with backtracking to the last star.
    let (mut p, mut t, mut star, mut mark) = (0, 0, None, 0);
    while t < text.len() {
        if p < pattern.len() && pattern[p] == '*' {
            star = Some(p);
            mark = t;
            p += 1;
        } else if p < pattern.len() && (pattern[p] == '?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if let Some(s) = star {
            p = s + 1;
            mark += 1;
            t = mark;
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
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

    const BETA: &str = "222222222222";

    #[test]
    fn the_owners_actions_are_never_granted_to_another_account() {
        let everything =
            policy(r#"{"Effect":"Allow","Principal":"*","Action":"*","Resource":"*"}"#);
        for action in super::OWNER_ONLY {
            assert!(!allows(&everything, BETA, action, ARN), "{action}");
        }
        assert!(allows(&everything, BETA, "ReceiveMessage", ARN));
        assert!(allows(&everything, BETA, "PurgeQueue", ARN));
    }

    #[test]
    fn a_deny_denies_whatever_form_it_takes() {
        let allow_all = r#"{"Effect":"Allow","Principal":{"AWS":"222222222222"},"Action":"sqs:*","Resource":"*"}"#;
        let with = |deny: &str| policy(&format!("{allow_all},{deny}"));
        // Wildcards in the action.
        let p = with(
            r#"{"Effect":"Deny","Principal":"*","Action":["sqs:Delete*","sqs:Purge*"],"Resource":"*"}"#,
        );
        assert!(!allows(&p, BETA, "PurgeQueue", ARN));
        assert!(!allows(&p, BETA, "DeleteMessage", ARN));
        assert!(
            !allows(&p, BETA, "DeleteMessageBatch", ARN),
            "a batch is its action"
        );
        assert!(allows(&p, BETA, "SendMessage", ARN));
        // A condition the server cannot evaluate: the Deny holds.
        let p = with(
            r#"{"Effect":"Deny","Principal":"*","Action":"sqs:PurgeQueue","Resource":"*","Condition":{"IpAddress":{"aws:SourceIp":"10.0.0.0/8"}}}"#,
        );
        assert!(!allows(&p, BETA, "PurgeQueue", ARN));
        // NotAction: everything but receiving is denied.
        let p = with(
            r#"{"Effect":"Deny","Principal":"*","NotAction":"sqs:ReceiveMessage","Resource":"*"}"#,
        );
        assert!(allows(&p, BETA, "ReceiveMessage", ARN));
        assert!(!allows(&p, BETA, "SendMessage", ARN));
        // NotPrincipal: everyone but another account is denied.
        let p = with(
            r#"{"Effect":"Deny","NotPrincipal":{"AWS":"333333333333"},"Action":"sqs:*","Resource":"*"}"#,
        );
        assert!(!allows(&p, BETA, "SendMessage", ARN));
        // A user of the account is perhaps the caller: enough to deny, not to allow.
        let p = with(
            r#"{"Effect":"Deny","Principal":{"AWS":"arn:aws:iam::222222222222:user/ops"},"Action":"sqs:SendMessage","Resource":"*"}"#,
        );
        assert!(!allows(&p, BETA, "SendMessage", ARN));
        let p = policy(
            r#"{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::222222222222:user/ops"},"Action":"sqs:*","Resource":"*"}"#,
        );
        assert!(!allows(&p, BETA, "SendMessage", ARN));
        // Wildcards in the resource.
        let p = policy(
            r#"{"Effect":"Allow","Principal":"*","Action":"sqs:SendMessage","Resource":"arn:aws:sqs:*:000000000000:q*"}"#,
        );
        assert!(allows(&p, BETA, "SendMessage", ARN));
        assert!(allows(&p, BETA, "SendMessageBatch", ARN));
        assert!(!allows(
            &p,
            BETA,
            "SendMessage",
            "arn:aws:sqs:us-east-1:000000000000:other"
        ));
    }

    #[test]
    fn iams_wildcards_match_as_globs() {
        use super::glob;
        assert!(glob("Delete*", "DeleteMessageBatch", false));
        assert!(glob("*Message", "SendMessage", false));
        assert!(glob("S?nd*", "SendMessage", false));
        assert!(!glob("Delete*", "PurgeQueue", false));
        assert!(glob("delete*", "DeleteQueue", true));
        assert!(!glob("delete*", "DeleteQueue", false));
        assert!(glob("*", "", false));
        assert!(!glob("a*b", "ac", false));
        assert!(glob("a*", "a*b", false), "a star in the text is only text");
    }

    #[test]
    fn a_deny_the_server_cannot_read_still_denies() {
        let allow_all = r#"{"Effect":"Allow","Principal":{"AWS":"222222222222"},"Action":"sqs:*","Resource":"*"}"#;
        let with = |deny: &str| policy(&format!("{allow_all},{deny}"));
        for deny in [
            r#"{"Effect":"deny","Principal":"*","Action":"sqs:*","Resource":"*"}"#,
            r#"{"Effect":"Deny","Principal":"*","Action":"sqs:*"}"#,
            r#"{"Effect":"Deny","Action":"sqs:*","Resource":"*"}"#,
            r#"{"Effect":"Deny","Principal":{"AWS":222222222222},"Action":"sqs:*","Resource":"*"}"#,
            r#"{"Effect":"Deny","Principal":"222222222222","Action":"sqs:*","Resource":"*"}"#,
            r#"{"Effect":"Deny","Principal":{"AWS":"arn:aws:sts::222222222222:assumed-role/r/s"},"Action":"sqs:*","Resource":"*"}"#,
            r#"{"Effect":"Deny","Principal":{"CanonicalUser":"abc"},"Action":"sqs:*","Resource":"*"}"#,
            r#"{"Effect":"Deny","Principal":"*","Action":7,"Resource":"*"}"#,
        ] {
            assert!(!allows(&with(deny), BETA, "SendMessage", ARN), "{deny}");
        }
        // The same forms never allow.
        let p = policy(
            r#"{"Effect":"Allow","Principal":{"CanonicalUser":"abc"},"Action":"sqs:*","Resource":"*"}"#,
        );
        assert!(!allows(&p, BETA, "SendMessage", ARN));
        let p = policy(r#"{"Effect":"allow","Principal":"*","Action":"sqs:*","Resource":"*"}"#);
        assert!(!allows(&p, BETA, "SendMessage", ARN));
        let p = policy(
            r#"{"Effect":"Allow","Principal":{"Service":"sns.amazonaws.com"},"Action":"sqs:*","Resource":"*"}"#,
        );
        assert!(!allows(&p, BETA, "SendMessage", ARN));
    }
}
