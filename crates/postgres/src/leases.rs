//! Honest leases across the cluster. Each server measures what its own requests show (how
//! long a consumer held a message before deleting it, late and repeat deletes, expired and
//! released leases, heartbeats), in the engine's own types, and adds what it measured to the
//! database every couple of seconds (`leasehold_queue_stats`, `leasehold_lease_counts`,
//! histograms as counts that add up). The leases endpoint and `leasehold advise` read the
//! cluster's sum; `/metrics` shows this server's own measurements since it started, so
//! Prometheus sums the servers' counters and histograms without counting any twice.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use leasehold_backend::BackendError;
use leasehold_engine::rules::ChangeKind;
use leasehold_engine::{
    Counts, Delivery, EngineError, LeaseMetrics, LeaseReport, MetricsRecord, QueueCounts,
    QueueSettings, QueueStats, WindowedRecord,
};

use crate::handles::Found;
use crate::messages::ReceiveTally;
use crate::queues::decode;
use crate::sweep::SweepClock;
use crate::{cached, to_i64, to_u64, unavailable, Core};

type Result<T> = std::result::Result<T, BackendError>;

/// The counters, each a column of `leasehold_queue_stats` by its name.
const STATS: [&str; 12] = QueueStats::NAMES;

/// What one server measured about one queue.
#[derive(Default)]
pub(crate) struct Measured {
    pub(crate) stats: QueueStats,
    pub(crate) metrics: LeaseMetrics,
}

/// A delta ready for the database: the counters, and histogram rows (series, window, value,
/// count).
struct Delta {
    stats: QueueStats,
    rows: Vec<(&'static str, i64, i64, i64)>,
}

/// Deltas waiting for a database that did not answer, at most this many queues' worth.
const UNSENT_MAX: usize = 10_000;

#[derive(Default)]
pub(crate) struct Measurements {
    /// Not yet added to the cluster's.
    pending: Mutex<HashMap<String, Measured>>,
    /// Since this server started, for its `/metrics`.
    local: Mutex<HashMap<String, Measured>>,
    unsent: Mutex<Vec<(String, Delta)>>,
    clock: SweepClock,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Counters hold no invariant a panic could break halfway.
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Measurements {
    /// Records one observation about `queue` in this server's totals and in what it will
    /// add to the cluster's.
    pub(crate) fn record(&self, queue: &str, observe: impl Fn(&mut Measured)) {
        for map in [&self.pending, &self.local] {
            observe(lock(map).entry(queue.to_string()).or_default());
        }
    }

    fn take_deltas(&self) -> Vec<(String, Delta)> {
        let mut deltas = std::mem::take(&mut *lock(&self.unsent));
        for (queue, mut measured) in lock(&self.pending).drain() {
            let rows = measured
                .metrics
                .take_delta()
                .map(|record| rows(&record))
                .unwrap_or_default();
            deltas.push((
                queue,
                Delta {
                    stats: measured.stats,
                    rows,
                },
            ));
        }
        // One lock order on every server: queues by key, a queue's rows by their own key
        // (`write_deltas` upserts them in this order). Two servers flushing the same queues
        // in their maps' orders took the rows' locks in opposite orders and deadlocked.
        deltas.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, delta) in &mut deltas {
            delta.rows.sort_unstable();
        }
        deltas
    }
}

fn rows(record: &MetricsRecord) -> Vec<(&'static str, i64, i64, i64)> {
    let mut rows = Vec::new();
    let mut windowed = |series: &'static str, w: &WindowedRecord| {
        let windows = std::iter::once((-1, &w.total))
            .chain(w.recent.iter().map(|(start, c)| (to_i64(*start), c)));
        for (window, counts) in windows {
            for &(value, count) in counts {
                rows.push((series, window, to_i64(value), to_i64(count)));
            }
        }
    };
    windowed("hold", &record.hold);
    windowed("first_receive", &record.first_receive);
    for (series, map) in [
        ("receive_counts", &record.receive_counts),
        ("extensions", &record.extensions_per_message),
    ] {
        for (&key, &count) in map {
            rows.push((series, -1, i64::from(key), to_i64(count)));
        }
    }
    rows
}

fn record_of(rows: &[tokio_postgres::Row]) -> MetricsRecord {
    let mut record = MetricsRecord::default();
    let mut recent: BTreeMap<(&str, u64), Counts> = BTreeMap::new();
    for row in rows {
        let series: &str = row.get(0);
        let (window, value, count) = (row.get::<_, i64>(1), row.get(2), row.get(3));
        let (value, count): (i64, i64) = (value, count);
        let entry = (to_u64(value), to_u64(count));
        let key = u32::try_from(value).unwrap_or(u32::MAX);
        match (series, window) {
            ("hold", -1) => record.hold.total.push(entry),
            ("first_receive", -1) => record.first_receive.total.push(entry),
            ("hold", start) => recent
                .entry(("hold", to_u64(start)))
                .or_default()
                .push(entry),
            ("first_receive", start) => recent
                .entry(("first_receive", to_u64(start)))
                .or_default()
                .push(entry),
            ("receive_counts", _) => {
                record.receive_counts.insert(key, entry.1);
            }
            ("extensions", _) => {
                record.extensions_per_message.insert(key, entry.1);
            }
            _ => {}
        }
    }
    for ((series, start), counts) in recent {
        let windowed = match series {
            "hold" => &mut record.hold,
            _ => &mut record.first_receive,
        };
        windowed.recent.push((start, counts));
    }
    record
}

