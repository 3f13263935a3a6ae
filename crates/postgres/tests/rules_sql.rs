//! The rulebook's predicates that SQL evaluates itself (`migrations/V8__rulebook.sql`) agree
//! with the Rust rules they stand for, on generated inputs around every boundary.

mod common;

use common::{Schema, URL};
use leasehold_engine::rules::{self, MessageLease};
use rand::{Rng, SeedableRng};

/// A value near one of the boundaries the predicates compare at, or anywhere.
fn near(rng: &mut impl Rng, around: &[i64], spread: i64) -> i64 {
    if rng.random_bool(0.8) {
        around[rng.random_range(0..around.len())] + rng.random_range(-spread..=spread)
    } else {
        rng.random_range(0..i64::from(i32::MAX))
    }
}

/// The generated inputs, column by column: receive count, the handle's receive number,
/// visible_ms, released, and the maxReceiveCount SQL compares with.
#[derive(Default)]
struct Cases(Vec<i32>, Vec<i32>, Vec<i64>, Vec<bool>, Vec<i32>);

#[tokio::test]
async fn postgres_sql_predicates_decide_as_the_rust_rules() {
    let schema = Schema::new().await;
    let server = schema.server().await;
    let config = format!("{URL}?options=-c%20search_path%3D{}", schema.0);
    let (client, connection) = tokio_postgres::connect(&config, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut rng = rand::rngs::StdRng::seed_from_u64(33);
    let now: i64 = 1_000_000;
    let n = 20_000;
    let mut cases = Cases::default();
    for _ in 0..n {
        let receive_count = near(&mut rng, &[0, 1, 5], 2).clamp(0, i64::from(i32::MAX));
        cases.0.push(i32::try_from(receive_count).unwrap());
        let receive_no = near(&mut rng, &[receive_count], 1).clamp(0, i64::from(i32::MAX));
        cases.1.push(i32::try_from(receive_no).unwrap());
        cases.2.push(near(&mut rng, &[now], 2).max(0));
        cases.3.push(rng.random_bool(0.5));
        let max = if rng.random_bool(0.2) {
            None
        } else {
            Some(u32::try_from(near(&mut rng, &[receive_count], 1).clamp(1, 1000)).unwrap())
        };
        cases
            .4
            .push(i32::try_from(rules::max_receives_for_sql(max)).unwrap());
    }
    let rows = client
        .query(
            "SELECT leasehold_lease_live(c, r, v, $6), leasehold_lease_ran_out(c, rel, v, $6),
                    leasehold_exhausted(c, m), leasehold_group_eligible(v, $6)
             FROM unnest($1::integer[], $2::integer[], $3::bigint[], $4::boolean[],
                         $5::integer[]) WITH ORDINALITY AS t(c, r, v, rel, m, n)
             ORDER BY n",
            &[&cases.0, &cases.1, &cases.2, &cases.3, &cases.4, &now],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), n);
    let now = u64::try_from(now).unwrap();
    let mut seen = [[0; 2]; 4];
    for (i, row) in rows.iter().enumerate() {
        let lease = MessageLease {
            receive_count: cases.0[i].unsigned_abs(),
            started_ms: 0,
            hidden_until_ms: cases.2[i].unsigned_abs(),
            released: cases.3[i],
        };
        let max = cases.4[i].unsigned_abs();
        let max = (max != rules::NO_MAX_RECEIVES).then_some(max);
        let expected = [
            lease.is_live(cases.1[i].unsigned_abs(), now),
            lease.ran_out(now),
            rules::exhausted(lease.receive_count, max),
            rules::group_eligible(&lease, now),
        ];
        for (k, want) in expected.into_iter().enumerate() {
            let got: bool = row.get(k);
            assert_eq!(got, want, "predicate {k} on {lease:?}, case {i}");
            seen[k][usize::from(got)] += 1;
        }
    }
    // Every predicate was seen both true and false: the cases reach the boundaries.
    assert!(seen.iter().flatten().all(|&count| count > 100), "{seen:?}");
    drop(client);
    schema.drop_all([server]).await;
}
