//! Drawing processing times, and the database's slowdown.

use rand::rngs::StdRng;
use rand::Rng;
use rand_distr::{Distribution, Exp, LogNormal};

use crate::scenario::{Database, Work};

/// Draws unloaded processing times, in seconds.
pub struct WorkModel {
    work: Work,
}

impl WorkModel {
    pub fn new(work: &Work) -> WorkModel {
        WorkModel { work: work.clone() }
    }

    pub fn draw(&self, rng: &mut StdRng) -> f64 {
        let w = &self.work;
        let s = match w.kind.as_str() {
            "fixed" => w.mean_s,
            "exponential" => Exp::new(1.0 / w.mean_s.max(1e-6))
                .map(|d| d.sample(rng))
                .unwrap_or(w.mean_s),
            "lognormal" => LogNormal::new(w.median_s.max(1e-6).ln(), w.sigma.max(0.0))
                .map(|d| d.sample(rng))
                .unwrap_or(w.median_s),
            _ => quantile(w, rng.random::<f64>()),
        };
        s.max(0.001)
    }
}

/// Inverse of the piecewise-linear distribution through the given quantiles.
fn quantile(w: &Work, u: f64) -> f64 {
    let points = w.quantile_points();
    let max = points[5].1;
    for pair in points.windows(2) {
        let ((q0, v0), (q1, v1)) = (pair[0], pair[1]);
        if u <= q1 {
            return v0 + (v1 - v0) * (u - q0) / (q1 - q0);
        }
    }
    max
}

/// The slowdown of a new execution when `running` executions (including it) share the
/// database.
pub fn load_factor(db: &Database, running: u32) -> f64 {
    let capacity = db.capacity.max(1) as f64;
    1.0 + db.load_slope * ((running as f64 - capacity).max(0.0) / capacity)
}

/// The slowdown when `copies` executions of one message fight over the same rows: they
/// serialise on the row locks, so each copy takes about (1 + contention x (copies - 1)) times
/// as long.
pub fn contention(db: &Database, copies: f64) -> f64 {
    1.0 + db.contention * (copies - 1.0).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// Seed 000's transcoding quantiles, with the given maximum.
    fn transcoding(max_s: f64) -> Work {
        Work {
            kind: "quantiles".into(),
            p50_s: 22.0,
            p90_s: 95.0,
            p99_s: 310.0,
            p999_s: 540.0,
            max_s,
            ..Work::default()
        }
    }

    #[test]
    fn quantile_work_follows_its_quantiles() {
        let w = transcoding(480.0);
        let model = WorkModel::new(&w);
        let mut rng = StdRng::seed_from_u64(1);
        let mut draws: Vec<f64> = (0..100_000).map(|_| model.draw(&mut rng)).collect();
        draws.sort_by(f64::total_cmp);
        let at = |q: f64| draws[(q * draws.len() as f64) as usize];
        assert!((at(0.5) - 22.0).abs() < 1.0, "{}", at(0.5));
        assert!((at(0.9) - 95.0).abs() < 8.0, "{}", at(0.9));
        assert!((at(0.99) - 310.0).abs() < 20.0, "{}", at(0.99));
    }

    /// The sweep's load is arrivals against workers / the mean: for quantile work, the mean
    /// of the piecewise-linear distribution, not its p50.
    #[test]
    fn the_mean_of_quantile_work_is_the_mean_of_its_draws() {
        let w = transcoding(600.0);
        let model = WorkModel::new(&w);
        let mut rng = StdRng::seed_from_u64(2);
        let n = 200_000;
        let drawn = (0..n).map(|_| model.draw(&mut rng)).sum::<f64>() / n as f64;
        assert!(
            (drawn - w.mean_s()).abs() / w.mean_s() < 0.02,
            "{drawn} against {}",
            w.mean_s()
        );
        assert!(w.mean_s() > 1.5 * w.p50_s);
    }

    #[test]
    fn load_slows_only_past_capacity() {
        let db = Database {
            capacity: 10,
            load_slope: 1.0,
            contention: 0.4,
        };
        assert_eq!(load_factor(&db, 10), 1.0);
        assert_eq!(load_factor(&db, 20), 2.0);
    }
}
