//! Telling a lost lease from a passing failure.

use aws_sdk_sqs::error::ProvideErrorMetadata;

/// The error codes that mean our receipt handle no longer holds the message: someone else may
/// own it now, so extending is impossible and the work should stop.
const LOST: &[&str] = &[
    "ReceiptHandleIsInvalid",
    "AWS.SimpleQueueService.MessageNotInflight",
    "MessageNotInflight",
    "InvalidParameterValue",
];

/// Whether an SDK error says the lease is lost (rather than a transient failure to retry).
pub fn is_lost_lease<E: ProvideErrorMetadata>(error: &E) -> bool {
    error.code().is_some_and(|code| LOST.contains(&code))
}

/// One readable line for an SDK error, for a log: the service's code and message when it
/// answered, else the chain of causes (a timeout, a refused connection), each's `Display`
/// joined by ": ". Never the `Debug` form, which runs to some 1,500 characters of raw
/// response and extensions (the SDK's `DisplayErrorContext` ends with it too).
pub fn one_line<E: ProvideErrorMetadata + std::error::Error>(error: &E) -> String {
    match (error.code(), error.message()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code.to_string(),
        _ => {
            let mut line = error.to_string();
            let mut cause = error.source();
            while let Some(inner) = cause {
                line.push_str(": ");
                line.push_str(&inner.to_string());
                cause = inner.source();
            }
            line
        }
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_sqs::config::http::HttpResponse;
    use aws_sdk_sqs::error::{ErrorMetadata, SdkError};
    use aws_sdk_sqs::operation::change_message_visibility::ChangeMessageVisibilityError;
    use aws_smithy_types::body::SdkBody;

    use super::*;

    fn refused(code: &str, message: &str) -> SdkError<ChangeMessageVisibilityError, HttpResponse> {
        let meta = ErrorMetadata::builder().code(code).message(message).build();
        let raw = HttpResponse::new(
            400.try_into().expect("a status"),
            SdkBody::from("<a long raw response the log must not carry>"),
        );
        SdkError::service_error(ChangeMessageVisibilityError::generic(meta), raw)
    }

    #[test]
    fn a_lost_lease_is_logged_as_its_code_and_message_on_one_line() {
        let error = refused("ReceiptHandleIsInvalid", "The receipt handle has expired.");
        assert!(is_lost_lease(&error));
        assert_eq!(
            one_line(&error),
            "ReceiptHandleIsInvalid: The receipt handle has expired."
        );
        // What it replaced: the Debug form, with the raw response in it.
        assert!(format!("{error:?}").contains("long raw response"));
    }

    #[test]
    fn an_error_without_an_answer_is_its_causes_on_one_line() {
        let error: SdkError<ChangeMessageVisibilityError, HttpResponse> =
            SdkError::timeout_error("no answer in 5 s");
        assert_eq!(one_line(&error), "request has timed out: no answer in 5 s");
    }
}
