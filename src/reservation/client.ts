/**
 * The service's Redis client, one node or a cluster, with the scripts of lua/ defined and no resend: ioredis
 * resends by default what a dropped connection left unanswered, though Redis may have run it. Here a command whose
 * outcome is unknown fails (isOutcomeUnknown), and the caller reruns it only if it is idempotent, as every script
 * of lua/ is per orderId (docs/design.md, Retries).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import Redis, { Cluster, type ClusterOptions, type RedisOptions } from 'ioredis';
import type { Config } from '../config';
import { redisClusterNodes, redisConnection } from '../infra/connections';

const LUA_DIR = join(__dirname, '..', '..', 'lua');

/** A command unanswered this long fails (ms): a connection that went silent without closing must not hold a caller. */
export const COMMAND_TIMEOUT_MS = 2000;

/** Replies of the scripts, named by their first element (lua/reserve.lua, lua/claim.lua). */
export type ReserveReply = ['RESERVED', number, string, number?, number?] | ['ALREADY_PURCHASED', string] | ['SOLD_OUT', number] | ['NOT_LOADED'] | ['CLOSED', SaleClosed];
export type TakeReply = ['RESERVED', number, string, number?, number?] | ['SOLD_OUT', number] | ['NOT_LOADED'] | ['LEASE_OVER'] | ['CLOSED', SaleClosed];
/** The value of a shard's closed mark (layout.ts `closed`): purchases paused, or the sale ended early. */
export type SaleClosed = 'PAUSED' | 'ENDED';
export type ClaimReply = ['CLAIMED', number, string] | ['ALREADY_PURCHASED', string] | ['NOT_LOADED'];

interface Scripts {
  reserve(stock: string, reservations: string, startQueue: string, returns: string, released: string, loaded: string, closed: string, buyers: string, ...argv: string[]): Promise<ReserveReply>;
  take(stock: string, reservations: string, startQueue: string, returns: string, released: string, loaded: string, closed: string, ...argv: string[]): Promise<TakeReply>;
  claim(buyers: string, claims: string, loaded: string, ...argv: string[]): Promise<ClaimReply>;
  unclaim(buyers: string, claims: string, loaded: string, ...argv: string[]): Promise<null>;
  release(stock: string, buyers: string, reservations: string, returns: string, released: string, loaded: string, ...argv: string[]): Promise<null>;
  staleClaims(claims: string, olderThanMs: string, limit: string): Promise<string[]>;
  mark(closed: string, value: string): Promise<[node: string, now: string]>;
  repair(loaded: string, rebuilding: string, reservations: string, buyers: string, released: string, stock: string, returns: string, ...argv: string[]): Promise<0 | 1 | 'SKIPPED'>;
  accepted(startQueue: string): Promise<number>;
}

/** The service's Redis client: one node or a cluster, with our Lua scripts defined. */
export type FlashRedis = (Redis | Cluster) & Scripts;

const SCRIPTS: [name: keyof Scripts, file: string, keys: number][] = [
  ['reserve', 'reserve.lua', 8],
  // One script, two callers: with the buyers' hash it checks the buyer (I3), without it the claim's lease.
  ['take', 'reserve.lua', 7],
  ['claim', 'claim.lua', 3],
  ['unclaim', 'unclaim.lua', 3],
  ['release', 'release.lua', 6],
  ['staleClaims', 'stale-claims.lua', 1],
  ['mark', 'mark.lua', 1],
  ['repair', 'repair.lua', 7],
  ['accepted', 'accepted.lua', 1],
];

/**
 * Per connection: no resend (maxRetriesPerRequest 0 fails what a dropped connection left unanswered at once;
 * autoResendUnfulfilledCommands false says so again), and no command waits longer than COMMAND_TIMEOUT_MS.
 */
const NO_RESEND: RedisOptions = { maxRetriesPerRequest: 0, autoResendUnfulfilledCommands: false, commandTimeout: COMMAND_TIMEOUT_MS };

/**
 * Creates the ioredis client for the configured Redis (connections.ts: address or cluster seeds, logical
 * database, key prefix, TLS, ACL user) with our Lua scripts defined and no resend (NO_RESEND). On a cluster:
 * - retryDelayOnFailover 0: no resend after "Connection is closed" either;
 * - clusterNodeRetryStrategy: a master whose connection dropped stays in the pool and reconnects, rather than
 *   leaving the pool, where ioredis then sends its slot's commands to any node left, a replica among them;
 * - slotsRefreshInterval: so the client learns of a failover by itself (ioredis 5 has no periodic refresh).
 * MOVED, ASK, TRYAGAIN and CLUSTERDOWN are still followed: those commands did not run.
 * @param options enableOfflineQueue (false: a command fails at once while disconnected), enableAutoPipelining, and
 *   on a cluster natMap (nodes reached at other addresses than they announce: behind NAT, or a test's proxies)
 */
