//! One lab run, start to end: the queues, the downstream, the fleet, arrivals and triggers
//! for the scenario's duration with a sample each step; then the measurement, the
//! simulator's prediction, and the report.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::types::QueueAttributeName;
use aws_sdk_sqs::Client;
use leasehold_sim::Scenario;
use leasehold_worker::CancellationToken;
use tokio::time::Instant;

use crate::downstream::{Downstream, ExecutionRow};
use crate::measure::{self, Extras, Sample};
use crate::processes::Crew;
use crate::redrive::{self, RedriveComparison};
use crate::report::{self, LabReport};
use crate::spec::LabSpec;
use crate::{consumers, load, LabError};

/// Where the lab runs: a server the caller started (in the scenario's lease mode), a
/// PostgreSQL database for the downstream, and where the report goes.
pub struct LabOptions {
    pub endpoint: String,
    pub postgres_url: String,
    pub out: PathBuf,
    /// The lab's own binary, which runs a consumer as `lab-consumer` where a crash or a
    /// deploy needs consumers to be processes of their own.
    pub exe: PathBuf,
    /// Cancel to end the run early: it stops, cleans up, and returns `Interrupted`.
    pub interrupt: CancellationToken,
}

/// The queues of a run.
pub(crate) struct Queues {
    pub name: String,
    pub url: String,
    pub dlq: Option<(String, String)>,
}

pub(crate) fn sqs_client(endpoint: &str) -> Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new("lab", "lab", None, None, "leasehold-lab"))
        .build();
    Client::from_conf(config)
}

/// A queue name from the scenario's: letters, digits, `-` and `_`, at most 70 characters.
fn queue_name(scenario: &Scenario) -> String {
    let name: String = scenario
        .name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(70)
        .collect();
    format!("lab-{name}")
}

async fn create_queue(
    client: &Client,
    name: &str,
    attributes: Vec<(QueueAttributeName, String)>,
) -> Result<String, LabError> {
    let mut request = client.create_queue().queue_name(name);
    for (k, v) in attributes {
        request = request.attributes(k, v);
    }
    let out = request
        .send()
        .await
        .map_err(|e| LabError::sqs(&format!("creating {name}"), e))?;
    out.queue_url
        .ok_or_else(|| LabError::Server(format!("creating {name}: no QueueUrl")))
}

/// One attribute of a queue, as the server answers `GetQueueAttributes`.
pub(crate) async fn queue_attribute(
    client: &Client,
    url: &str,
    name: QueueAttributeName,
) -> Result<String, LabError> {
    let out = client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(name.clone())
        .send()
        .await
        .map_err(|e| LabError::sqs(&format!("reading a queue's {}", name.as_str()), e))?;
    out.attributes
        .and_then(|a| a.get(&name).cloned())
        .ok_or_else(|| LabError::Server(format!("no {}", name.as_str())))
}

/// The source queue with the scenario's lease, and its dead-letter queue if it has one.
async fn create_queues(client: &Client, scenario: &Scenario) -> Result<Queues, LabError> {
    let name = queue_name(scenario);
    let mut attributes = vec![(
        QueueAttributeName::VisibilityTimeout,
        scenario.queue.visibility_timeout_s.to_string(),
    )];
    let mut dlq = None;
    if scenario.queue.max_receive_count > 0 {
        let dlq_name = format!("{name}-dlq");
        let dlq_url = create_queue(client, &dlq_name, Vec::new()).await?;
        let arn = queue_attribute(client, &dlq_url, QueueAttributeName::QueueArn).await?;
        attributes.push((
            QueueAttributeName::RedrivePolicy,
            serde_json::json!({
                "deadLetterTargetArn": arn,
                "maxReceiveCount": scenario.queue.max_receive_count,
            })
            .to_string(),
        ));
        dlq = Some((dlq_name, dlq_url));
    }
    let url = create_queue(client, &name, attributes).await?;
    Ok(Queues { name, url, dlq })
}

/// Samples the server and the database every step until the run's end.
async fn sample_steps(
    (scenario, options): (&Scenario, &LabOptions),
    queues: &Queues,
    (downstream, crew): (&Downstream, &Crew),
    (start, stop): (Instant, &CancellationToken),
    progress: &mut dyn FnMut(f64),
) -> Result<Vec<Sample>, LabError> {
    let http = reqwest::Client::new();
    let steps = (scenario.duration_s / scenario.step_s).round().max(1.0) as u32;
    let mut samples = Vec::with_capacity(steps as usize);
    for k in 1..=steps {
        let t = f64::from(k) * scenario.step_s;
        tokio::select! {
            _ = tokio::time::sleep_until(start + Duration::from_secs_f64(t)) => {}
            _ = options.interrupt.cancelled() => return Err(LabError::Interrupted),
            // Something else ended the run (the lambda controller failed): its error is
            // the run's, and the samples so far are all there is.
            _ = stop.cancelled() => break,
        }
        let endpoint = options.endpoint.as_str();
        let source = measure::lease_report(&http, endpoint, &queues.name).await?;
        let dlq = match &queues.dlq {
            Some((name, _)) => Some(measure::lease_report(&http, endpoint, name).await?),
            None => None,
        };
        let running = crew.running(downstream).await?;
        let workers = crew.up(scenario).await;
        samples.push(measure::sample(
            t,
            (&source, dlq.as_ref()),
            running,
            workers,
        ));
        progress(f64::from(k) / f64::from(steps));
    }
    Ok(samples)
}

