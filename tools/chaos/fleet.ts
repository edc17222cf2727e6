/** The campaign's processes (two APIs, two workers, Temporal behind a relay) and the stack's services it stops and starts. */
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort, startChild, type Child } from '../../test/support/processes';
import { type Relay } from '../../test/support/relay';

const ROOT = join(__dirname, '..', '..');
const run = promisify(execFile);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The processes and connections a campaign owns; faults act on these and on the stack. */
export class Fleet {
  /** Each API slot's process, its public door's port and its internal door's (payments), kept across restarts. */
  apis: (Child & { port: number; internalPort: number })[] = [];
  workers: Child[] = [];
  private incarnation = 0;

  constructor(
    readonly env: NodeJS.ProcessEnv,
    readonly dir: string,
    readonly relay: Relay,
  ) {}

  /** Each slot's start in progress ('api-0', 'worker-1', …), so that a fault on a slot waits for it. */
  private readonly starting = new Map<string, Promise<void>>();

  async startApi(i: number): Promise<void> {
    const port = this.apis[i]?.port ?? (await freePort());
    const internalPort = this.apis[i]?.internalPort ?? (await freePort());
    await this.supervise(
      `api-${i}`,
      () => {
        const env = { ...this.env, API_PORT: String(port), INTERNAL_API_PORT: String(internalPort) };
        const child = startChild(`api-${i}`, 'dist/api/main.js', env, join(this.dir, `api-${i}.${++this.incarnation}.log`), 'api listening');
        return (this.apis[i] = Object.assign(child, { port, internalPort }));
      },
      () => this.apis[i],
    );
  }

  async startWorker(i: number): Promise<void> {
    await this.supervise(
      `worker-${i}`,
      () => (this.workers[i] = startChild(`worker-${i}`, 'dist/worker/main.js', this.env, join(this.dir, `worker-${i}.${++this.incarnation}.log`), 'worker running')),
      () => this.workers[i],
    );
  }

  /** Waits until the slot's start in progress, if any, has ended (up, or given up). */
  async settled(slot: string): Promise<void> {
    await this.starting.get(slot)?.catch(() => undefined);
  }

  /**
   * Starts a slot's process as a supervisor would: a process exits at start when a service it needs is away (a
   * worker without Temporal, an API without Redis), as the campaign's other faults can make it; it is started
   * again, every 2 s, up to 30 times.
   */
  private async supervise(slot: string, start: () => Child, current: () => Child | undefined): Promise<void> {
    await this.settled(slot);
    // Two repairs of one slot (two kills of it, each restarting it): the second finds it up, and leaves it.
    const running = current();
    if (running && running.process.exitCode === null && running.process.signalCode === null) return;
    const run = (async () => {
      for (let attempt = 1; ; attempt++) {
        try {
          return await start().ready;
        } catch (err) {
          if (attempt >= 30) throw err;
          await sleep(2000);
        }
      }
    })();
    this.starting.set(slot, run);
    await run;
  }

  /** Starts again whatever is not running. */
  async heal(): Promise<void> {
    await Promise.all([
      ...this.apis.map((c, i) => (c.process.exitCode !== null || c.process.signalCode !== null ? this.startApi(i) : undefined)),
      ...this.workers.map((c, i) => (c.process.exitCode !== null || c.process.signalCode !== null ? this.startWorker(i) : undefined)),
    ]);
  }

  async stop(): Promise<void> {
    await Promise.allSettled([...this.apis, ...this.workers].map((c) => c.stop()));
  }

  /** @returns the reconciler's repairs in the sale, by kind, as every incarnation of the API processes logged them */
  repairsOf(saleId: number): Record<string, number> {
    const counts: Record<string, number> = {};
    for (const file of readdirSync(this.dir).filter((f) => f.startsWith('api-') && f.endsWith('.log'))) {
      for (const line of readFileSync(join(this.dir, file), 'utf8').split('\n')) {
        if (!line.includes('reconciler repaired Redis')) continue;
        const entry = JSON.parse(line) as { saleId?: number; repair?: string };
        if (entry.saleId === saleId && entry.repair) counts[entry.repair] = (counts[entry.repair] ?? 0) + 1;
      }
    }
    return counts;
  }
}

let stackTurn: Promise<unknown> = Promise.resolve();
/**
 * Runs fn once every stack action before it has ended. A fault drawn to strike while another fault's repair
 * runs `services.sh up` (a Redis SIGKILL just after up saw Redis ready) would fail that repair, not the product.
 */
export function onStack<T>(fn: () => Promise<T>): Promise<T> {
  const turn = stackTurn.then(fn, fn);
  stackTurn = turn.catch(() => undefined);
  return turn;
}

/** Runs scripts/services.sh; a failure throws with the script's own output, which names the service and its log. */
export const services = (...args: string[]) => onStack(() => servicesNow(args));

/** How long `up` waits before its second and last try: a cluster node just restarted may answer a moment late. */
const UP_AGAIN_MS = 5000;

async function servicesNow(args: string[]): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await run('bash', [join(ROOT, 'scripts', 'services.sh'), ...args], { cwd: ROOT, timeout: 180_000 });
      return;
    } catch (err) {
      const { stdout = '', stderr = '' } = err as { stdout?: string; stderr?: string };
      // A Redis Cluster node a fault killed may still be silent when status looks (a cluster campaign stopped so).
      if (args[0] === 'up' && attempt === 1 && /unhealthy/.test(stdout + stderr)) {
        await new Promise((resolve) => setTimeout(resolve, UP_AGAIN_MS));
        continue;
      }
      throw new Error(`services.sh ${args.join(' ')} failed:\n${stdout}${stderr}`);
    }
  }
}
/**
 * @returns the pid in the stack's pid file when that process runs and is the named program, else undefined
 * (a SIGKILLed server leaves its pid file behind, and the pid may since belong to another process)
 */
export function livePid(file: string, program: string): number | undefined {
  try {
    const pid = Number(readFileSync(join(ROOT, '.local', file), 'utf8').split('\n')[0]);
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === program ? pid : undefined;
  } catch {
    return undefined;
  }
}

