/**
 * The services as production runs them: `npm run build`'s JavaScript on plain node (scripts/test.sh builds it
 * first), on the pinned Node.js (NODE_VERSION, scripts/stack.env), with no TypeScript loader anywhere in it.
 */
import { randomUUID } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { stackEnv } from '../scripts/stack-env';
import { startChild, type Child } from '../tools/shared/processes';
import { freePort } from './helpers';

const ROOT = join(__dirname, '..');
const DIST = join(ROOT, 'dist');
const children: Child[] = [];

afterAll(async () => {
  await Promise.allSettled(children.map((c) => c.stop()));
});

/** @returns the first JSON log line of a child's log file that has `msg` */
function logLine(file: string, msg: string): Record<string, unknown> {
  const line = readFileSync(file, 'utf8')
    .split('\n')
    .find((l) => l.includes(`"msg":"${msg}"`));
  if (!line) throw new Error(`no "${msg}" line in ${file}`);
  return JSON.parse(line) as Record<string, unknown>;
}

test('node dist/api/main.js and node dist/worker/main.js start on the pinned Node.js, the worker from the prebuilt workflow bundle', async () => {
  const dir = join(ROOT, 'reports');
  const env = { ...process.env, LOG_LEVEL: 'info', API_PORT: String(await freePort()), TEMPORAL_TASK_QUEUE: `compiled-${randomUUID()}` };
  const api = startChild('api', 'dist/api/main.js', env, join(dir, 'compiled-api.log'), 'api listening');
  const worker = startChild('worker', 'dist/worker/main.js', env, join(dir, 'compiled-worker.log'), 'worker running');
  children.push(api, worker);
  await Promise.all([api.ready, worker.ready]);
  const major = `v${stackEnv().NODE_VERSION.split('.')[0]}.`;
  expect(String(logLine(join(dir, 'compiled-api.log'), 'api listening').node)).toMatch(new RegExp(`^${major.replace('.', '\\.')}`));
  expect(String(logLine(join(dir, 'compiled-worker.log'), 'worker running').node)).toMatch(new RegExp(`^${major.replace('.', '\\.')}`));
  for (const child of [api, worker]) {
    const cmdline = readFileSync(`/proc/${child.process.pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
    expect(cmdline.slice(1)).toEqual([join(ROOT, child.name === 'api' ? 'dist/api/main.js' : 'dist/worker/main.js')]);
  }
  const res = await fetch(`http://127.0.0.1:${env.API_PORT}/readyz`);
  expect(res.status).toBe(200);
});

test('the compiled services load no TypeScript loader: no module of dist/ names tsx or ts-node', () => {
  const files = (readdirSync(DIST, { recursive: true }) as string[]).filter((f) => f.endsWith('.js'));
  expect(files).toContain(join('api', 'main.js'));
  const loaders = files.filter((f) => /require\(["'](tsx|ts-node)|from ["'](tsx|ts-node)/.test(readFileSync(join(DIST, f), 'utf8')));
  expect(loaders).toEqual([]);
});
