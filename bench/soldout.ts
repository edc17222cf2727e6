/**
 * Benchmark of the sold-out path (`npx tsx bench/soldout.ts`): the real API (startApi) answering a sold-out
 * item (quantity-0 sale, loaded, so after the first request the in-memory flag answers), side by side in the
 * same run with a bare Koa server that answers the same 410 `{"error":"SOLD_OUT"}` and does nothing else.
 * Each is driven by autocannon (library, in a child process so the load generator does not share the
 * servers' event loop) over loopback, twice: one buyer token reused by every request, then TOKENS distinct
 * tokens rotated per request (JWT verification is the main per-request cost). Prints a table and appends a
 * JSON line to reports/bench.jsonl. Asserts nothing.
 *
 * Options (environment): BENCH_DURATION_S (10), BENCH_CONNECTIONS (100), BENCH_TOKENS (10000), BENCH_WARMUP_S (2).
 */
import { fork } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { appendFileSync, mkdirSync } from 'node:fs';
import type { Server } from 'node:http';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import { SignJWT } from 'jose';
import Koa from 'koa';
import { startApi } from '../src/api/main';
import { loadConfig, type Config } from '../src/config';
import { createPool } from '../src/db';
import { createRedis, ReservationStore } from '../src/reservations';
import { createSale, loadSale } from '../src/sales';

const DURATION_S = Number(process.env.BENCH_DURATION_S ?? 10);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 100);
const TOKENS = Number(process.env.BENCH_TOKENS ?? 10_000);
const WARMUP_S = Number(process.env.BENCH_WARMUP_S ?? 2);

type Mode = 'one-token' | 'many-tokens';

interface DriveRequest {
  url: string;
  mode: Mode;
  durationS: number;
}

interface Figures {
  target: 'flash-sale' | 'bare-koa';
  mode: Mode;
  requestsPerS: number;
  p50Ms: number;
  p99Ms: number;
  requests: number;
  status410: number;
  other: number;
  errors: number;
  timeouts: number;
}

function benchConfig(): Config {
  return loadConfig({ ...process.env, LOG_LEVEL: 'silent', API_PORT: '0', TEMPORAL_TASK_QUEUE: `bench-${randomUUID()}` });
}

async function signTokens(config: Config, count: number): Promise<string[]> {
  const key = new TextEncoder().encode(config.JWT_SECRET);
  const run = randomUUID().slice(0, 8);
  return Promise.all(
    Array.from({ length: count }, (_, i) =>
      new SignJWT({}).setProtectedHeader({ alg: 'HS256', typ: 'JWT' }).setSubject(`bench-${run}-${i}`).setIssuedAt().setExpirationTime('1h').sign(key),
    ),
  );
}

/** Child process: runs autocannon against one URL and sends the result back. */
async function drive({ url, mode, durationS }: DriveRequest): Promise<autocannon.Result> {
  const tokens = await signTokens(benchConfig(), mode === 'one-token' ? 1 : TOKENS);
  let next = 0;
  return autocannon({
    url,
    method: 'POST',
    connections: CONNECTIONS,
    duration: durationS,
    headers: { authorization: `Bearer ${tokens[0]}` },
    requests:
      mode === 'one-token'
        ? undefined
        : [
            {
              setupRequest: (request) => {
                request.headers = { ...request.headers, authorization: `Bearer ${tokens[next++ % tokens.length]}` };
                return request;
              },
            },
          ],
  });
}

function runDriver(request: DriveRequest): Promise<autocannon.Result> {
  const child = fork(__filename, ['--drive'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  return new Promise((resolve, reject) => {
    child.once('message', (message) => resolve(message as autocannon.Result));
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? undefined : reject(new Error(`driver exited with ${code}`))));
    child.send(request);
  });
}

function figures(target: Figures['target'], mode: Mode, result: autocannon.Result): Figures {
  const stats = (result.statusCodeStats ?? {}) as Record<string, { count?: number }>;
  const status410 = Number(stats['410']?.count ?? 0);
  const total = Object.values(stats).reduce((sum, s) => sum + Number(s.count ?? 0), 0);
  return {
    target,
    mode,
    requestsPerS: result.requests.average,
    p50Ms: result.latency.p50,
    p99Ms: result.latency.p99,
    requests: total,
    status410,
    other: total - status410,
    errors: result.errors,
    timeouts: result.timeouts,
  };
}

