//! FIFO queues: one message group's messages run one at a time, in the order received
//! (sequence-number order), across receives; different groups run side by side. When a
//! message of a group does not succeed, the group's later messages already received are
//! released at once, never run ahead of it (as Powertools' `skipGroupOnError` does).

use std::collections::HashMap;

use tokio::sync::watch;

/// Each group's last message handed out: the next one of the group waits for its verdict.
#[derive(Default)]
pub struct Groups {
    tails: HashMap<String, watch::Receiver<Option<bool>>>,
}

impl Groups {
    /// The turn of the next message of `group`: it waits for the message before it.
    pub fn next(&mut self, group: &str) -> Turn {
        // Groups whose last message is over need no entry.
        self.tails.retain(|_, tail| tail.borrow().is_none());
        let (done, tail) = watch::channel(None);
        let previous = self.tails.insert(group.to_string(), tail);
        Turn {
            previous,
            done,
            published: false,
        }
    }
}

/// One message's place in its group.
pub struct Turn {
    previous: Option<watch::Receiver<Option<bool>>>,
    done: watch::Sender<Option<bool>>,
    published: bool,
}

impl Turn {
    /// Waits until the message before it in the group is over: true if it succeeded.
    pub async fn wait(&mut self) -> bool {
        let Some(previous) = &mut self.previous else {
            return true;
        };
        match previous.wait_for(Option::is_some).await {
            Ok(verdict) => verdict.unwrap_or(false),
            // It ended without a verdict (stopped, or a task that died): not a success.
            Err(_) => false,
        }
    }

    /// This message is over: `succeeded` lets the group's next message run.
    pub fn finish(mut self, succeeded: bool) {
        self.published = true;
        let _ = self.done.send(Some(succeeded));
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if !self.published {
            let _ = self.done.send(Some(false));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_group_runs_in_turn_and_a_failure_holds_back_the_rest() {
        let mut groups = Groups::default();
        let mut first = groups.next("g");
        let mut second = groups.next("g");
        let mut other = groups.next("h");
        assert!(first.wait().await && other.wait().await);
        let waiting = tokio::spawn(async move { (second.wait().await, second) });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "the second waits for the first");
        first.finish(false);
        let (went, second) = waiting.await.unwrap();
        assert!(!went, "a failure holds the rest back");
        let mut third = groups.next("g");
        drop(second);
        assert!(
            !third.wait().await,
            "dropped without a verdict is not a success"
        );
        third.finish(true);
        let mut fourth = groups.next("g");
        assert!(fourth.wait().await);
    }
}
