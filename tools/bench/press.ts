/**
 * The press path A/B (`npm run bench -- press`): the small demo (`--buyers 20000 --quantity 2000`) run
 * alternately on a pinned earlier commit and on this working tree, on the same stack, PRESS_ROUNDS rounds, so
 * that small costs cannot add up unseen (docs/performance.md, "The press path against its baseline").
 * The baseline runs from a git worktree of its own (.local/bench/press-<sha>, its own npm ci and build), on a
 * database (flash_sale_press_base, migrated by its own migrations) and a Redis database (REDIS_DB=2; the suites
 * use 1) of its own, so that neither side reads the other's schema or keys. Each round runs both, the side that goes first
 * alternating. Per run, from the demo's report: time to sold out (the last unit's 202, ms from the sale's
 * start), the API process's CPU per press answered before sold out (µs), and the drain's share of the cores
 * while buyers pressed (Temporal + worker + PostgreSQL CPU, as a share of the API's). Prints the medians and
 * the ratios this tree / baseline, and appends a JSON line to reports/bench.jsonl. Asserts nothing.
 *
 * Options (environment): PRESS_BASELINE (7378e15), PRESS_ROUNDS (3), PRESS_BUYERS (20000), PRESS_QUANTITY (2000).
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, openSync, readdirSync, readFileSync, statSync, symlinkSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { loadConfig } from '../../src/config';
import { createPool } from '../../src/infra/db';
import { createRedis } from '../../src/reservation/client';
import { appendResult, median } from '../shared/benchResults';

const ROOT = resolve(__dirname, '..', '..');
const BASELINE = process.env.PRESS_BASELINE ?? '7378e15';
const ROUNDS = Number(process.env.PRESS_ROUNDS ?? 3);
const DEMO_ARGS = ['--buyers', process.env.PRESS_BUYERS ?? '20000', '--quantity', process.env.PRESS_QUANTITY ?? '2000'];
const BASE_DATABASE = 'flash_sale_press_base';
/** The baseline's first sale id: far from this tree's own. */
const BASE_SALE_IDS = 1_000_000;

/** One tree the demo runs from, with what its processes need of their own. */
interface Side {
  name: 'baseline' | 'change';
  dir: string;
  env: NodeJS.ProcessEnv;
}

/** One demo's figures. */
interface Run {
  msToSoldOut: number;
  apiCpuUsPerPress: number;
  drainShareOfApi: number;
}

/** @throws when the command exits non-zero (its output was shown) */
function sh(cwd: string, env: NodeJS.ProcessEnv, command: string, ...args: string[]): void {
  const done = spawnSync(command, args, { cwd, env, stdio: 'inherit' });
  if (done.status !== 0) throw new Error(`${command} ${args.join(' ')} in ${cwd} exited ${done.status}`);
}

/** @returns the baseline's worktree, checked out, installed and built (kept between runs under .local/bench) */
function baselineTree(sha: string, env: NodeJS.ProcessEnv): string {
  const dir = join(ROOT, '.local', 'bench', `press-${sha.slice(0, 12)}`);
  if (!existsSync(dir)) sh(ROOT, env, 'git', 'worktree', 'add', '--detach', dir, sha);
  // Its own node_modules: a symlink to this tree's would be emptied by its own npm ci.
  if (!existsSync(join(dir, 'node_modules', '.bin', 'tsx'))) sh(dir, env, 'npm', 'ci', '--no-audit', '--no-fund');
  if (!existsSync(join(dir, 'dist'))) sh(dir, env, 'npm', 'run', '-s', 'build');
  // The demo reads the services' pid files and logs under its tree's .local: the one stack's.
  mkdirSync(join(dir, '.local'), { recursive: true });
  for (const entry of readdirSync(join(ROOT, '.local'))) {
    if (entry !== 'bench' && !existsSync(join(dir, '.local', entry))) symlinkSync(join(ROOT, '.local', entry), join(dir, '.local', entry));
  }
  return dir;
}

/** Creates the baseline's database if missing (the local role may create databases). */
async function baselineDatabase(): Promise<void> {
  const pool = createPool(loadConfig());
  try {
    const { rowCount } = await pool.query('SELECT 1 FROM pg_database WHERE datname = $1', [BASE_DATABASE]);
    if (!rowCount) await pool.query(`CREATE DATABASE ${BASE_DATABASE}`);
  } finally {
    await pool.end();
  }
}

/**
 * Readies the baseline's stores for a run: its sale ids far above this tree's (both share Temporal's namespace,
 * where an audit counts a sale's workflows by its SaleId), and its Redis database emptied (a run that failed
 * leaves its reservations behind).
 */
async function baselineStores(env: NodeJS.ProcessEnv): Promise<void> {
  const config = loadConfig(env);
  const pool = createPool(config);
  const redis = createRedis(config);
  try {
    const { rows } = await pool.query<{ top: number | null }>('SELECT max(id) AS top FROM sale_events');
    if ((rows[0].top ?? 0) < BASE_SALE_IDS) await pool.query(`ALTER TABLE sale_events ALTER COLUMN id RESTART WITH ${BASE_SALE_IDS}`);
    await redis.flushdb();
  } finally {
    await pool.end();
    redis.disconnect();
  }
}

