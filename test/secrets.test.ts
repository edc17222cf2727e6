/**
 * No credential in a log line or an error: the error of a Redis AUTH refused with the password the process
 * holds (ioredis hangs `AUTH <password>` on it, and on every command queued behind it) logs without the
 * password, and a DATABASE_URL refused at start is echoed with its password blotted out.
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { promisify } from 'node:util';
import Redis from 'ioredis';
import { createLogger } from '../src/infra/logger';
import { createRedis } from '../src/reservation/client';
import { testConfig } from './support/helpers';
import { startRedisServer, type RedisServer } from './support/redisServer';

const ROOT = join(__dirname, '..');
const PASSWORD = `first-${randomUUID()}`;
let server: RedisServer;

beforeAll(async () => {
  server = await startRedisServer(['--requirepass', PASSWORD]);
});

afterAll(() => server?.stop());

test("the error of a refused AUTH, logged, carries the command's name and not the password", async () => {
  const redis = createRedis(testConfig({ REDIS_PORT: String(server.port), REDIS_DB: '0', REDIS_PASSWORD: PASSWORD }));
  const errors: Error[] = [];
  redis.on('error', (err: Error) => errors.push(err));
  try {
    await once(redis, 'ready');
    // The password changes under the running client, and its connection drops: its reconnect's AUTH is refused.
    const admin = new Redis({ port: server.port, password: PASSWORD });
    await admin.config('SET', 'requirepass', `second-${randomUUID()}`);
    await admin.client('KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
    admin.disconnect();
    while (!errors.some((e) => /WRONGPASS/.test(e.message))) await once(redis, 'error');
  } finally {
    redis.disconnect();
  }
  const refused = errors.find((e) => /WRONGPASS/.test(e.message)) as Error & { command?: { name: string; args: string[] } };
  // The driver's error holds the password: what the logger must not print.
  expect(refused.command).toEqual({ name: 'auth', args: [PASSWORD] });
  const lines = new PassThrough();
  const chunks: string[] = [];
  lines.on('data', (chunk: Buffer) => chunks.push(chunk.toString()));
  const log = createLogger('info', 'secrets-test', lines);
  log.warn({ err: refused }, 'redis refused the credentials');
  log.warn({ error: refused, cause: { err: refused } }, 'the same, under other keys');
  const printed = chunks.join('');
  expect(printed).toContain('WRONGPASS');
  expect(printed).toContain('"command":{"name":"auth"}');
  expect(printed).not.toContain(PASSWORD);
});

test('a DATABASE_URL refused at start is echoed with its password blotted out', async () => {
  const run = await promisify(execFile)(process.execPath, [join(ROOT, 'dist', 'api', 'main.js')], {
    env: { ...process.env, DATABASE_URL: 'postgres://app:S3cr3tPw@db:99999/x' },
    timeout: 30_000,
  }).then(
    () => ({ code: 0, output: '' }),
    (err: { code?: number; stdout?: string; stderr?: string }) => ({ code: err.code, output: `${err.stdout ?? ''}${err.stderr ?? ''}` }),
  );
  expect(run.code).toBe(1);
  expect(run.output).toContain('postgres://app:***@db:99999/x');
  expect(run.output).not.toContain('S3cr3tPw');
});