/** The baseline: one route, same status and body, nothing else. */
async function startBareKoa(): Promise<{ url: string; server: Server }> {
  const app = new Koa();
  app.use((ctx) => {
    if (ctx.method === 'POST' && /^\/api\/flash-sales\/items\/[^/]+\/purchase$/.test(ctx.path)) {
      ctx.status = 410;
      ctx.body = { error: 'SOLD_OUT' };
    }
  });
  const server = app.listen(0, '127.0.0.1');
  await once(server, 'listening');
  server.keepAliveTimeout = 65_000;
  const { port } = server.address() as { port: number };
  return { url: `http://127.0.0.1:${port}`, server };
}

async function main(): Promise<void> {
  // Other work on the machine skews the figures: the 1-minute load average before the run says how much.
  const loadBefore = loadavg()[0];
  const config = benchConfig();
  const pool = createPool(config);
  const redis = createRedis({ host: config.REDIS_HOST, port: config.REDIS_PORT });
  const now = Date.now();
  const sale = await createSale(pool, {
    name: `bench-soldout-${randomUUID()}`,
    startsAt: new Date(now - 1000).toISOString(),
    endsAt: new Date(now + 3_600_000).toISOString(),
    paymentWindowMs: 600_000,
    items: [{ productId: 'bench', quantity: 0, priceMinor: 100, currency: 'EUR' }],
  });
  await loadSale(pool, new ReservationStore(redis), sale.saleId, false);
  const path = `/api/flash-sales/items/${sale.items[0].itemId}/purchase`;

  const api = await startApi(config);
  const bare = await startBareKoa();
  const results: Figures[] = [];
  try {
    for (const mode of ['one-token', 'many-tokens'] as const) {
      for (const [target, base] of [
        ['bare-koa', bare.url],
        ['flash-sale', api.url],
      ] as const) {
        if (WARMUP_S > 0) await runDriver({ url: `${base}${path}`, mode, durationS: WARMUP_S });
        const result = await runDriver({ url: `${base}${path}`, mode, durationS: DURATION_S });
        results.push(figures(target, mode, result));
        process.stderr.write(`  ${target} ${mode}: ${Math.round(result.requests.average)} req/s\n`);
      }
    }
  } finally {
    await api.close();
    await new Promise((r) => bare.server.close(r));
    await Promise.allSettled([pool.end(), redis.quit()]);
  }

  const ratio = (mode: Mode) => {
    const ours = results.find((r) => r.target === 'flash-sale' && r.mode === mode);
    const base = results.find((r) => r.target === 'bare-koa' && r.mode === mode);
    return ours && base ? ours.requestsPerS / base.requestsPerS : NaN;
  };
  const rows = results.map((r) => ({
    target: r.target,
    mode: r.mode,
    'req/s': Math.round(r.requestsPerS),
    'p50 ms': r.p50Ms,
    'p99 ms': r.p99Ms,
    requests: r.requests,
    'status 410': r.status410,
    other: r.other,
    errors: r.errors,
    timeouts: r.timeouts,
  }));
  console.log(`\nsold-out path, ${CONNECTIONS} connections, ${DURATION_S} s each, node ${process.version}, ${cpus().length} CPUs, load before ${loadBefore.toFixed(2)}`);
  console.table(rows);
  console.log(`ratio ours/bare (req/s): one token ${ratio('one-token').toFixed(3)}, ${TOKENS} tokens ${ratio('many-tokens').toFixed(3)}`);

  mkdirSync(join(__dirname, '..', 'reports'), { recursive: true });
  const line = {
    bench: 'soldout',
    date: new Date().toISOString(),
    node: process.version,
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model,
    loadavgBefore: loadBefore,
    connections: CONNECTIONS,
    durationS: DURATION_S,
    tokens: TOKENS,
    results,
    ratio: { oneToken: ratio('one-token'), manyTokens: ratio('many-tokens') },
  };
  appendFileSync(join(__dirname, '..', 'reports', 'bench.jsonl'), `${JSON.stringify(line)}\n`);
}

if (process.argv.includes('--drive')) {
  process.once('message', (request) => {
    drive(request as DriveRequest).then(
      (result) => process.send?.(result, () => process.exit(0)),
      (err) => {
        console.error(err);
        process.exit(1);
      },
    );
  });
} else {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
