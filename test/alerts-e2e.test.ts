/**
 * The alert rules and the dashboard end to end: a real Prometheus (Debian's) scrapes a running API process, a
 * running worker and a starter running apart (STARTER_METRICS_PORT), evaluating monitoring/alerts.yml. An
 * order is bought and paid, so that every metric the dashboard (monitoring/grafana/flash-sale.json) queries has
 * been scraped, the start from the starter's endpoint; with every process up and every store answering,
 * nothing fires; the worker is stopped, and FlashSaleWorkerAbsent goes pending, then fires within its `for`
 * (plus a scrape and an evaluation), as read from Prometheus' HTTP API.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse } from 'yaml';
import { saleGateOf } from './support/crowd';
import { freePort, startChild, type Child } from './support/processes';
import { buyerToken, connectClients, createTestSale, testConfig, until, type Clients } from './support/helpers';

jest.setTimeout(240_000);

const RULES = join(__dirname, '..', 'monitoring', 'alerts.yml');
const DASHBOARD = join(__dirname, '..', 'monitoring', 'grafana', 'flash-sale.json');
const STEP_S = 1;

interface Alert {
  labels: { alertname: string };
  state: 'pending' | 'firing';
}

let prometheus: ChildProcess | undefined;
const children: Child[] = [];
const config = testConfig();
let clients: Clients;
beforeAll(() => {
  clients = connectClients(config);
});
afterAll(async () => {
  prometheus?.kill('SIGTERM');
  await Promise.allSettled(children.map((c) => c.stop()));
  await clients.close();
});

/** @returns the metric names the dashboard's queries read (ours and Temporal Core's, and `up`) */
function dashboardMetrics(): string[] {
  const { panels } = JSON.parse(readFileSync(DASHBOARD, 'utf8')) as { panels: { targets: { expr: string }[] }[] };
  const exprs = panels.flatMap((p) => p.targets.map((t) => t.expr));
  return [...new Set(exprs.flatMap((e) => e.match(/\b(flash_sale_[a-z0-9_]+|temporal_[a-z0-9_]+|up)\b/g) ?? []))].sort();
}

/** @returns the rule's `for`, in seconds (e.g. '30s', '1m') */
function ruleForS(alert: string): number {
  const { groups } = parse(readFileSync(RULES, 'utf8')) as { groups: { rules: { alert: string; for: string }[] }[] };
  const rule = groups.flatMap((g) => g.rules).find((r) => r.alert === alert);
  const [, n, unit] = /^(\d+)([sm])$/.exec(rule?.for ?? '') ?? [];
  return Number(n) * (unit === 'm' ? 60 : 1);
}