export function createRedis(config: Config, options: Pick<RedisOptions, 'enableOfflineQueue' | 'enableAutoPipelining'> & Pick<ClusterOptions, 'natMap'> = {}): FlashRedis {
  const nodes = redisClusterNodes(config);
  const { natMap, ...common } = options;
  const redis = nodes
    ? new Cluster(nodes, {
        redisOptions: { ...NO_RESEND, ...nodeConnection(config) },
        ...common,
        natMap,
        keyPrefix: config.REDIS_KEY_PREFIX,
        retryDelayOnFailover: 0,
        clusterNodeRetryStrategy: (attempt: number) => Math.min(50 * attempt, 1000),
        slotsRefreshInterval: 2000,
      })
    : new Redis({ ...common, ...NO_RESEND, ...redisConnection(config), keyPrefix: config.REDIS_KEY_PREFIX });
  for (const [name, file, numberOfKeys] of SCRIPTS) redis.defineCommand(name, { numberOfKeys, lua: readFileSync(join(LUA_DIR, file), 'utf8') });
  return redis as FlashRedis;
}

/**
 * A connection for shard channels (SSUBSCRIBE; src/api/soldOut.ts), with the credentials and TLS of createRedis:
 * on a cluster, one subscriber per master (ioredis' shardedSubscribers), following slots as they move. It queues
 * commands while it reconnects and subscribes again after. Without keyPrefix: the caller names channels whole
 * (REDIS_KEY_PREFIX included), since ioredis would prefix a channel it subscribes again after a reconnect twice.
 */
export function createSubscriber(config: Config): Redis | Cluster {
  const nodes = redisClusterNodes(config);
  return nodes
    ? new Cluster(nodes, { redisOptions: nodeConnection(config), shardedSubscribers: true, slotsRefreshInterval: 2000 })
    : new Redis(redisConnection(config));
}

/**
 * Whether a client of the purchase path auto-pipelines: on one node, yes (it sends the reservations of one
 * event-loop turn in one write; docs/performance.md); on a cluster, no. ioredis batches auto-pipelined commands
 * per node and, on a MOVED, re-sends the whole batch as a pipeline, which throws "All keys in the pipeline should
 * belong to the same slots allocation group" when the batch's keys no longer sit on one node: during a reshard or
 * a failover, any command that shared a batch failed (redis/ioredis#2075, open). Sent alone, a command follows
 * MOVED and ASK by itself, and ioredis retries TRYAGAIN (docs/design.md).
 */
export function autoPipelines(config: Config): boolean {
  return redisClusterNodes(config) === undefined;
}

/** A cluster node's settings: credentials and TLS; the addresses come from the slot map, a cluster has db 0 only. */
export function nodeConnection(config: Config): Omit<RedisOptions, 'host' | 'port' | 'db'> {
  const { host, port, db, ...rest } = redisConnection(config);
  return rest;
}

/**
 * ioredis' own words for a command that failed without an answer: the connection dropped after it was sent
 * (it may have run), it timed out (it may still run), or it was refused while disconnected (it did not run).
 * Either way, running an idempotent command again is safe, and answers as the first run did.
 */
const UNANSWERED = /^(Connection is closed\.|Command aborted due to connection close|Command timed out|Stream isn't writeable and enableOfflineQueue options is false|Reached the max retries per request limit)/;

/** @returns whether err leaves a Redis command's outcome unknown (no answer came), not refused by Redis */
export function isOutcomeUnknown(err: unknown): boolean {
  const e = err as { name?: unknown; code?: unknown; message?: unknown };
  if (e?.name === 'MaxRetriesPerRequestError') return true;
  if (typeof e?.code === 'string' && ['ECONNRESET', 'ECONNREFUSED', 'EPIPE', 'ETIMEDOUT'].includes(e.code)) return true;
  return typeof e?.message === 'string' && UNANSWERED.test(e.message);
}

/** The waits before each new run of an idempotent command whose outcome was unknown (ms): two more runs at most. */
const RERUN_AFTER_MS = [50, 200];

/**
 * Runs an idempotent Redis operation, again when its outcome is unknown (isOutcomeUnknown), at most
 * RERUN_AFTER_MS.length more times: the resend ioredis no longer makes, made only where it is harmless.
 * @throws the last error, or at once an error that is Redis' own answer (a ReplyError)
 */
export async function idempotent<T>(operation: () => Promise<T>): Promise<T> {
  for (let rerun = 0; ; rerun++) {
    try {
      return await operation();
    } catch (err) {
      if (rerun >= RERUN_AFTER_MS.length || !isOutcomeUnknown(err)) throw err;
      await new Promise((resolve) => setTimeout(resolve, RERUN_AFTER_MS[rerun]));
    }
  }
}
