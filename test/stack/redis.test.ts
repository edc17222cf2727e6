/**
 * Redis as scripts/services.sh runs it: answers on 127.0.0.1:REDIS_PORT, round-trips a value, runs Lua (the
 * reservation scripts depend on it) and persists with an append-only file.
 */
import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import { stackEnv } from '../../scripts/stack-env';

const env = stackEnv();
// Few reconnects: when Redis is down the suite must fail, not retry until Jest's timeout (or forever in afterAll).
const redis = new Redis({
  host: '127.0.0.1',
  port: Number(env.REDIS_PORT),
  db: Number(process.env.REDIS_DB ?? 0), // the suites' own logical database (test/support/environment.ts)
  lazyConnect: true,
  maxRetriesPerRequest: 1,
  retryStrategy: (attempt) => (attempt > 3 ? null : 200),
});
const key = `stack-test:{${randomUUID()}}`;

beforeAll(() => redis.connect());

afterAll(async () => {
  await redis.del(key).catch(() => undefined);
  redis.disconnect();
});

test('a value written is read back, and gone once deleted', async () => {
  const value = randomUUID();
  expect(await redis.set(key, value, 'PX', 60_000)).toBe('OK');
  expect(await redis.get(key)).toBe(value);
  expect(await redis.pttl(key)).toBeGreaterThan(0);
  expect(await redis.del(key)).toBe(1);
  expect(await redis.get(key)).toBeNull();
});

test('runs a Lua script atomically on the keys it is given', async () => {
  const incrementBy = "return redis.call('INCRBY', KEYS[1], ARGV[1])";
  expect(await redis.eval(incrementBy, 1, key, 5)).toBe(5);
  expect(await redis.eval(incrementBy, 1, key, 7)).toBe(12);
});

test('is our instance: loopback only, with the append-only file on', async () => {
  expect(await redis.config('GET', 'appendonly')).toEqual(['appendonly', 'yes']);
  expect(await redis.config('GET', 'bind')).toEqual(['bind', '127.0.0.1']);
});