/** @returns the newest demo report of a tree written after `sinceMs` */
function newestReport(dir: string, sinceMs: number): string {
  const reports = join(dir, 'reports');
  const found = readdirSync(reports)
    .filter((name) => name.startsWith('demo-') && existsSync(join(reports, name, 'report.json')))
    .map((name) => join(reports, name, 'report.json'))
    .filter((path) => statSync(path).mtimeMs >= sinceMs)
    .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs);
  if (!found.length) throw new Error(`no demo report in ${reports} since ${new Date(sinceMs).toISOString()}`);
  return found[0];
}

/** Runs one demo from a side's tree; its output goes to a log beside this run's. @returns its figures */
async function demo(side: Side, round: number, logDir: string): Promise<Run> {
  if (side.name === 'baseline') await baselineStores(side.env);
  const startedMs = Date.now();
  const log = openSync(join(logDir, `${side.name}-${round}.log`), 'w');
  const child = spawn(join(side.dir, 'node_modules', '.bin', 'tsx'), ['tools/demo/main.ts', ...DEMO_ARGS], { cwd: side.dir, env: side.env, stdio: ['ignore', log, log] });
  const code = await new Promise<number | null>((done) => child.on('exit', done));
  if (code !== 0) throw new Error(`the ${side.name} demo exited ${code}: ${join(logDir, `${side.name}-${round}.log`)}`);
  const report = JSON.parse(readFileSync(newestReport(side.dir, startedMs), 'utf8')) as {
    waves: { msToSoldOut: number | null }[];
    stampede: { answered: number; cpuMs: Record<string, number> };
  };
  const cpu = report.stampede.cpuMs;
  return {
    msToSoldOut: report.waves[0].msToSoldOut ?? Number.NaN,
    apiCpuUsPerPress: (cpu.api * 1000) / report.stampede.answered,
    drainShareOfApi: ((cpu.temporal ?? 0) + (cpu.worker ?? 0) + (cpu.postgres ?? 0)) / cpu.api,
  };
}

async function main(): Promise<void> {
  const env = { ...process.env, NODE_ENV: process.env.NODE_ENV ?? 'development' };
  const sha = spawnSync('git', ['rev-parse', BASELINE], { cwd: ROOT, encoding: 'utf8' }).stdout.trim();
  const head = spawnSync('git', ['rev-parse', '--short=12', 'HEAD'], { cwd: ROOT, encoding: 'utf8' }).stdout.trim();
  if (!sha) throw new Error(`PRESS_BASELINE ${BASELINE} names no commit`);
  const baseDir = baselineTree(sha, env);
  await baselineDatabase();
  const baseEnv = { ...env, PGDATABASE: BASE_DATABASE, REDIS_DB: '2' };
  sh(baseDir, baseEnv, 'node', 'dist/cli/migrate.js');
  const sides: Side[] = [
    { name: 'baseline', dir: baseDir, env: baseEnv },
    { name: 'change', dir: ROOT, env },
  ];
  const logDir = join(ROOT, 'reports', `press-${new Date().toISOString().replace(/[:.]/g, '-')}`);
  mkdirSync(logDir, { recursive: true });

  const runs: Record<Side['name'], Run[]> = { baseline: [], change: [] };
  for (let round = 1; round <= ROUNDS; round += 1) {
    for (const side of round % 2 ? sides : [...sides].reverse()) {
      const run = await demo(side, round, logDir);
      runs[side.name].push(run);
      console.log(`round ${round} ${side.name.padEnd(8)} sold out ${run.msToSoldOut} ms, API ${run.apiCpuUsPerPress.toFixed(0)} µs CPU per press, drain ${(100 * run.drainShareOfApi).toFixed(0)} % of the API's CPU`);
    }
  }

  const medians = (side: Side['name']) => ({
    msToSoldOut: median(runs[side].map((r) => r.msToSoldOut)),
    apiCpuUsPerPress: median(runs[side].map((r) => r.apiCpuUsPerPress)),
    drainShareOfApi: median(runs[side].map((r) => r.drainShareOfApi)),
  });
  const base = medians('baseline');
  const change = medians('change');
  const ratios = {
    msToSoldOut: change.msToSoldOut / base.msToSoldOut,
    apiCpuUsPerPress: change.apiCpuUsPerPress / base.apiCpuUsPerPress,
  };
  console.log(`\nmedians of ${ROUNDS} rounds, demo ${DEMO_ARGS.join(' ')}; baseline ${sha.slice(0, 12)}, change ${head} (working tree)`);
  console.log('| | baseline | change | change / baseline |\n|---|---|---|---|');
  console.log(`| sold out, ms | ${base.msToSoldOut} | ${change.msToSoldOut} | ${ratios.msToSoldOut.toFixed(2)} |`);
  console.log(`| API CPU per press before sold out, µs | ${base.apiCpuUsPerPress.toFixed(0)} | ${change.apiCpuUsPerPress.toFixed(0)} | ${ratios.apiCpuUsPerPress.toFixed(2)} |`);
  console.log(`| Temporal + worker + PostgreSQL CPU while pressing, share of the API's | ${(100 * base.drainShareOfApi).toFixed(0)} % | ${(100 * change.drainShareOfApi).toFixed(0)} % | |`);
  console.log(`logs: ${logDir}`);
  appendResult('press', { baseline: sha.slice(0, 12), change: head, rounds: ROUNDS, demo: DEMO_ARGS.join(' '), runs, medians: { baseline: base, change }, ratios });
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
