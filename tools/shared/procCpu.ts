/**
 * CPU time of the stack's processes, read from /proc (Linux): a process with all its threads, plus its
 * children alive now and those it has reaped. Used by tools/bench/drain.ts and the demo report to charge each
 * order's cost to Temporal, PostgreSQL and the worker.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const ROOT = join(__dirname, '..', '..');

const TICKS_PER_S = 100; // USER_HZ, the unit of /proc/<pid>/stat times on Linux (getconf CLK_TCK)

interface Stat {
  ppid: number;
  /** utime + stime, ms. */
  ownMs: number;
  /** cutime + cstime of reaped children, ms. */
  reapedMs: number;
}

function stat(pid: number): Stat | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // Fields after the command name, which is in parentheses and may hold spaces: state is field 3.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  const ticks = (field: number) => Number(fields[field - 3]);
  return { ppid: ticks(4), ownMs: ((ticks(14) + ticks(15)) * 1000) / TICKS_PER_S, reapedMs: ((ticks(16) + ticks(17)) * 1000) / TICKS_PER_S };
}

/**
 * @param roots a name per root of a process tree (e.g. the postmaster), or per set of roots (a cluster's nodes)
 * @returns per name, CPU ms spent so far by its trees: each root, its descendants alive now, and everything they
 *   reaped; 0 for a root that is gone. One pass over /proc serves all roots.
 */
export function treesCpuMs<K extends string>(roots: Record<K, number | readonly number[]>): Record<K, number> {
  const stats = new Map<number, Stat>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const s = stat(Number(entry));
    if (s) stats.set(Number(entry), s);
  }
  const visit = (p: number): number => {
    const s = stats.get(p);
    if (!s) return 0;
    let total = s.ownMs + s.reapedMs;
    for (const [child, cs] of stats) if (cs.ppid === p) total += visit(child);
    return total;
  };
  return Object.fromEntries(
    Object.entries<number | readonly number[]>(roots).map(([name, pids]) => [name, (typeof pids === 'number' ? [pids] : pids).reduce((n, pid) => n + visit(pid), 0)]),
  ) as Record<K, number>;
}

/**
 * The pid a service of scripts/services.sh recorded (first line of its pid file under .local).
 * @param file e.g. 'temporal/temporal.pid', 'pg/data/postmaster.pid'
 * @throws when the file is missing (the stack is not up)
 */
export function stackPid(file: string): number {
  return Number(readFileSync(join(ROOT, '.local', file), 'utf8').split('\n')[0]);
}

/** @returns the pids of the Redis the run uses: the local cluster's six nodes when env sets REDIS_CLUSTER_NODES, else the single node */
function redisPids(env: NodeJS.ProcessEnv): number[] {
  if (!env.REDIS_CLUSTER_NODES) return [stackPid('redis/redis.pid')];
  const dir = join(ROOT, '.local', 'cluster');
  return readdirSync(dir)
    .filter((entry) => /^\d+$/.test(entry))
    .map((port) => stackPid(`cluster/${port}/redis.pid`));
}

/** The real Temporal server's four processes (scripts/temporal-server-stack.sh). */
const SERVER_SERVICES = ['frontend', 'history', 'matching', 'worker'] as const;

/** @returns a setting of .local/temporal-server/server.env, which `services.sh up --temporal-server` writes */
function realServerSetting(name: string): string | undefined {
  const serverEnv = join(ROOT, '.local', 'temporal-server', 'server.env');
  return existsSync(serverEnv) ? new RegExp(`^${name}=(.+)$`, 'm').exec(readFileSync(serverEnv, 'utf8'))?.[1] : undefined;
}

/** @returns the real Temporal server's frontend port when `services.sh up --temporal-server` made it, else undefined */
export function realServerPort(): string | undefined {
  return realServerSetting('TEMPORAL_PORT');
}

/** @returns the Prometheus endpoints (URLs) of the real Temporal server's four services; none when it was not made */
export function realServerMetrics(): string[] {
  return (realServerSetting('TEMPORAL_SERVER_METRICS') ?? '').split(',').filter(Boolean).map((hostPort) => `http://${hostPort}/metrics`);
}

/** @returns the real server's services by name, each its process id (from their pid files) */
export function realServerPids(): Record<(typeof SERVER_SERVICES)[number], number> {
  return Object.fromEntries(SERVER_SERVICES.map((service) => [service, stackPid(`temporal-server/${service}.pid`)])) as Record<(typeof SERVER_SERVICES)[number], number>;
}

/** @returns whether a TEMPORAL_PORT names the real server's frontend (services.sh up --temporal-server made it) */
export function onRealServer(temporalPort: string | number | undefined): boolean {
  const serverPort = realServerPort();
  return serverPort !== undefined && temporalPort !== undefined && String(temporalPort) === serverPort;
}

/**
 * @returns the pids of the Temporal the run uses: the real server's four services when TEMPORAL_PORT names its
 *   frontend, else the dev server
 */
export function temporalPids(env: NodeJS.ProcessEnv = process.env): number[] {
  if (onRealServer(env.TEMPORAL_PORT)) return Object.values(realServerPids());
  return [stackPid('temporal/temporal.pid')];
}

/** The parts of the machine a run's CPU is charged to; `crowd` is the calling process (the load generator). */
export const MACHINE_PARTS = ['crowd', 'api', 'redis', 'temporal', 'worker', 'postgres'] as const;
export type MachineCpu = Record<(typeof MACHINE_PARTS)[number], number>;

/**
 * @param pids the API's and the worker's process ids; the stack's Redis, Temporal and PostgreSQL are found from
 *   their pid files
 * @param env the environment the measured processes run with: it says which Redis (and Temporal) they use
 * @returns a reader of the CPU ms each part has spent so far (one pass over /proc per call)
 * @throws when the stack is not up
 */
export function machineCpu(pids: { api: number; worker: number }, env: NodeJS.ProcessEnv = process.env): () => MachineCpu {
  const roots = { ...pids, redis: redisPids(env), temporal: temporalPids(env), postgres: stackPid('pg/data/postmaster.pid') };
  return () => {
    const own = process.cpuUsage();
    return { crowd: (own.user + own.system) / 1000, ...treesCpuMs(roots) };
  };
}
