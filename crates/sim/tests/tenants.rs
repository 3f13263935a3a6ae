//! The noisy tenant on the real engine (issue 34): the shipped scenarios' other traffic waits
//! no longer than seconds while one tenant floods the queue or sends slow work, as a fair
//! queue; and minutes behind it when the same traffic carries no group id.

use leasehold_sim::{run, Scenario, TenantDwell, OTHERS};

fn dwell(name: &str, fair: bool, seed: u64) -> Vec<TenantDwell> {
    let path = format!("{}/../../scenarios/{name}.toml", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut scenario = Scenario::from_toml(&text).unwrap();
    scenario.queue.fair = fair;
    scenario.seed = seed;
    run(&scenario, &mut |_| {}).unwrap().summary.tenants
}

fn of<'d>(dwell: &'d [TenantDwell], tenant: &str) -> &'d TenantDwell {
    dwell.iter().find(|d| d.tenant == tenant).unwrap()
}

#[test]
fn a_flood_delays_the_others_by_minutes_unless_the_queue_is_fair() {
    for seed in 1..=3 {
        let fair = dwell("noisy-tenant-flood", true, seed);
        let unfair = dwell("noisy-tenant-flood", false, seed);
        assert!(of(&fair, OTHERS).p99_s < 2.0, "{fair:?}");
        assert!(of(&unfair, OTHERS).p99_s > 100.0, "{unfair:?}");
        // The flood waits longer instead: nothing of it is dropped.
        assert!(
            of(&fair, "flood").p50_s > of(&unfair, "flood").p50_s,
            "{fair:?}"
        );
        assert_eq!(of(&fair, "flood").received, of(&unfair, "flood").received);
    }
}

#[test]
fn a_tenant_of_slow_work_delays_only_itself_on_a_fair_queue() {
    for seed in 1..=3 {
        let fair = dwell("noisy-tenant-slow", true, seed);
        let unfair = dwell("noisy-tenant-slow", false, seed);
        assert!(of(&fair, OTHERS).p50_s < 10.0, "{fair:?}");
        assert!(of(&fair, OTHERS).p99_s < 30.0, "{fair:?}");
        assert!(of(&unfair, OTHERS).p50_s > 30.0, "{unfair:?}");
        assert!(of(&fair, "slow").p50_s > 60.0, "{fair:?}");
    }
}
