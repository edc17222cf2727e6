/**
 * A throwaway Redis server of a suite's own (Debian's redis-server, which services.sh installs), on a free
 * loopback port with its data in a temporary folder: for faults that must not touch the stack's Redis, such as
 * a password changed under a running process.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { connect } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './processes';

export interface RedisServer {
  port: number;
  /** Its data folder, also a place for the suite's own files. */
  dir: string;
  /** Freezes the server (SIGSTOP): connections stay open, nothing is answered, as with a host that stalls. */
  pause(): void;
  /** Lets a paused server go on (SIGCONT). */
  resume(): void;
  stop(): Promise<void>;
}

/**
 * Starts redis-server with the given extra arguments (e.g. `--requirepass x`) and waits until it answers.
 * @throws when it does not answer within 10 s
 */
export async function startRedisServer(args: string[] = []): Promise<RedisServer> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'flash-sale-redis-'));
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, ...args], { stdio: 'ignore' });
  const deadline = Date.now() + 10_000;
  while (!(await answers(port))) {
    if (Date.now() > deadline || child.exitCode !== null) throw new Error(`redis-server on port ${port} did not answer`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    port,
    dir,
    pause: () => child.kill('SIGSTOP'),
    resume: () => child.kill('SIGCONT'),
    async stop() {
      child.kill('SIGCONT');
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGKILL');
        await once(child, 'exit');
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** @returns whether a server on the port answers a PING with a reply line (NOAUTH, from one with a password, is one) */
function answers(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.once('data', () => done(true));
    socket.once('error', () => done(false));
    socket.setTimeout(1000, () => done(false));
  });
}