test('a real Prometheus on the running API and worker: quiet while both are up, FlashSaleWorkerAbsent fires within its for once the worker stops', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'prometheus-'));
  const [apiPort, internalPort, workerMetricsPort, starterMetricsPort, prometheusPort] = await Promise.all([freePort(), freePort(), freePort(), freePort(), freePort()]);
  // The starter apart from the API (docs/deploy.md), on its own metrics endpoint: the dashboard's start figures
  // must come from wherever the starters run.
  const env = {
    ...process.env,
    API_PORT: String(apiPort),
    INTERNAL_API_PORT: String(internalPort),
    STARTER_IN_API: 'false',
    WORKER_METRICS_PORT: String(workerMetricsPort),
    STARTER_METRICS_PORT: String(starterMetricsPort),
    TEMPORAL_TASK_QUEUE: `alerts-${randomUUID()}`,
    LOG_LEVEL: 'info',
  };
  const api = startChild('api', 'dist/api/main.js', env, join(dir, 'api.log'), 'api listening');
  const worker = startChild('worker', 'dist/worker/main.js', env, join(dir, 'worker.log'), 'worker running');
  const starter = startChild('starter', 'dist/starter/main.js', env, join(dir, 'starter.log'), 'starter running');
  children.push(api, worker, starter);
  await Promise.all([api.ready, worker.ready, starter.ready]);

  writeFileSync(
    join(dir, 'prometheus.yml'),
    [
      'global:',
      `  scrape_interval: ${STEP_S}s`,
      `  evaluation_interval: ${STEP_S}s`,
      'rule_files:',
      `  - ${RULES}`,
      'scrape_configs:',
      // The API's /metrics is on its internal door.
      '  - job_name: flash-sale-api',
      `    static_configs: [{ targets: ['127.0.0.1:${internalPort}'] }]`,
      '  - job_name: flash-sale-worker',
      `    static_configs: [{ targets: ['127.0.0.1:${workerMetricsPort}'] }]`,
      '  - job_name: flash-sale-starter',
      `    static_configs: [{ targets: ['127.0.0.1:${starterMetricsPort}'] }]`,
      '',
    ].join('\n'),
  );
  prometheus = spawn('prometheus', [`--config.file=${join(dir, 'prometheus.yml')}`, `--storage.tsdb.path=${join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${prometheusPort}`], { stdio: 'ignore' });
  const read = async <T>(path: string): Promise<T> => ((await (await fetch(`http://127.0.0.1:${prometheusPort}/api/v1/${path}`)).json()) as { data: T }).data;
  const alerts = async () => (await read<{ alerts: Alert[] }>('alerts')).alerts;
  const query = async (expr: string) => (await read<{ result: { metric: Record<string, string>; value: [number, string] }[] }>(`query?query=${encodeURIComponent(expr)}`)).result;

  // An order bought and paid: its reservation, start, workflow tasks and payment show in the scrapes.
  const baseUrl = `http://127.0.0.1:${apiPort}`;
  const sale = await createTestSale(clients, { quantities: [3] });
  const gate = await saleGateOf(baseUrl, sale.saleId, Date.now() + 30_000);
  const bought = await fetch(`${baseUrl}/api/flash-sales/items/${sale.items[0].itemId}/purchase`, {
    method: 'POST',
    headers: { authorization: `Bearer ${await buyerToken(config, `alerts-${randomUUID()}`)}`, 'sale-gate': gate },
  });
  expect(bought.status).toBe(202);
  const { orderId } = (await bought.json()) as { orderId: string };
  const paid = await fetch(`http://127.0.0.1:${internalPort}/api/flash-sales/orders/${orderId}/payment`, {
    method: 'POST',
    headers: { authorization: `Bearer ${config.PAYMENT_SERVICE_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ paymentId: `pay-${orderId}`, amount: sale.items[0].priceMinor }),
  });
  expect(paid.status).toBe(200);

  // Both targets scraped, the stores checked up by the API, the rules evaluated: nothing fires.
  await until('every target up', async () => (await query('up')).filter((s) => s.value[1] === '1').length === 3, 60_000);
  await until('every store up', async () => (await query('flash_sale_dependency_up == 1')).length === 3, 30_000);
  // Every metric the dashboard queries is in what Prometheus scraped from the running processes.
  const scraped = async (name: string) => (await query(`count({__name__="${name}"})`)).length > 0;
  const missing = async () => {
    const names = [];
    for (const name of dashboardMetrics()) if (!(await scraped(name))) names.push(name);
    return names;
  };
  // A workflow task's schedule-to-start latency is recorded as it starts, its execution latency once it ends: one
  // scrape may hold the first and not yet the second.
  await until('every metric the dashboard queries scraped', async () => (await missing()).length === 0, 60_000).catch(() => undefined);
  expect(await missing()).toEqual([]);
  // The order's start is counted by the starter that made it, not by the API, which runs none.
  expect(await query('sum by (job) (flash_sale_workflow_starts_total{result="started"})')).toEqual([{ metric: { job: 'flash-sale-starter' }, value: [expect.any(Number), '1'] }]);
  await new Promise((r) => setTimeout(r, 3 * STEP_S * 1000));
  expect((await alerts()).map((a) => a.labels.alertname)).toEqual([]);

  await worker.stop();
  const stoppedAt = Date.now();
  const state = async () => (await alerts()).find((a) => a.labels.alertname === 'FlashSaleWorkerAbsent')?.state;
  await until('the alert pending', async () => (await state()) === 'pending', 30_000);
  await until('the alert firing', async () => (await state()) === 'firing', (ruleForS('FlashSaleWorkerAbsent') + 10) * 1000);
  const firedAfterS = (Date.now() - stoppedAt) / 1000;
  expect(firedAfterS).toBeGreaterThanOrEqual(ruleForS('FlashSaleWorkerAbsent'));
  expect(firedAfterS).toBeLessThanOrEqual(ruleForS('FlashSaleWorkerAbsent') + 3 * STEP_S + 5);
  // The API and its stores are fine: only the worker's alert fires.
  expect((await alerts()).filter((a) => a.state === 'firing').map((a) => a.labels.alertname)).toEqual(['FlashSaleWorkerAbsent']);
});
