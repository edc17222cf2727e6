/**
 * Benchmark of the sold-out path (`npx tsx tools/bench/soldout.ts`): the real API (startApi) answering a sold-out
 * item (quantity-0 sale, loaded, so after the first request the in-memory flag answers), side by side in the
 * same run with a bare Koa server that answers the same 410 `{"error":"SOLD_OUT"}` and does nothing else.
 * Each server runs in its own process, and each is driven in turn by autocannon (library, in another child
 * process) over loopback, in two modes: `repeat-token`, one buyer token on every request (an impatient buyer
 * pressing again), and `fresh-tokens`, a token the server has never seen on every request (a crowd's first
 * presses). A sold-out item answers before any token is verified, so the two modes differ only in the bytes
 * sent. On Linux with two or more CPUs the servers are pinned to CPU 0
 * and the load generator to CPU 1. A single run's rate moves by ±15% on a small VM, so each mode runs ROUNDS
 * rounds of the targets back to back (rotating which goes first) and the headline is the median of the
 * per-round ratios. A second, identical bare server runs in every round too:
 * its ratio to the first is this run's noise band (an A/A test). Beside req/s it prints the server's CPU
 * time per request (process.cpuUsage of the server's process, all its threads). Appends a JSON line to
 * reports/bench.jsonl. Asserts nothing. The API runs as deployed, purchase gate and rate limits on (both stand
 * after the sold-out answer); every request carries the sale's gate, as the sale page's do, and the crowd's one
 * client IP (loopback) has its limit lifted (CROWD_IP_LIMIT).
 *
 * Options (environment): BENCH_DURATION_S (5), BENCH_ROUNDS (5), BENCH_CONNECTIONS (100), BENCH_WARMUP_S (2),
 * BENCH_MODES (repeat-token,fresh-tokens), BENCH_PIN (1; 0 leaves scheduling to the OS); the API's own
 * variables apply too.
 */
import { fork } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { cpus, loadavg } from 'node:os';
import autocannon from 'autocannon';
import { createSigner } from 'fast-jwt';
import Koa from 'koa';
import { startApi } from '../../src/api/main';
import { SaleGates } from '../../src/api/saleGate';
import { loadConfig, type Config } from '../../src/config';
import { createPool } from '../../src/infra/db';
import { ReservationStore } from '../../src/reservation/store';
import { createRedis, type FlashRedis } from '../../src/reservation/client';
import type { Pool } from 'pg';
import { SaleLayouts } from '../../src/reservation/layout';
import { appendResult, median } from '../shared/benchResults';
import { CROWD_IP_LIMIT } from '../../test/support/crowd';
import { pinTo } from '../../test/support/processes';
import { createSale, loadSale } from '../../src/sale/sales';
import { shardPlacer } from '../../src/reservation/placement';

const DURATION_S = Number(process.env.BENCH_DURATION_S ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 100);
// More than a run can send at the rates seen here (≤ 14k req/s), so no fresh token is ever used twice.
const FRESH_TOKENS_PER_S = 20_000;
const WARMUP_S = Number(process.env.BENCH_WARMUP_S ?? 2);
// Servers on CPU 0, load generator on CPU 1, so the two do not take turns on the same core.
const PIN = process.env.BENCH_PIN !== '0' && process.platform === 'linux' && cpus().length >= 2;
const MODES = (process.env.BENCH_MODES ?? 'repeat-token,fresh-tokens').split(',') as Mode[];

type Mode = 'repeat-token' | 'fresh-tokens';

interface DriveRequest {
  url: string;
  mode: Mode;
  durationS: number;
  /** The sale's purchase gate (Sale-Gate header). */
  gate: string;
}

/** bare-koa-2 is a second, identical bare server: bare-koa-2/bare-koa is the run's own noise band (an A/A test). */
type Target = 'flash-sale' | 'bare-koa' | 'bare-koa-2';
const TARGETS: Target[] = ['bare-koa', 'flash-sale', 'bare-koa-2'];

interface Figures {
  target: Target;
  mode: Mode;
  round: number;
  requestsPerS: number;
  /** CPU time of the server process per answered request, µs. */
  cpuUsPerRequest: number;
  p50Ms: number;
  p99Ms: number;
  requests: number;
  status410: number;
  other: number;
  errors: number;
  timeouts: number;
}

function benchConfig(): Config {
  return loadConfig({ ...process.env, LOG_LEVEL: 'silent', API_PORT: '0', INTERNAL_API_PORT: '0', TEMPORAL_TASK_QUEUE: `bench-${randomUUID()}`, RATE_LIMIT_PER_IP: String(CROWD_IP_LIMIT) });
}

