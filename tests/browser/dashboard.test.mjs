// The dashboard in a real headless Chromium (Debian's, driven by playwright-core): traffic with
// known outcomes through the SQS API, then the page must show what the API reports; a peek
// changes no receive count; a move task moves what its confirmation said; the page survives a
// server restart; it works at phone width, by keyboard, and in dark mode. Run by
// scripts/test: `node tests/browser/dashboard.test.mjs` (LEASEHOLD_BIN names the binary,
// CHROMIUM the browser; SCREENSHOTS=docs writes the README's screenshots, else a temp dir).
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";
import { chromium } from "playwright-core";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const BINARY = process.env.LEASEHOLD_BIN || join(ROOT, "target", "debug", "leasehold");
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const DOCS = process.env.SCREENSHOTS ? join(ROOT, process.env.SCREENSHOTS) : join(tmpdir(), "leasehold-dashboard");
const DEADLINE = setTimeout(() => fail(new Error("the browser test took over 180 s")), 180_000);

let server = null;
let browser = null;

function fail(error) {
  console.error(`FAILED: ${error.stack || error}`);
  cleanup().finally(() => process.exit(1));
}

async function cleanup() {
  clearTimeout(DEADLINE);
  if (browser) await browser.close().catch(() => {});
  stopServer();
}

