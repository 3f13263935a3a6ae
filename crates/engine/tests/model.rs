//! Model-based test: the engine's indexed queue against a naive reference that scans a list.
//!
//! Random sequences of sends, receives, deletes, visibility changes and clock steps must give
//! the same answers and the same counts from both, in both lease modes.

use std::sync::Arc;

use leasehold_engine::{
    Clock, Engine, EngineConfig, EngineError, LeaseMode, ManualClock, NewMessage, ReceiveRequest,
};
use proptest::prelude::*;

const RETENTION_S: u64 = 60;

#[derive(Clone, Debug)]
enum Op {
    Send { delay_s: u32 },
    Receive { max: u32, visibility_s: Option<u32> },
    Delete { pick: usize },
    ChangeVisibility { pick: usize, seconds: u32 },
    Advance { ms: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u32..3).prop_map(|delay_s| Op::Send { delay_s }),
        3 => (1u32..4, proptest::option::of(0u32..6))
            .prop_map(|(max, visibility_s)| Op::Receive { max, visibility_s }),
        2 => any::<usize>().prop_map(|pick| Op::Delete { pick }),
        2 => (any::<usize>(), 0u32..8).prop_map(|(pick, seconds)| Op::ChangeVisibility { pick, seconds }),
        3 => (0u64..12_000).prop_map(|ms| Op::Advance { ms }),
    ]
}

/// The reference: every message in a list, every question answered by a scan.
#[derive(Debug)]
struct ModelMessage {
    body: String,
    sent_ms: u64,
    visible_at: u64,
    receive_count: u32,
    lease_start: u64,
    gone: bool,
}

struct Model {
    mode: LeaseMode,
    messages: Vec<ModelMessage>,
}

impl Model {
    fn expire(&mut self, now: u64) {
        for m in &mut self.messages {
            if m.sent_ms + RETENTION_S * 1000 <= now {
                m.gone = true;
            }
        }
    }

    fn receive(&mut self, now: u64, max: u32, visibility_s: u32) -> Vec<(String, u32, usize)> {
        let mut out = Vec::new();
        for (index, m) in self.messages.iter_mut().enumerate() {
            if out.len() as u32 == max {
                break;
            }
            if !m.gone && m.visible_at <= now {
                m.receive_count += 1;
                m.lease_start = now;
                m.visible_at = now + u64::from(visibility_s) * 1000;
                out.push((m.body.clone(), m.receive_count, index));
            }
        }
        out
    }

    fn live(m: &ModelMessage, receive_no: u32, now: u64) -> bool {
        receive_no == m.receive_count && m.visible_at > now
    }

    fn delete(&mut self, now: u64, index: usize, receive_no: u32) -> Option<(bool, bool)> {
        let mode = self.mode;
        let m = &mut self.messages[index];
        if m.gone {
            return Some((false, false));
        }
        let late = !Self::live(m, receive_no, now);
        let removed = !late || mode == LeaseMode::Aws;
        m.gone |= removed;
        Some((removed, late))
    }

    fn change(
        &mut self,
        now: u64,
        index: usize,
        receive_no: u32,
        seconds: u32,
    ) -> Result<(), &'static str> {
        let mode = self.mode;
        let m = &mut self.messages[index];
        if m.gone {
            return Err("not available");
        }
        if mode == LeaseMode::Strict && !Self::live(m, receive_no, now) {
            return Err("not in flight");
        }
        if (now - m.lease_start) / 1000 + u64::from(seconds) > 43_200 {
            return Err("beyond limit");
        }
        m.visible_at = now + u64::from(seconds) * 1000;
        Ok(())
    }

    fn counts(&self, now: u64) -> (usize, usize, usize) {
        let live = self.messages.iter().filter(|m| !m.gone);
        let (mut visible, mut in_flight, mut delayed) = (0, 0, 0);
        for m in live {
            if m.visible_at <= now {
                visible += 1;
            } else if m.receive_count > 0 {
                in_flight += 1;
            } else {
                delayed += 1;
            }
        }
        (visible, in_flight, delayed)
    }
}