/** Buyer tokens with subjects unique to this call, so no two driver runs share one. */
function signTokens(config: Config, count: number): string[] {
  const sign = createSigner({ key: config.JWT_SECRET, algorithm: 'HS256', expiresIn: 3_600_000 });
  const run = randomUUID().slice(0, 8);
  return Array.from({ length: count }, (_, i) => sign({ sub: `bench-${run}-${i}` }));
}

/** Child process: runs autocannon against one URL and sends the result back. */
function drive({ url, mode, durationS, gate }: DriveRequest): Promise<autocannon.Result> {
  const tokens = signTokens(benchConfig(), mode === 'repeat-token' ? 1 : Math.ceil(durationS * FRESH_TOKENS_PER_S));
  let next = 0;
  return autocannon({
    url,
    method: 'POST',
    connections: CONNECTIONS,
    duration: durationS,
    headers: { authorization: `Bearer ${tokens[0]}`, 'sale-gate': gate },
    requests:
      mode === 'repeat-token'
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

function figures(target: Target, mode: Mode, round: number, result: autocannon.Result, cpuUs: number): Figures {
  const stats = (result.statusCodeStats ?? {}) as Record<string, { count?: number }>;
  const status410 = Number(stats['410']?.count ?? 0);
  const total = Object.values(stats).reduce((sum, s) => sum + Number(s.count ?? 0), 0);
  return {
    target,
    mode,
    round,
    requestsPerS: result.requests.average,
    cpuUsPerRequest: total > 0 ? cpuUs / total : NaN,
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
async function startBareKoa(): Promise<{ url: string; close(): Promise<void> }> {
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
  return {
    url: `http://127.0.0.1:${port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** What a server process says: its base URL once listening, then its CPU time so far (µs) when asked. */
type ServerMessage = { url: string } | { cpuUs: number };

/**
 * Server process (`--serve <target>`): serves one target on its own, so no two servers share a heap, a JIT or
 * a garbage collection. Answers 'cpu' with its CPU time so far and exits on 'stop'.
 */
async function serve(target: Target): Promise<void> {
  if (PIN) pinTo(process.pid, '0');
  const { url, close } = target === 'flash-sale' ? await startApi(benchConfig()) : await startBareKoa();
  process.on('message', (message) => {
    if (message === 'cpu') {
      const { user, system } = process.cpuUsage();
      process.send?.({ cpuUs: user + system });
    } else if (message === 'stop') {
      void close().then(() => process.exit(0));
    }
  });
  process.send?.({ url });
}

interface ServerProcess {
  url: string;
  cpuUs(): Promise<number>;
  stop(): Promise<void>;
}

async function startServerProcess(target: Target): Promise<ServerProcess> {
  const child = fork(__filename, ['--serve', target], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const next = () =>
    new Promise<ServerMessage>((resolve, reject) => {
      const exited = (code: number | null) => reject(new Error(`${target} server exited with ${code}`));
      child.once('exit', exited);
      child.once('message', (message) => {
        child.off('exit', exited);
        resolve(message as ServerMessage);
      });
    });
  const { url } = (await next()) as { url: string };
  return {
    url,
    async cpuUs() {
      child.send('cpu');
      return ((await next()) as { cpuUs: number }).cpuUs;
    },
    async stop() {
      child.send('stop');
      await once(child, 'exit');
    },
  };
}

/** A sold-out item of a sale open now: its purchase path and its gate. */
async function soldOutItem(): Promise<{ path: string; gate: string; pool: Pool; redis: FlashRedis }> {
  const config = benchConfig();
  const pool = createPool(config);
  const redis = createRedis(config);
  const store = new ReservationStore(redis, new SaleLayouts(pool));
  const now = Date.now();
  const sale = await createSale(pool, {
    name: `bench-soldout-${randomUUID()}`,
    startsAt: new Date(now - 1000).toISOString(),
    endsAt: new Date(now + 3_600_000).toISOString(),
    paymentWindowMs: 600_000,
    items: [{ productId: 'bench', quantity: 0, priceMinor: 100, currency: 'EUR' }],
  }, shardPlacer(store.redis));
  await loadSale(pool, store, sale.saleId, false);
  return { path: `/api/flash-sales/items/${sale.items[0].itemId}/purchase`, gate: new SaleGates(config.SALE_GATE_SECRET).of(sale.saleId), pool, redis };
}

async function main(): Promise<void> {
  // Other work on the machine skews the figures: the 1-minute load average before the run says how much.
  const loadBefore = loadavg()[0];
  // The bench itself idles during a round: it shares the load generator's CPU.
  const pinned = PIN && pinTo(process.pid, '1');
  const { path, gate, pool, redis } = await soldOutItem();
  const servers = new Map<Target, ServerProcess>();
  const results: Figures[] = [];
  try {
    for (const target of TARGETS) servers.set(target, await startServerProcess(target));
    const url = (target: Target) => `${servers.get(target)?.url}${path}`;
    for (const mode of MODES) {
      for (const target of TARGETS) {
        if (WARMUP_S > 0) await runDriver({ url: url(target), mode, durationS: WARMUP_S, gate });
      }
      for (let round = 1; round <= ROUNDS; round++) {
        // Rotating the order cancels a drift of the machine's speed over the rounds.
        const order = TARGETS.map((_, i) => TARGETS[(i + round) % TARGETS.length]);
        for (const target of order) {
          const server = servers.get(target) as ServerProcess;
          const cpuBefore = await server.cpuUs();
          const result = await runDriver({ url: url(target), mode, durationS: DURATION_S, gate });
          results.push(figures(target, mode, round, result, (await server.cpuUs()) - cpuBefore));
          process.stderr.write(`  ${mode} round ${round} ${target}: ${Math.round(result.requests.average)} req/s\n`);
        }
      }
    }
  } finally {
    await Promise.allSettled([...servers.values()].map((server) => server.stop()));
    await Promise.allSettled([pool.end(), redis.quit()]);
  }
  report(results, loadBefore, pinned);
}

/** Prints every round and the ratios, and appends them to reports/bench.jsonl. */
function report(results: Figures[], loadBefore: number, pinned: boolean): void {
  const rate = (target: Target, mode: Mode, round: number) =>
    results.find((r) => r.target === target && r.mode === mode && r.round === round)?.requestsPerS ?? NaN;
  const roundRatios = (mode: Mode, target: Target = 'flash-sale') =>
    Array.from({ length: ROUNDS }, (_, i) => rate(target, mode, i + 1) / rate('bare-koa', mode, i + 1));
  const rows = results.map((r) => ({
    mode: r.mode,
    round: r.round,
    target: r.target,
    'req/s': Math.round(r.requestsPerS),
    'cpu µs/req': Number(r.cpuUsPerRequest.toFixed(1)),
    'p50 ms': r.p50Ms,
    'p99 ms': r.p99Ms,
    requests: r.requests,
    'status 410': r.status410,
    other: r.other,
    errors: r.errors,
    timeouts: r.timeouts,
  }));
  console.log(
    `\nsold-out path, ${CONNECTIONS} connections, ${ROUNDS} rounds of ${DURATION_S} s per target and mode, node ${process.version}, ${cpus().length} CPUs, load before ${loadBefore.toFixed(2)}, ${pinned ? 'servers pinned to CPU 0, load generator to CPU 1' : 'not pinned'}`,
  );
  console.table(rows);
  const cpuPerRequest = (target: Target, mode: Mode) =>
    median(results.filter((r) => r.target === target && r.mode === mode).map((r) => r.cpuUsPerRequest));
  const byMode = (value: (mode: Mode) => unknown) => Object.fromEntries(MODES.map((mode) => [mode, value(mode)]));
  const byRound = (ratios: number[]) => ratios.map((r) => r.toFixed(3)).join(', ');
  for (const mode of MODES) {
    const [bareCpu, oursCpu] = [cpuPerRequest('bare-koa', mode), cpuPerRequest('flash-sale', mode)];
    console.log(
      `${mode}: ratio ours/bare (req/s) by round ${byRound(roundRatios(mode))}; median ${median(roundRatios(mode)).toFixed(3)}` +
        ` | server CPU per request (median): bare ${bareCpu.toFixed(1)} µs, ours ${oursCpu.toFixed(1)} µs (bare/ours ${(bareCpu / oursCpu).toFixed(3)})` +
        `\n  noise band: bare-2/bare (the same server twice) by round ${byRound(roundRatios(mode, 'bare-koa-2'))}; median ${median(roundRatios(mode, 'bare-koa-2')).toFixed(3)}`,
    );
  }

  appendResult('soldout', {
    loadavgBefore: loadBefore,
    connections: CONNECTIONS,
    durationS: DURATION_S,
    rounds: ROUNDS,
    results,
    pinned,
    roundRatios: byMode((mode) => roundRatios(mode)),
    ratio: byMode((mode) => median(roundRatios(mode))),
    calibration: byMode((mode) => median(roundRatios(mode, 'bare-koa-2'))),
  });
}

const serveAt = process.argv.indexOf('--serve');
if (serveAt >= 0) {
  serve(process.argv[serveAt + 1] as Target).catch((err) => {
    console.error(err);
    process.exit(1);
  });
} else if (process.argv.includes('--drive')) {
  if (PIN) pinTo(process.pid, '1');
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
