//! A tiny script language for engine tests: `check(script, expect![[...]])`.
//!
//! Each line is a command; the transcript records each command and what the engine answered.
//! Receipt handles are named h1, h2, ... in the order receives issue them.
//!
//! Commands: `create Q [Attr=Value..]`, `send Q BODY [delay=N] [group=G] [dedup=D]`,
//! `recv Q [max=N] [vis=N] [attempt=ID]`, `del Q hN`, `vis Q hN SECONDS`, `advance SECONDS`,
//! `counts Q`, `stats Q`, `purge Q`, `drop Q`, `attrs Q [Name..]`, `set Q Attr=Value..`,
//! `sources Q` (dead-letter sources), `move SRC [dest=Q] [rate=N]` (start a move task,
//! named t1, t2, ...), `cancel tN`, `tasks SRC`.

use std::sync::Arc;

use expect_test::Expect;
use leasehold_engine::{Engine, EngineConfig, LeaseMode, ManualClock, NewMessage, ReceiveRequest};

pub fn check(script: &str, expected: Expect) {
    check_mode(LeaseMode::Aws, script, expected)
}

#[allow(dead_code)] // each test binary uses a part of the helper
pub fn check_strict(script: &str, expected: Expect) {
    check_mode(LeaseMode::Strict, script, expected)
}

fn check_mode(mode: LeaseMode, script: &str, expected: Expect) {
    expected.assert_eq(&run(mode, script));
}