function freePort() {
  return new Promise((resolve) => {
    const probe = createServer();
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

async function startServer(port) {
  // Its own process group, so the whole group is stopped.
  server = spawn(BINARY, ["serve", "--in-memory", "--time-travel", "--lease-mode", "strict", "--bind", `127.0.0.1:${port}`],
    { stdio: ["ignore", "ignore", "inherit"], detached: true });
  for (let i = 0; i < 200; i++) {
    try {
      await fetch(`http://127.0.0.1:${port}/health`);
      return;
    } catch {
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  throw new Error("the server did not start");
}

function stopServer() {
  if (server && server.exitCode === null) {
    try { process.kill(-server.pid, "SIGKILL"); } catch { /* gone */ }
  }
  server = null;
}

let endpoint = "";

async function sqs(action, body) {
  const response = await fetch(endpoint + "/", {
    method: "POST",
    headers: { "content-type": "application/x-amz-json-1.0", "x-amz-target": `AmazonSQS.${action}` },
    body: JSON.stringify(body),
  });
  const json = await response.json();
  if (!response.ok) throw new Error(`${action}: ${JSON.stringify(json)}`);
  return json;
}

async function api(path) {
  const response = await fetch(`${endpoint}/_leasehold/api${path}`);
  assert.equal(response.status, 200, path);
  return response.json();
}

async function advance(seconds) {
  const response = await fetch(`${endpoint}/_leasehold/clock/advance`, {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ seconds }),
  });
  assert.equal(response.status, 200);
}

async function createQueue(name, attributes = {}) {
  return (await sqs("CreateQueue", { QueueName: name, Attributes: attributes })).QueueUrl;
}

async function receiveAll(url, max) {
  const got = [];
  while (got.length < max) {
    const { Messages = [] } = await sqs("ReceiveMessage", { QueueUrl: url, MaxNumberOfMessages: 10 });
    if (Messages.length === 0) break;
    got.push(...Messages);
  }
  return got;
}

/// Traffic with known outcomes: `overrun` (4 of 10 consumers outlive a 5 s lease),
/// `orders` whose 3 messages are dead-lettered after their work had succeeded (late deletes in
/// strict mode leave them), and `orders-dlq` holding them.
async function traffic() {
  const overrun = await createQueue("overrun", { VisibilityTimeout: "5" });
  for (let i = 0; i < 10; i++) await sqs("SendMessage", { QueueUrl: overrun, MessageBody: `job ${i}` });
  const jobs = await receiveAll(overrun, 10);
  assert.equal(jobs.length, 10);
  for (const m of jobs.slice(0, 6)) await sqs("DeleteMessage", { QueueUrl: overrun, ReceiptHandle: m.ReceiptHandle });
  await advance(6);
  for (const m of jobs.slice(6)) await sqs("DeleteMessage", { QueueUrl: overrun, ReceiptHandle: m.ReceiptHandle });

  await createQueue("orders-dlq");
  const dlqArn = "arn:aws:sqs:us-east-1:000000000000:orders-dlq";
  const orders = await createQueue("orders", {
    VisibilityTimeout: "2", RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlqArn, maxReceiveCount: 1 }),
  });
  for (let i = 0; i < 3; i++) await sqs("SendMessage", { QueueUrl: orders, MessageBody: `order ${i}` });
  const taken = await receiveAll(orders, 3);
  assert.equal(taken.length, 3);
  await advance(3);
  for (const m of taken) await sqs("DeleteMessage", { QueueUrl: orders, ReceiptHandle: m.ReceiptHandle });
  const again = await receiveAll(orders, 3);
  assert.equal(again.length, 0, "the messages went to the dead-letter queue");
  await createQueue("quiet");
}

async function rowOf(page, key) {
  const row = page.locator(`tr[data-queue="${key}"]`);
  await row.waitFor();
  return row;
}

async function checkQueuesPage(page) {
  await page.goto(endpoint + "/");
  assert.ok(page.url().endsWith("/_leasehold/dashboard/"), `the root sends a browser to the dashboard: ${page.url()}`);
  const { queues } = await api("/queues");
  assert.equal(queues.length, 4);
  for (const q of queues) {
    const row = await rowOf(page, q.key);
    assert.equal(await row.locator('[data-field="visible"]').textContent(), q.messages.visible.toLocaleString("en-US"), q.key);
    assert.equal(await row.locator('[data-field="in_flight"]').textContent(), q.messages.not_visible.toLocaleString("en-US"), q.key);
    assert.equal(await row.locator('[data-field="late"]').textContent(), q.late_deletes.toLocaleString("en-US"), q.key);
    const flagged = (await row.getAttribute("class")) === "trouble";
    assert.equal(flagged, q.trouble.length > 0, `${q.key} stands out exactly when in trouble`);
  }
  assert.equal((await rowOf(page, "overrun")).locator(".badge.bad").first().isVisible !== undefined, true);
  assert.match(await (await rowOf(page, "orders")).textContent(), /DLQ mirage: 3 dead-lettered/);
  assert.match(await (await rowOf(page, "orders-dlq")).textContent(), /DLQ of orders/);

  // Sortable, by keyboard: focus the "Late deletes" header and press Enter.
  await page.locator('th[data-column="late"] button').focus();
  await page.keyboard.press("Enter");
  assert.equal(await page.locator('th[data-column="late"]').getAttribute("aria-sort"), "descending");
  const first = await page.locator("#queues tbody tr").first().getAttribute("data-queue");
  assert.equal(first, "overrun", "most late deletes first");
  await page.waitForTimeout(2500); // a poll re-renders: the sort and the focus stay
  assert.equal(await page.locator('th[data-column="late"]').getAttribute("aria-sort"), "descending");
  assert.equal(await page.evaluate(() => document.activeElement.closest("th")?.dataset.column), "late");
  await page.screenshot({ path: join(DOCS, "dashboard-queues.png"), fullPage: true });
}

async function checkQueuePage(page) {
  await page.goto(`${endpoint}/_leasehold/dashboard/#/queue/overrun`);
  await page.locator("h1", { hasText: /^overrun$/ }).waitFor();
  const detail = await api("/queues/overrun");
  const report = detail.report;
  await page.locator('[data-testid="late-share"]').waitFor();
  const holds = report.deleted_within_lease + report.late_deletes;
  assert.equal(report.late_deletes, 4);
  assert.equal(holds, 10);
  assert.equal(await page.locator('[data-testid="late-share"]').textContent(), `${((100 * report.late_deletes) / holds).toFixed(1)}%`);
  assert.equal(await page.locator('[data-testid="late-deletes"]').textContent(), "4");
  assert.equal(await page.locator('[data-testid="visibility-timeout"]').textContent(), "5 s");
  const rows = page.locator("#hold-buckets tbody tr");
  assert.equal(await rows.count(), report.lease_hold_buckets.length);
  for (let i = 0; i < report.lease_hold_buckets.length; i++) {
    const bucket = report.lease_hold_buckets[i];
    assert.equal(await rows.nth(i).locator('[data-field="count"]').textContent(), bucket.count.toLocaleString("en-US"));
  }
  assert.equal(report.lease_hold_buckets.reduce((n, b) => n + b.count, 0), 10, "every hold is in a bucket");
  assert.ok(await page.locator("#hold-chart canvas").count() > 0, "the histogram is drawn");
  // The time axis reads as clock times, whole seconds (it read ":17.000 :17.500"): two polls
  // in, so that the chart spans time.
  await page.waitForFunction(() => (document.querySelector("#late-chart")?.dataset.timeLabels || "").split(" ").length >= 2,
    null, { timeout: 10000 });
  const timeLabels = (await page.locator("#late-chart").getAttribute("data-time-labels")).split(" ");
  for (const label of timeLabels) assert.match(label, /^\d\d:\d\d:\d\d$/, `time label ${label}`);
  assert.match(await page.locator('[data-testid="advice"]').textContent(), /Visibility timeout|no measured|durations/);

  await page.goto(`${endpoint}/_leasehold/dashboard/#/queue/orders`);
  await page.locator("h1", { hasText: /^orders$/ }).waitFor();
  const orders = (await api("/queues/orders")).report;
  assert.equal(await page.locator('[data-testid="dlq-moves"]').textContent(), String(orders.dlq_moves));
  assert.equal(await page.locator('[data-testid="dlq-mirage"]').textContent(), String(orders.dlq_moves_after_late_delete));
  assert.equal(orders.dlq_moves_after_late_delete, 3);
  await page.goto(`${endpoint}/_leasehold/dashboard/#/queue/overrun`);
  await page.locator("h1", { hasText: /^overrun$/ }).waitFor();
  await page.locator("#hold-chart canvas").first().waitFor();
  await page.screenshot({ path: join(DOCS, "dashboard-queue.png"), fullPage: true });
}

async function checkMessagesAndRedrive(page) {
  const before = await api("/queues/orders-dlq");
  const peekedBefore = (await api("/queues/orders-dlq/messages")).messages;
  await page.goto(`${endpoint}/_leasehold/dashboard/#/queue/orders-dlq/messages`);
  await page.locator("h1", { hasText: "orders-dlq: oldest messages" }).waitFor();
  await page.locator("#messages tbody tr").first().waitFor();
  assert.equal(await page.locator("#messages tbody tr").count(), 3);
  assert.equal(await page.locator("td.body").count(), 0, "bodies only on request");
  await page.locator("#toggle-bodies").click();
  await page.locator("td.body").first().waitFor();
  assert.match(await page.locator("td.body").first().textContent(), /^order \d$/);
  await page.waitForTimeout(2500); // polls peek again
  const after = await api("/queues/orders-dlq");
  const peekedAfter = (await api("/queues/orders-dlq/messages")).messages;
  assert.deepEqual(peekedAfter.map((m) => m.receive_count), peekedBefore.map((m) => m.receive_count), "a peek changes no receive count");
  assert.equal(after.report.received, before.report.received, "a peek is no receive");
  assert.equal(after.report.messages.visible, 3, "a peek leases nothing");
  await page.screenshot({ path: join(DOCS, "dashboard-messages.png"), fullPage: true });

  await page.locator("#redrive").click();
  const dialog = page.locator("#confirm");
  await dialog.waitFor();
  assert.match(await page.locator("#confirm-text").textContent(), /^3 messages will move from orders-dlq back to orders/);
  await page.locator("#confirm-move").click();
  for (let i = 0; i < 100; i++) {
    const { queues } = await api("/queues");
    const dlq = queues.find((q) => q.key === "orders-dlq");
    const orders = queues.find((q) => q.key === "orders");
    if (dlq.messages.visible === 0 && orders.messages.visible === 3) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("the move task did not move the 3 messages it announced");
}

/// A fair queue with a noisy tenant: 31 of its 40 messages in flight, and a quiet one's 2
/// waiting. The page shows AWS's fair-queue figures and the noisy tenant, as the API has them.
async function checkTenants(page) {
  const url = await createQueue("tenants");
  for (let i = 0; i < 40; i++) await sqs("SendMessage", { QueueUrl: url, MessageBody: `flood ${i}`, MessageGroupId: "flood" });
  for (const n of [10, 10, 10, 1]) await sqs("ReceiveMessage", { QueueUrl: url, MaxNumberOfMessages: n });
  for (let i = 0; i < 2; i++) await sqs("SendMessage", { QueueUrl: url, MessageBody: `quiet ${i}`, MessageGroupId: "<b>quiet</b>" });
  const fairness = (await api("/queues/tenants")).report.fairness;
  assert.equal(fairness.noisy_groups, 1);
  assert.equal(fairness.quiet_messages.visible, 2);
  await page.goto(`${endpoint}/_leasehold/dashboard/#/queue/tenants`);
  await page.locator('[data-testid="tenants"]').waitFor();
  assert.equal(await page.locator('[data-testid="noisy-groups"]').textContent(), "1");
  assert.equal(await page.locator('[data-testid="quiet-visible"]').textContent(), "2");
  assert.equal(await page.locator('#noisy-tenants tr[data-group="flood"] [data-field="in-flight"]').textContent(), "31");
  await page.goto(`${endpoint}/_leasehold/dashboard/#/queue/overrun`);
  await page.locator("h1", { hasText: /^overrun$/ }).waitFor();
  assert.equal(await page.locator('[data-testid="tenants"] #noisy-tenants').count(), 0, "no noisy tenant, no table");
}

async function checkRestart(page, port) {
  await page.goto(`${endpoint}/_leasehold/dashboard/`);
  await page.locator("#queues").waitFor();
  stopServer();
  await page.locator("#status.down").waitFor({ timeout: 10_000 });
  await startServer(port);
  await createQueue("after-restart");
  await page.locator('tr[data-queue="after-restart"]').waitFor({ timeout: 10_000 });
  assert.doesNotMatch(await page.locator("#status").textContent(), /cannot reach/);
}

async function checkPhoneAndDark(context) {
  const phone = await context.newPage();
  await phone.setViewportSize({ width: 390, height: 800 });
  await phone.emulateMedia({ colorScheme: "dark" });
  await phone.goto(`${endpoint}/_leasehold/dashboard/#/queue/overrun`);
  await phone.locator('[data-testid="late-share"]').waitFor();
  const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 1, `no sideways scrolling at phone width (${overflow} px)`);
  const background = await phone.evaluate(() => getComputedStyle(document.body).backgroundColor);
  assert.notEqual(background, "rgb(255, 255, 255)", "dark mode is dark");
  await phone.screenshot({ path: join(DOCS, "dashboard-phone-dark.png"), fullPage: true });
  await phone.close();
}

async function main() {
  mkdirSync(DOCS, { recursive: true });
  const port = await freePort();
  endpoint = `http://127.0.0.1:${port}`;
  await startServer(port);
  await traffic();
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"],
  });
  const context = await browser.newContext({ viewport: { width: 1200, height: 900 }, colorScheme: "light" });
  const page = await context.newPage();
  page.on("pageerror", (error) => fail(new Error(`the page threw: ${error.message}`)));
  await checkQueuesPage(page);
  console.log("ok: the queues table equals the API, trouble stands out, sorting by keyboard");
  await checkQueuePage(page);
  console.log("ok: one queue: the late-delete share, the histogram's buckets, the DLQ mirage");
  await checkMessagesAndRedrive(page);
  console.log("ok: a peek changes no receive count; the move task moved the 3 it announced");
  await checkTenants(page);
  console.log("ok: a fair queue's noisy tenant and quiet messages, as the API has them");
  await checkPhoneAndDark(context);
  console.log("ok: phone width without sideways scrolling, dark mode");
  await checkRestart(page, port);
  console.log("ok: the page carries on across a server restart");
  await cleanup();
}

main().catch(fail);