impl Core {
    /// A receive's measurements: what it leased, first receives' waits, leases that ran out,
    /// messages dead-lettered.
    pub(crate) fn measure_receive(
        &self,
        queue: &str,
        now: u64,
        deliveries: &[Delivery],
        tally: ReceiveTally,
    ) {
        if tally.replayed {
            return;
        }
        self.measurements.record(queue, |m| {
            m.stats.leases_expired += tally.leases_expired;
            for &(receives, late) in &tally.dead_lettered {
                m.metrics.count_dead_letter(&mut m.stats, receives, late);
            }
            for delivery in deliveries {
                let first = delivery.receive_count == 1;
                m.metrics
                    .count_lease(&mut m.stats, now, delivery.sent_ms, first);
            }
        });
    }

    /// Deletes' measurements, by the engine's own `LeaseMetrics::count_delete`. Whether a
    /// delete is an SDK's retry of one that removed the message is the cluster's to know
    /// (`leasehold_recent_deletes`, whichever server removed it): a retry counts nothing,
    /// in either map.
    pub(crate) fn measure_deletes(&self, queue: &str, now: u64, seen: &[crate::handles::Seen]) {
        for (receipt, found) in seen {
            if let Found::Gone { retried: true } = found {
                continue;
            }
            let found = found.row();
            self.measurements.record(queue, |m| {
                m.metrics
                    .count_delete(&mut m.stats, now, receipt, found.map(|f| f.seen));
                m.stats.leases_expired += u64::from(found.is_some_and(|f| f.expired_unseen));
            });
        }
    }

    /// Visibility changes' measurements: releases, heartbeats, and leases found run out.
    pub(crate) fn measure_changes(&self, queue: &str, changes: &[(ChangeKind, bool)]) {
        let count = |kind| changes.iter().filter(|(c, _)| *c == kind).count() as u64;
        let (released, extended) = (count(ChangeKind::Released), count(ChangeKind::Extended));
        let expired = changes.iter().filter(|(_, expired)| *expired).count() as u64;
        if released + extended + expired > 0 {
            self.measurements.record(queue, |m| {
                m.stats.released_early += released;
                m.stats.extensions += extended;
                m.stats.leases_expired += expired;
            });
        }
    }

    /// Adds what this server measured to the cluster's, every couple of seconds (`force`:
    /// now, before a report or at shutdown). What the database did not take waits for the
    /// next round.
    pub(crate) async fn flush_measurements(&self, force: bool) -> Result<()> {
        if !force && !self.measurements.clock.due() {
            return Ok(());
        }
        let deltas = self.measurements.take_deltas();
        if deltas.is_empty() {
            return Ok(());
        }
        let written = self.write_deltas(&deltas).await;
        if written.is_err() {
            let mut unsent = lock(&self.measurements.unsent);
            unsent.extend(deltas);
            let over = unsent.len().saturating_sub(UNSENT_MAX);
            if over > 0 {
                tracing::warn!(
                    over,
                    "lease measurements dropped: the database did not take them"
                );
                unsent.drain(..over);
            }
        }
        written
    }

