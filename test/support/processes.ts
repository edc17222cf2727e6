/** Starts the API and the worker as child processes (as an operator would run them, compiled) and stops them, on ports found free. */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createWriteStream, mkdirSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { dirname, join } from 'node:path';

const ROOT = join(__dirname, '..', '..');

export interface Child {
  name: string;
  process: ChildProcess;
  /** Resolves when the child printed a line containing readyText. @throws if it exits first or times out */
  ready: Promise<void>;
  stop(): Promise<void>;
}

/**
 * Runs a script with env, logging to logFile: compiled JavaScript (the services as `npm run build` made them,
 * dist/…) on plain node, as production runs it; TypeScript (a tool of ours) through tsx.
 * @param readyText text of the log line that says the process is serving
 * @param options.nice run it at this niceness (`nice -n`), all of its threads: background work that yields the
 *   CPU to the front door when they share a machine
 * @param options.timeoutMs how long readiness may take
 */
export function startChild(
  name: string,
  script: string,
  env: NodeJS.ProcessEnv,
  logFile: string,
  readyText: string,
  options: { nice?: number; timeoutMs?: number } = {},
): Child {
  const { nice = 0, timeoutMs = 90_000 } = options;
  const argv = script.endsWith('.ts') ? [process.execPath, '--import', 'tsx', join(ROOT, script)] : [process.execPath, join(ROOT, script)];
  const [command, ...args] = nice ? ['nice', '-n', String(nice), ...argv] : argv;
  const child = spawn(command, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  mkdirSync(dirname(logFile), { recursive: true });
  const log = createWriteStream(logFile);
  child.stdout.pipe(log);
  child.stderr.pipe(log);
  const ready = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name} not ready after ${timeoutMs} ms; see ${logFile}`)), timeoutMs);
    child.stdout.on('data', (chunk: Buffer) => {
      if (chunk.toString().includes(readyText)) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited with code ${code} before it was ready; see ${logFile}`));
    });
  });
  ready.catch(() => undefined);
  return {
    name,
    process: child,
    ready,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** @returns a loopback TCP port that was free a moment ago (for a child process's API_PORT) */
export async function freePort(): Promise<number> {
  const probe = createServer().listen(0, '127.0.0.1');
  await once(probe, 'listening');
  const { port } = probe.address() as AddressInfo;
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

/**
 * Pins a process and all its threads to CPUs (taskset), so that a bench's load generator and its servers do not
 * take turns on one core; says so on stderr and goes on unpinned when it cannot.
 * @param cpus a CPU list as taskset takes it: `0`, `0-1`
 * @returns whether it is pinned
 */
export function pinTo(pid: number, cpus: string): boolean {
  try {
    execFileSync('taskset', ['--all-tasks', '--cpu-list', '--pid', cpus, String(pid)], { stdio: 'ignore' });
    return true;
  } catch (err) {
    process.stderr.write(`pid ${pid} not pinned to CPU ${cpus}: ${(err as Error).message}\n`);
    return false;
  }
}

/**
 * Polls probe every 50 ms until it returns a value other than undefined or false (returned), or throws
 * "timed out waiting for <what>" after timeoutMs. Errors from probe are not retried.
 */
export async function until<T>(what: string, probe: () => Promise<T | undefined | false>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const value = await probe();
    if (value !== undefined && value !== false) return value;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}