fn pairs(words: &[&str]) -> Vec<(String, String)> {
    words
        .iter()
        .map(|w| {
            let (k, v) = w.split_once('=').expect("Attr=Value");
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn text_option(words: &[&str], key: &str) -> Option<String> {
    words.iter().find_map(|w| {
        w.strip_prefix(key)
            .and_then(|rest| rest.strip_prefix('='))
            .map(str::to_string)
    })
}

fn option(words: &[&str], key: &str) -> Option<u32> {
    text_option(words, key).map(|v| v.parse().expect("a number"))
}

fn arn(name: &str) -> String {
    format!("arn:aws:sqs:us-east-1:000000000000:{name}")
}

pub fn run(mode: LeaseMode, script: &str) -> String {
    let clock = ManualClock::new(1_700_000_000_000);
    let config = EngineConfig {
        lease_mode: mode,
        receipt_key: [42; 16],
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(Arc::new(clock.clone()), config);
    let mut handles: Vec<String> = Vec::new();
    let mut tasks: Vec<String> = Vec::new();
    let mut out = String::new();
    for line in script.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let q = words.get(1).copied().unwrap_or("");
        let handle = |label: &str| -> String {
            let n: usize = label.trim_start_matches('h').parse().expect("hN");
            handles[n - 1].clone()
        };
        let reply: Result<String, _> = match words[0] {
            "create" => engine
                .create_queue(q, &pairs(&words[2..]), &[])
                .map(|_| "ok".into()),
            "drop" => engine.delete_queue(q).map(|_| "ok".into()),
            "set" => engine
                .set_attributes(q, &pairs(&words[2..]))
                .map(|_| "ok".into()),
            "purge" => engine.purge(q).map(|_| "ok".into()),
            "send" => {
                let mut message = NewMessage::new(words[2]);
                message.delay_s = option(&words, "delay");
                message.group_id = text_option(&words, "group");
                message.deduplication_id = text_option(&words, "dedup");
                engine
                    .send(q, message)
                    .map(|sent| match sent.sequence_number {
                        Some(seq) => format!("seq={seq}"),
                        None => "ok".into(),
                    })
            }
            "recv" => engine
                .receive(
                    q,
                    &ReceiveRequest {
                        max_messages: option(&words, "max").unwrap_or(10),
                        visibility_s: option(&words, "vis"),
                        attempt_id: text_option(&words, "attempt"),
                    },
                )
                .map(|deliveries| {
                    if deliveries.is_empty() {
                        engine.record_empty_receive(q);
                        return "(empty)".to_string();
                    }
                    let mut lines = Vec::new();
                    for d in deliveries {
                        // A replayed receive attempt gives back handles seen before.
                        let label = match handles.iter().position(|h| *h == d.receipt_handle) {
                            Some(i) => i + 1,
                            None => {
                                handles.push(d.receipt_handle.clone());
                                handles.len()
                            }
                        };
                        let from = d
                            .dead_letter_source_arn
                            .map(|a| format!(" from={}", a.rsplit(':').next().unwrap_or("")))
                            .unwrap_or_default();
                        lines.push(format!("{} rc={} h{label}{from}", d.body, d.receive_count));
                    }
                    lines.join(", ")
                }),
            "del" => engine.delete_message(q, &handle(words[2])).map(|o| {
                format!(
                    "{}{}",
                                        match (o.removed, o.late) {
                        (true, _) => "removed",
                        (false, true) => "kept",
                        (false, false) => "already gone",
                    },
                    if o.late { " (late)" } else { "" }
                )
            }),
            "vis" => engine
                .change_visibility(q, &handle(words[2]), words[3].parse().unwrap())
                .map(|_| "ok".into()),
            "advance" => {
                clock.advance_secs(q.parse().unwrap());
                Ok(format!(
                    "t+{}s",
                    (clock_now(&engine) - 1_700_000_000_000) / 1000
                ))
            }
            "counts" => engine.counts(q).map(|c| {
                format!(
                    "visible={} inflight={} delayed={}",
                    c.visible, c.not_visible, c.delayed
                )
            }),
                        "stats" => engine.stats(q).map(|s| format!("{s:?}")),
            "report" => engine.lease_report(q).map(|r| {
                let hold = r
                    .hold_total
                    .map(|h| format!("hold n={} p50={}ms p99={}ms max={}ms", h.count, h.p50, h.p99, h.max))
                    .unwrap_or_else(|| "hold none".into());
                let s = &r.stats;
                format!(
                    "{hold}; within={} late={} expired={} released={} extensions={} dlq={} dlq_after_late={}; receives {:?}; extensions/message {:?}; oldest {:?}ms",
                    s.deleted_within_lease,
                    s.late_deletes,
                    s.leases_expired,
                    s.released_early,
                    s.extensions,
                    s.dead_lettered,
                    s.dead_lettered_after_late_delete,
                    r.receive_count_histogram,
                    r.extensions_per_message,
                    r.oldest_message_age_ms
                )
            }),
            "attrs" => {
                let mut names: Vec<String> = words[2..].iter().map(|s| s.to_string()).collect();
                if names.is_empty() {
                    names.push("All".into());
                }
                engine.get_attributes(q, &names).map(|attrs| {
                    attrs
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                })
            }
            "sources" => engine
                .list_dead_letter_source_queues(q, None, None)
                .map(|page| page.names.join(" ")),
            "move" => engine
                .start_move_task(
                    &arn(q),
                    text_option(&words, "dest").map(|d| arn(&d)).as_deref(),
                    option(&words, "rate"),
                )
                .map(|handle| {
                    tasks.push(handle);
                    format!("t{}", tasks.len())
                }),
            "cancel" => {
                let n: usize = q.trim_start_matches('t').parse().expect("tN");
                engine
                    .cancel_move_task(&tasks[n - 1])
                    .map(|moved| format!("moved={moved}"))
            }
            "tasks" => engine.list_move_tasks(&arn(q), Some(10)).map(|list| {
                list.iter()
                    .map(|t| {
                        format!(
                            "{} moved={}/{}{}",
                            t.status.as_str(),
                            t.moved,
                            t.to_move,
                            t.failure_reason
                                .as_deref()
                                .map(|r| format!(" ({r})"))
                                .unwrap_or_default()
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            }),
            other => panic!("unknown script command {other}"),
        };
        let reply = reply.unwrap_or_else(|e| format!("error {e:?}"));
        if let Err(broken) = engine.check_invariants() {
            panic!("after `{line}`: {broken}");
        }
        out.push_str(&format!("{line:<28} -> {reply}\n"));
    }
    out
}

fn clock_now(engine: &Engine) -> u64 {
    engine.now_ms()
}