    async fn write_deltas(&self, deltas: &[(String, Delta)]) -> Result<()> {
        let tx = self.begin().await?;
        let adds = STATS
            .map(|c| format!("{c} = s.{c} + excluded.{c}"))
            .join(", ");
        let params = (2..=13)
            .map(|i| format!("${i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let stats_sql = format!(
            "INSERT INTO leasehold_queue_stats AS s (queue_id, {})
             SELECT id, {params} FROM leasehold_queues WHERE key = $1
             ON CONFLICT (queue_id) DO UPDATE SET {adds}",
            STATS.join(", ")
        );
        let counts_sql = "INSERT INTO leasehold_lease_counts AS c
                 (queue_id, series, window_ms, value_ms, count)
             SELECT q.id, u.s, u.w, u.v, u.n FROM leasehold_queues q,
                 unnest($2::text[], $3::bigint[], $4::bigint[], $5::bigint[]) AS u(s, w, v, n)
             WHERE q.key = $1
             ORDER BY u.s, u.w, u.v
             ON CONFLICT (queue_id, series, window_ms, value_ms)
             DO UPDATE SET count = c.count + excluded.count";
        for (queue, delta) in deltas {
            let values: Vec<i64> = delta.stats.values().map(to_i64).to_vec();
            let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![queue];
            params.extend(
                values
                    .iter()
                    .map(|v| v as &(dyn tokio_postgres::types::ToSql + Sync)),
            );
            tx.execute(&cached(&tx, &stats_sql).await?, &params)
                .await
                .map_err(|e| unavailable(&e))?;
            if delta.rows.is_empty() {
                continue;
            }
            let series: Vec<&str> = delta.rows.iter().map(|r| r.0).collect();
            let windows: Vec<i64> = delta.rows.iter().map(|r| r.1).collect();
            let values: Vec<i64> = delta.rows.iter().map(|r| r.2).collect();
            let counts: Vec<i64> = delta.rows.iter().map(|r| r.3).collect();
            tx.execute(
                &cached(&tx, counts_sql).await?,
                &[queue, &series, &windows, &values, &counts],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        }
        tx.commit().await.map_err(|e| unavailable(&e))
    }

    /// The lease report of the whole cluster: every server's measurements, added up.
    pub(crate) async fn cluster_report(&self, queue: &str) -> Result<LeaseReport> {
        self.flush_measurements(true).await?;
        let tx = self.begin().await?;
        let columns = STATS.map(|c| format!("coalesce(s.{c}, 0)")).join(", ");
        let sql = format!(
            "SELECT q.record, leasehold_now(), {columns}
             FROM leasehold_queues q LEFT JOIN leasehold_queue_stats s ON s.queue_id = q.id
             WHERE q.key = $1"
        );
        let row = tx
            .query_opt(&cached(&tx, &sql).await?, &[&queue])
            .await
            .map_err(|e| unavailable(&e))?
            .ok_or(EngineError::QueueDoesNotExist)?;
        let record = decode(row.get(0))?;
        let now = to_u64(row.get(1));
        let mut stats = QueueStats::default();
        for (i, field) in stats.values_mut().into_iter().enumerate() {
            *field = to_u64(row.get(i + 2));
        }
        let counted = tx
            .query(
                &cached(
                    &tx,
                    "SELECT series, window_ms, value_ms, count FROM leasehold_lease_counts
                     WHERE queue_id = $1 AND (window_ms < 0 OR window_ms > $2)
                     ORDER BY series, window_ms, value_ms",
                )
                .await?,
                &[
                    &to_i64(record.meta.id),
                    &to_i64(now.saturating_sub(leasehold_engine::LEASE_WINDOW_MS)),
                ],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        tx.commit().await?;
        let metrics = LeaseMetrics::from_record(&record_of(&counted));
        let (held, expired_unseen) = self.held(record.meta.id, &record.meta.settings).await?;
        // Leases that ran out on messages nobody has received since: the engine counts an
        // expiry when it happens, a server here when it next sees the message.
        stats.leases_expired += expired_unseen;
        Ok(LeaseReport::of(
            &metrics,
            now,
            stats,
            held,
            &record.meta.settings,
        ))
    }

    /// This server's own measurements of every queue whose name starts with `name_prefix`,
    /// with what each holds now: its `/metrics`, which Prometheus sums across servers.
    pub(crate) async fn local_reports(
        &self,
        name_prefix: &str,
    ) -> Result<Vec<(String, LeaseReport)>> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT key, record, leasehold_now() FROM leasehold_queues ORDER BY key",
                &[],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        drop(client);
        let mut reports = Vec::with_capacity(rows.len());
        for row in rows {
            let key: String = row.get(0);
            if !leasehold_engine::name_of(&key).starts_with(name_prefix) {
                continue;
            }
            let record = decode(row.get(1))?;
            let now = to_u64(row.get(2));
            let (held, _) = self.held(record.meta.id, &record.meta.settings).await?;
            let mut local = lock(&self.measurements.local);
            let measured = local.entry(key.clone()).or_default();
            let report = LeaseReport::of(
                &measured.metrics,
                now,
                measured.stats.clone(),
                held,
                &record.meta.settings,
            );
            drop(local);
            reports.push((key, report));
        }
        Ok(reports)
    }

    /// What a queue holds now: its counts and its oldest message's send time; and how many
    /// of its messages' leases ran out unseen.
    async fn held(
        &self,
        queue_id: u64,
        settings: &QueueSettings,
    ) -> Result<((QueueCounts, Option<u64>), u64)> {
        let [visible, in_flight, delayed, oldest, expired_unseen] =
            self.counts(queue_id, settings).await?;
        let counts = QueueCounts {
            visible: usize::try_from(visible).unwrap_or(usize::MAX),
            not_visible: usize::try_from(in_flight).unwrap_or(usize::MAX),
            delayed: usize::try_from(delayed).unwrap_or(usize::MAX),
        };
        Ok(((counts, (oldest > 0).then_some(oldest)), expired_unseen))
    }
}
