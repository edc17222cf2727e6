/**
 * The services as production runs them: `npm run build`'s JavaScript on plain node (scripts/test.sh builds it
 * first), on the pinned Node.js (NODE_VERSION, scripts/stack.env), with no TypeScript loader anywhere in it.
 */
import { randomUUID } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import type { Client } from '@temporalio/client';
import { stackEnv } from '../scripts/stack-env';
import { connectTemporal } from '../src/workflows/client';
import { startChild, type Child } from './support/processes';
import { buyerToken, connectClients, createTestSale, freePort, NO_RATE_LIMITS, testConfig, until, type Clients } from './support/helpers';

const ROOT = join(__dirname, '..');
const DIST = join(ROOT, 'dist');
const children: Child[] = [];
const started: string[] = [];
let clients: Clients | undefined;
let temporal: Client | undefined;

afterAll(async () => {
  await Promise.allSettled(children.map((c) => c.stop()));
  await Promise.allSettled(started.map((id) => temporal?.workflow.getHandle(id).terminate('compiled suite finished')));
  await temporal?.connection.close();
  await clients?.close();
});

/**
 * @returns the first JSON log line of a child's log file that has `msg`, once the file holds it (a child is
 *   ready when its pipe has seen the line, which reaches the file a moment later)
 */
async function logLine(file: string, msg: string): Promise<Record<string, unknown>> {
  const find = async () => readFileSync(file, 'utf8').split('\n').find((l) => l.includes(`"msg":"${msg}"`));
  const line = await until(`a "${msg}" line in ${file}`, find, 5000);
  return JSON.parse(line) as Record<string, unknown>;
}

test('node dist/api/main.js and node dist/worker/main.js start on the pinned Node.js, the worker from the prebuilt workflow bundle', async () => {
  const dir = join(ROOT, 'reports', 'test');
  const env = { ...process.env, LOG_LEVEL: 'info', API_PORT: String(await freePort()), INTERNAL_API_PORT: String(await freePort()), TEMPORAL_TASK_QUEUE: `compiled-${randomUUID()}` };
  const api = startChild('api', 'dist/api/main.js', env, join(dir, 'compiled-api.log'), 'api listening');
  const worker = startChild('worker', 'dist/worker/main.js', env, join(dir, 'compiled-worker.log'), 'worker running');
  children.push(api, worker);
  await Promise.all([api.ready, worker.ready]);
  const major = `v${stackEnv().NODE_VERSION.split('.')[0]}.`;
  const listening = await logLine(join(dir, 'compiled-api.log'), 'api listening');
  expect(String(listening.node)).toMatch(new RegExp(`^${major.replace('.', '\\.')}`));
  expect([listening.url, listening.internalUrl]).toEqual([`http://127.0.0.1:${env.API_PORT}`, `http://127.0.0.1:${env.INTERNAL_API_PORT}`]);
  expect(String((await logLine(join(dir, 'compiled-worker.log'), 'worker running')).node)).toMatch(new RegExp(`^${major.replace('.', '\\.')}`));
  for (const child of [api, worker]) {
    const cmdline = readFileSync(`/proc/${child.process.pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
    expect(cmdline.slice(1)).toEqual([join(ROOT, child.name === 'api' ? 'dist/api/main.js' : 'dist/worker/main.js')]);
  }
  const res = await fetch(`http://127.0.0.1:${env.INTERNAL_API_PORT}/readyz`);
  expect(res.status).toBe(200);
});

test('the compiled services load no TypeScript loader: no module of dist/ names tsx or ts-node', () => {
  const files = (readdirSync(DIST, { recursive: true }) as string[]).filter((f) => f.endsWith('.js'));
  expect(files).toContain(join('api', 'main.js'));
  const loaders = files.filter((f) => /require\(["'](tsx|ts-node)|from ["'](tsx|ts-node)/.test(readFileSync(join(DIST, f), 'utf8')));
  expect(loaders).toEqual([]);
});

test('with STARTER_IN_API=false the API only accepts; `node dist/starter/main.js` starts the accepted orders’ workflows', async () => {
  const config = testConfig({ STARTER_IN_API: 'false' });
  clients = connectClients(config);
  temporal = await connectTemporal(config);
  const sale = await createTestSale(clients, { quantities: [3] });
  const dir = join(ROOT, 'reports', 'test');
  const env = { ...process.env, LOG_LEVEL: 'info', API_PORT: String(await freePort()), INTERNAL_API_PORT: '0', TEMPORAL_TASK_QUEUE: config.TEMPORAL_TASK_QUEUE, STARTER_IN_API: 'false', SALE_GATE_REQUIRED: 'false', ...NO_RATE_LIMITS };
  const api = startChild('api', 'dist/api/main.js', env, join(dir, 'compiled-api-alone.log'), 'api listening');
  children.push(api);
  await api.ready;
  for (let i = 0; i < 3; i++) {
    const res = await fetch(`http://127.0.0.1:${env.API_PORT}/api/flash-sales/items/${sale.items[0].itemId}/purchase`, {
      method: 'POST',
      headers: { authorization: `Bearer ${await buyerToken(config, `alone-${randomUUID()}`)}` },
    });
    expect(res.status).toBe(202);
    started.push(((await res.json()) as { orderId: string }).orderId);
  }
  const exists = (id: string) => temporal!.workflow.getHandle(id).describe().then(() => true, () => false);
  const starter = startChild('starter', 'dist/starter/main.js', env, join(dir, 'compiled-starter.log'), 'starter running');
  children.push(starter);
  await starter.ready;
  await until('the starter started all three workflows', async () => (await Promise.all(started.map(exists))).every(Boolean));
  // Each start names its client (the SDK's identity, pid@host): the starter process's, none the API's.
  const startedBy = await Promise.all(started.map(async (id) => (await temporal!.workflow.getHandle(id).fetchHistory()).events?.[0].workflowExecutionStartedEventAttributes?.identity));
  expect(startedBy).toEqual(started.map(() => `${starter.process.pid}@${hostname()}`));
});