/// Runs `scenario` for real and writes the report to `options.out`.
pub async fn run(
    scenario: &Scenario,
    options: &LabOptions,
    progress: &mut dyn FnMut(f64),
) -> Result<LabReport, LabError> {
    scenario.validate()?;
    let spec = LabSpec::of(scenario)?;
    let client = sqs_client(&options.endpoint);
    let downstream = Downstream::create(&options.postgres_url, scenario).await?;
    let result = match downstream.check_room(connections_needed(scenario)).await {
        Ok(()) => run_on(scenario, &spec, options, &client, &downstream, progress).await,
        Err(e) => Err(e),
    };
    let dropped = downstream.drop_schema().await;
    let report = result?;
    dropped?;
    Ok(report)
}

/// The connections a fleet holds to the downstream: a consumer process two (its ledger, its
/// work) and its runtime's idempotency store one more; a task its ledger, and the tasks
/// share the pool and one store.
fn connections_needed(scenario: &Scenario) -> u32 {
    let size = consumers::Fleet::size(scenario);
    let store = u32::from(scenario.consumers.idempotency);
    if crate::processes::needed(scenario) {
        (2 + store) * size
    } else {
        size + scenario.database.capacity.min(size) + 4 * store
    }
}

async fn run_on(
    scenario: &Scenario,
    spec: &LabSpec,
    options: &LabOptions,
    client: &Client,
    downstream: &Downstream,
    progress: &mut dyn FnMut(f64),
) -> Result<LabReport, LabError> {
    let queues = create_queues(client, scenario).await?;
    let stop = CancellationToken::new();
    let target = consumers::Target {
        scenario,
        client,
        queue_url: &queues.url,
        downstream,
        stop: &stop,
    };
    let crew = Crew::start(&target, &options.endpoint, &options.exe, &options.out).await?;
    let origin = downstream.now().await?;
    let start = Instant::now();
    let producer = tokio::spawn(load::produce(
        scenario.clone(),
        client.clone(),
        queues.url.clone(),
        start,
        stop.clone(),
    ));
    let tenants: Vec<_> = (0..scenario.tenants.len())
        .map(|i| {
            let (client, url) = (client.clone(), queues.url.clone());
            tokio::spawn(load::produce_tenant(
                scenario.clone(),
                i,
                client,
                url,
                start,
                stop.clone(),
            ))
        })
        .collect();
    let poisoned = scenario.triggers.iter().any(|t| t.kind == "poison");
    let watcher = match (&queues.dlq, poisoned) {
        (Some((_, dlq_url)), true) => Some(tokio::spawn(crate::poison::watch(
            client.clone(),
            dlq_url.clone(),
            start,
            stop.clone(),
        ))),
        _ => None,
    };
    // Sampling runs the clock: when it ends (or fails, or is interrupted), everything stops,
    // the pending triggers with it.
    let sampling = async {
        let sampled = sample_steps(
            (scenario, options),
            &queues,
            (downstream, &crew),
            (start, &stop),
            progress,
        )
        .await;
        stop.cancel();
        sampled
    };
    let triggers = load::triggers(
        scenario.clone(),
        (downstream, crew.processes()),
        (client, &queues.url),
        start,
        stop.clone(),
    );
    let controlling = async {
        match crew.processes() {
            Some(processes) if crate::processes::is_lambda(scenario) => {
                let queue = (client, queues.url.as_str());
                let controlled = crate::scaler::control(
                    scenario,
                    queue,
                    downstream,
                    processes,
                    start,
                    stop.clone(),
                )
                .await;
                if controlled.is_err() {
                    // The fleet cannot follow its rule: the run stops rather than go on
                    // measuring a fleet the scenario does not describe.
                    stop.cancel();
                }
                controlled
            }
            _ => Ok(()),
        }
    };
    let (sampled, (), controlled) = tokio::join!(sampling, triggers, controlling);
    stop.cancel();
    // Taken before the run's end cuts executions short, which is no failure of theirs.
    let failures = crew.failures().await;
    let mut sending = producer.await.unwrap_or_default();
    for tenant in tenants {
        let theirs = tenant.await.unwrap_or_default();
        sending.failed_sends += theirs.failed_sends;
        sending.max_lag_s = sending.max_lag_s.max(theirs.max_lag_s);
        sending.sent_keys.extend(theirs.sent_keys);
    }
    let stats = crew.end(downstream).await?;
    // Before the dead-letter queue is read: the watcher puts back what it hid.
    let arrived_in_dlq = match watcher {
        Some(watcher) => watcher.await.unwrap_or_default(),
        None => Default::default(),
    };
    let samples = sampled?;
    controlled?;
    let executions = downstream.executions(origin).await?;
    let dlq = match &queues.dlq {
        Some((_, url)) => Some(report::dead_letters(client, url, &executions).await?),
        None => None,
    };
    let extras = Extras {
        skipped_duplicates: stats.as_ref().map_or(0, |s| s.duplicates_skipped),
        put_back_in_progress: stats.as_ref().map_or(0, |s| s.put_back_in_progress),
        lost_leases: stats.as_ref().map_or(0, |s| s.lost_leases),
        dlq_messages: dlq.map_or(0, |d| d.0),
        dlq_messages_already_succeeded: dlq.map_or(0, |d| d.1),
    };
    let mut tally = measure::tally(scenario, &samples, &executions, &extras);
    if !scenario.tenants.is_empty() {
        tally.dwell_ms = measure::dwell(&sending.sent_keys, &executions);
    }
    if poisoned {
        (tally.times_to_dlq_ms, tally.poison_work_ms) =
            crate::poison::measure(&arrived_in_dlq, &executions);
    }
    let mut kills = None;
    if crate::processes::needed(scenario) {
        let killed_executions;
        (
            tally.crash_recoveries_ms,
            tally.lost_work_ms,
            killed_executions,
        ) = measure::crashes(&executions);
        kills = Some(report::Kills {
            killed_executions,
            messages_ran_again: tally.crash_recoveries_ms.len() as u64,
        });
    }
    let arrivals = report::write_arrivals(&sending, &options.out)?;
    let mut report = report::compare(
        scenario,
        spec,
        &arrivals,
        report::Measurement {
            tally,
            executions: &executions,
            samples: &samples,
            counts: report::Counts {
                sending,
                ..failures
            },
            stats,
        },
    )?;
    report.kills = kills;
    if spec.redrive == "both" {
        let phase = RedrivePhase {
            scenario,
            spec,
            client,
            queues: &queues,
            downstream,
            origin,
        };
        report.redrive = Some(phase.run(&executions).await?);
    }
    report::write(scenario, &report, &samples, &options.out)?;
    Ok(report)
}

