/** Redis' settings: one node (address or REDIS_URL) or a cluster's seeds, credentials, TLS, replicas awaited. */
import { z } from 'zod';
import { checkTls, given, hostPorts, port, positiveMs, readableFile, tlsSwitch, type Issue, type TlsSetting } from './kinds';

export const redisFields = {
  REDIS_HOST: z.string().min(1).default('127.0.0.1'),
  REDIS_PORT: port(6379),
  /** Logical database (SELECT): the test suites use their own, so they never touch a user's sales. */
  REDIS_DB: z.coerce.number().int().min(0).max(15).default(0),
  /** redis:// or rediss:// (TLS) URL; its host, port, user, password and database win over the variables. */
  REDIS_URL: z.url({ protocol: /^rediss?$/ }).optional(),
  /** ACL user and password (AUTH); the password alone for the default user. */
  REDIS_USERNAME: z.string().min(1).optional(),
  REDIS_PASSWORD: z.string().min(1).optional(),
  REDIS_TLS: tlsSwitch,
  REDIS_TLS_CA_FILE: readableFile.optional(),
  REDIS_TLS_CERT_FILE: readableFile.optional(),
  REDIS_TLS_KEY_FILE: readableFile.optional(),
  /** The name the server's certificate must carry, when it is not REDIS_HOST (SNI too). */
  REDIS_TLS_SERVER_NAME: z.string().min(1).optional(),
  /**
   * Seed nodes of a Redis Cluster, `host:port,host:port,…`: when set, the service uses ioredis' Cluster client
   * (it learns the other nodes from the seeds) and REDIS_HOST, REDIS_PORT, REDIS_URL's address and REDIS_DB
   * are not used; credentials and TLS apply to every node.
   */
  REDIS_CLUSTER_NODES: hostPorts('a comma-separated list of host:port').optional(),
  /**
   * Prepended to every key the service writes, so that several deployments (or the test suites) share one Redis
   * or cluster; hash tags stay inside the key, so placement does not change.
   */
  REDIS_KEY_PREFIX: z
    .string()
    .regex(/^[A-Za-z0-9_.:-]+$/, 'letters, digits and _ . : - only')
    .optional(),
  /**
   * Replicas that must hold a reservation before its 202 (WAIT after the script): 0 answers once the master
   * has it (AOF); 1 or more keeps every 202 through a failover (docs/operations.md, What a 202 promises).
   */
  REDIS_WAIT_REPLICAS: z.coerce.number().int().min(0).max(16).default(0),
  /** How long a purchase waits for REDIS_WAIT_REPLICAS (ms); too few replicas in time answers 503. */
  REDIS_WAIT_TIMEOUT_MS: positiveMs(1000),
};

type Env = z.infer<z.ZodObject<typeof redisFields>>;

/** A rediss:// URL is a TLS setting too. */
export function redisTls(env: Env): TlsSetting {
  const hosts = env.REDIS_CLUSTER_NODES
    ? env.REDIS_CLUSTER_NODES.split(',').map((node) => node.replace(/:\d+$/, ''))
    : [env.REDIS_URL && URL.canParse(env.REDIS_URL) ? new URL(env.REDIS_URL).hostname : env.REDIS_HOST];
  const settings = given([
    ['REDIS_TLS_CA_FILE', env.REDIS_TLS_CA_FILE],
    ['REDIS_TLS_CERT_FILE', env.REDIS_TLS_CERT_FILE],
    ['REDIS_TLS_KEY_FILE', env.REDIS_TLS_KEY_FILE],
    ['REDIS_TLS_SERVER_NAME', env.REDIS_TLS_SERVER_NAME],
    ['REDIS_URL (rediss://)', env.REDIS_URL?.startsWith('rediss:')],
  ]);
  return { name: 'REDIS_TLS', on: env.REDIS_TLS, settings, hosts };
}

export function checkRedis(env: Env, issue: Issue): void {
  checkTls(redisTls(env), ['REDIS_TLS_CERT_FILE', env.REDIS_TLS_CERT_FILE, env.REDIS_TLS_KEY_FILE], issue);
  if (env.REDIS_CLUSTER_NODES && env.REDIS_DB !== 0) issue('REDIS_DB', 'a Redis Cluster has database 0 only (use REDIS_KEY_PREFIX to share one)');
}