fn error_kind(e: &EngineError) -> &'static str {
    match e {
        EngineError::MessageNotAvailable(_) => "not available",
        EngineError::MessageNotInflight(_) => "not in flight",
        EngineError::InvalidParameterValue(_) => "beyond limit",
        _ => "other",
    }
}

fn run(mode: LeaseMode, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let clock = ManualClock::new(1_000_000);
    let config = EngineConfig {
        lease_mode: mode,
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(Arc::new(clock.clone()), config);
    let attrs = [
        ("VisibilityTimeout".to_string(), "3".to_string()),
        (
            "MessageRetentionPeriod".to_string(),
            RETENTION_S.to_string(),
        ),
    ];
    engine.create_queue("q", &attrs, &[]).unwrap();
    let mut model = Model {
        mode,
        messages: Vec::new(),
    };
    // Handles issued so far, with the model's message index and receive number.
    let mut handles: Vec<(String, usize, u32)> = Vec::new();
    for op in ops {
        let now = clock.now_ms();
        model.expire(now);
        match op {
            Op::Send { delay_s } => {
                let body = model.messages.len().to_string();
                let mut message = NewMessage::new(body.clone());
                message.delay_s = Some(delay_s);
                engine.send("q", message).unwrap();
                model.messages.push(ModelMessage {
                    body,
                    sent_ms: now,
                    visible_at: now + u64::from(delay_s) * 1000,
                    receive_count: 0,
                    lease_start: 0,
                    gone: false,
                });
            }
            Op::Receive { max, visibility_s } => {
                let request = ReceiveRequest {
                    max_messages: max,
                    visibility_s,
                    attempt_id: None,
                };
                let got = engine.receive("q", &request).unwrap();
                let expected = model.receive(now, max, visibility_s.unwrap_or(3));
                let got_summary: Vec<_> = got
                    .iter()
                    .map(|d| (d.body.to_string(), d.receive_count))
                    .collect();
                let expected_summary: Vec<_> =
                    expected.iter().map(|(b, c, _)| (b.clone(), *c)).collect();
                prop_assert_eq!(got_summary, expected_summary);
                for (delivery, (_, receive_no, index)) in got.into_iter().zip(expected) {
                    handles.push((delivery.receipt_handle, index, receive_no));
                }
            }
            Op::Delete { pick } if !handles.is_empty() => {
                let (handle, index, receive_no) = handles[pick % handles.len()].clone();
                let outcome = engine.delete_message("q", &handle).unwrap();
                let expected = model.delete(now, index, receive_no).unwrap();
                prop_assert_eq!((outcome.removed, outcome.late), expected);
            }
            Op::ChangeVisibility { pick, seconds } if !handles.is_empty() => {
                let (handle, index, receive_no) = handles[pick % handles.len()].clone();
                let got = engine
                    .change_visibility("q", &handle, seconds)
                    .map_err(|e| error_kind(&e));
                prop_assert_eq!(got, model.change(now, index, receive_no, seconds));
            }
            Op::Advance { ms } => clock.advance_ms(ms),
            _ => {}
        }
        let now = clock.now_ms();
        model.expire(now);
        let c = engine.counts("q").unwrap();
        prop_assert_eq!((c.visible, c.not_visible, c.delayed), model.counts(now));
        prop_assert_eq!(engine.check_invariants(), Ok(()));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_engine_matches_the_reference_model_in_aws_mode(ops in proptest::collection::vec(op(), 1..120)) {
        run(LeaseMode::Aws, ops)?;
    }

    #[test]
    fn the_engine_matches_the_reference_model_in_strict_mode(ops in proptest::collection::vec(op(), 1..120)) {
        run(LeaseMode::Strict, ops)?;
    }
}