/// After the main run, for a scenario with `[lab] redrive = "both"`.
struct RedrivePhase<'a> {
    scenario: &'a Scenario,
    spec: &'a LabSpec,
    client: &'a Client,
    queues: &'a Queues,
    downstream: &'a Downstream,
    origin: std::time::SystemTime,
}

impl RedrivePhase<'_> {
    /// Splits the dead-letter queue, redrives one half blind and the other with `leasehold
    /// redrive`, runs the fleet again for `redrive_s`, and counts what each half re-executed.
    async fn run(&self, executions: &[ExecutionRow]) -> Result<RedriveComparison, LabError> {
        let Some((dlq_name, dlq_url)) = &self.queues.dlq else {
            return Ok(RedriveComparison::default());
        };
        let client = self.client;
        let split = redrive::split(client, dlq_url, dlq_name).await?;
        let finished: HashSet<String> = executions
            .iter()
            .filter(|e| e.finished_s.is_some())
            .map(|e| e.message_id.clone())
            .collect();
        let redrive_at = self.elapsed().await?;
        let stop = CancellationToken::new();
        let fleet = consumers::start(&consumers::Target {
            scenario: self.scenario,
            client,
            queue_url: &self.queues.url,
            downstream: self.downstream,
            stop: &stop,
        })
        .await?;
        let arn = |url| queue_attribute(client, url, QueueAttributeName::QueueArn);
        let source_arn = arn(&self.queues.url).await?;
        redrive::blind(client, &arn(dlq_url).await?, &source_arn).await?;
        let (moved, skipped) = redrive::leasehold(
            client,
            &split.second_dlq_url,
            &self.queues.url,
            &finished,
            split.leasehold_keys.len() as u64,
        )
        .await?;
        tokio::time::sleep(Duration::from_secs_f64(self.spec.redrive_s)).await;
        stop.cancel();
        self.downstream.terminate_executions().await?;
        let _ = tokio::time::timeout(Duration::from_secs(10), fleet.join()).await;
        let all = self.downstream.executions(self.origin).await?;
        let blind_moved = split.blind_keys.len() as u64;
        Ok(RedriveComparison {
            blind: redrive::half(&split.blind_keys, blind_moved, 0, &all, redrive_at),
            leasehold: redrive::half(&split.leasehold_keys, moved, skipped, &all, redrive_at),
            ran_s: self.spec.redrive_s,
        })
    }

    async fn elapsed(&self) -> Result<f64, LabError> {
        let now = self.downstream.now().await?;
        Ok(now
            .duration_since(self.origin)
            .map_or(0.0, |d| d.as_secs_f64()))
    }
}
