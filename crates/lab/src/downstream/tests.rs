//! The downstream on a real PostgreSQL: the slots hold a fleet of processes to the
//! database's capacity, and a function's timeout ends an execution and marks it.

use std::time::{Duration, Instant};

use super::*;

const POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// A run's schema is named for its process: the tests here take turns.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn scenario(capacity: u32) -> Scenario {
    let text = format!(
        "name = \"d\"\nduration_s = 10\n[database]\ncapacity = {capacity}\ncontention = 0\n"
    );
    Scenario::from_toml(&text).unwrap()
}

/// Four consumer processes' executions of 0.4 s on a database of two slots: two at a time,
/// so the last end about 0.8 s after the first start, never sooner.
#[tokio::test]
async fn the_slots_hold_a_fleet_of_processes_to_the_databases_capacity() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let downstream = Downstream::create(POSTGRES_URL, &scenario(2))
        .await
        .unwrap();
    let reach = downstream.reach();
    let mut executors = Vec::new();
    for worker in 0..4 {
        executors.push(Executor::for_process(&reach, worker, None).await.unwrap());
    }
    let started = Instant::now();
    let [a, b, c, d] = &executors[..] else {
        unreachable!("four executors")
    };
    let runs = tokio::join!(
        a.execute("m0", 0.4),
        b.execute("m1", 0.4),
        c.execute("m2", 0.4),
        d.execute("m3", 0.4)
    );
    for result in [runs.0, runs.1, runs.2, runs.3] {
        result.unwrap();
    }
    let took = started.elapsed();
    downstream.drop_schema().await.unwrap();
    assert!(
        took >= Duration::from_millis(780),
        "{took:?}: more than two at once"
    );
    assert!(
        took < Duration::from_millis(1600),
        "{took:?}: the slots were not shared"
    );
}

/// Work past the function's timeout is ended there: answered `TimedOut`, its row marked
/// timed out and failed, and its write never made (the query was cancelled).
#[tokio::test]
async fn a_functions_timeout_ends_the_execution_and_marks_its_row() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let downstream = Downstream::create(POSTGRES_URL, &scenario(4))
        .await
        .unwrap();
    let origin = downstream.now().await.unwrap();
    let executor = Executor::for_process(&downstream.reach(), 0, Some(Duration::from_millis(200)))
        .await
        .unwrap();
    let started = Instant::now();
    let result = executor.execute("slow", 2.0).await;
    let took = started.elapsed();
    // The row is marked by the ledger's update, awaited before the answer.
    let rows = downstream.executions(origin).await.unwrap();
    let records = downstream
        .admin
        .query_one("SELECT count(*) FROM records", &[])
        .await
        .unwrap()
        .get::<_, i64>(0);
    downstream.drop_schema().await.unwrap();
    assert!(matches!(result, Err(LabError::TimedOut)), "{result:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert_eq!(rows.len(), 1);
    assert!(rows[0].timed_out && rows[0].failed_s.is_some() && rows[0].finished_s.is_none());
    assert_eq!(records, 0, "the cancelled work wrote its record");
}
