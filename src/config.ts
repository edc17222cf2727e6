/**
 * Configuration from environment variables, validated once at start-up (zod).
 * Port and credential names match scripts/stack.env so the app finds the stack the script started.
 * Durations are in ms. Throws ConfigError listing every bad variable, one per line.
 */
import { accessSync, constants, readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { z } from 'zod';

/** STARTER_CLAIM_IDLE_MS's default (ms): stale purchase claims and start queue entries are taken over at this age. */
export const DEFAULT_CLAIM_IDLE_MS = 30_000;

const DEV_JWT_SECRET = 'dev-only-flash-sale-jwt-secret-change-me-0123456789';
const DEV_ADMIN_TOKEN = 'dev-only-admin-token';
const DEV_PAYMENT_TOKEN = 'dev-only-payment-service-token';
const DEV_SALE_GATE_SECRET = 'dev-only-sale-gate-secret-change-me-0123456789';

const port = (fallback: number) => z.coerce.number().int().min(1).max(65535).default(fallback);
const positiveMs = (fallback: number) => z.coerce.number().int().positive().default(fallback);
const flag = (fallback: boolean) => z.stringbool().default(fallback);
/** A store's TLS switch: unset, it is on when any of the store's TLS settings is given (tlsSettings). */
const tlsSwitch = z.stringbool().optional();
function isReadable(path: string): boolean {
  try {
    accessSync(path, constants.R_OK);
    return true;
  } catch {
    return false;
  }
}
/** A file the process must be able to read at start (a CA, a certificate, a key): its path. */
const readableFile = z.string().min(1).refine(isReadable, { message: 'no readable file at this path' });

/** The PGSSLMODE values we honour, with libpq's meanings. */
const SSL_MODES = ['disable', 'require', 'verify-ca', 'verify-full'] as const;
/** DATABASE_URL parameters we honour (libpq's names); any other is refused, never silently ignored. */
const URL_PARAMETERS = ['sslmode', 'sslrootcert', 'sslcert', 'sslkey', 'application_name'] as const;
/** DATABASE_URL parameters that win over a PG* variable (libpq: the connection string over the environment). */
const URL_TLS: [parameter: 'sslmode' | 'sslrootcert' | 'sslcert' | 'sslkey', variable: 'PGSSLMODE' | 'PGSSLROOTCERT' | 'PGSSLCERT' | 'PGSSLKEY'][] = [
  ['sslmode', 'PGSSLMODE'],
  ['sslrootcert', 'PGSSLROOTCERT'],
  ['sslcert', 'PGSSLCERT'],
  ['sslkey', 'PGSSLKEY'],
];

/**
 * The credentials in a URL (`scheme://user:password@…`) blotted out, wherever it sits in a text: what a
 * configuration error or a log line may show of a DATABASE_URL or REDIS_URL.
 */
export function redactUrls(text: string): string {
  return text.replace(/([a-z][a-z0-9+.-]*:\/\/[^\s:/@]*):[^\s@]*@/gi, '$1:***@');
}

/**
 * Secrets that may also come from a file, `<NAME>_FILE` (as container platforms mount them): the file's content,
 * without its final newline, is the value. Setting both is refused.
 */
export const FILE_SECRETS = [
  'PGPASSWORD',
  'REDIS_PASSWORD',
  'KAFKA_SASL_PASSWORD',
  'TEMPORAL_API_KEY',
  'JWT_SECRET',
  'JWT_PUBLIC_KEY',
  'ADMIN_TOKEN',
  'PAYMENT_SERVICE_TOKEN',
  'SALE_GATE_SECRET',
] as const;

/** Values never echoed in an error line: a bad one is named, not shown. */
const SECRET_NAMES = new Set<string>(FILE_SECRETS.filter((name) => name !== 'JWT_PUBLIC_KEY'));

const fields = z.object({
  /**
   * production unless said: development secrets are refused, development routes never mounted, and the stores'
   * default password and clear text off loopback refused (productionIssues). development and test lift that.
   */
  NODE_ENV: z.enum(['development', 'test', 'production']).default('production'),
  /**
   * Production: a store off loopback reached in clear text (PGSSLMODE disable, no TLS to Redis, Kafka or
   * Temporal) is refused unless this says the network between them is private.
   */
  ALLOW_PLAINTEXT_STORES: flag(false),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),

  PGHOST: z.string().min(1).default('127.0.0.1'),
  PGPORT: port(5432),
  PGUSER: z.string().min(1).default('flash_sale'),
  PGPASSWORD: z.string().default('flash_sale'),
  PGDATABASE: z.string().min(1).default('flash_sale'),
  /**
   * A connection URL (postgres://user:password@host:port/db?…); its parts win over the PG* variables above, and
   * so do its parameters sslmode, sslrootcert, sslcert and sslkey over PGSSLMODE… (libpq's rule); any other
   * parameter but application_name is refused rather than ignored.
   */
  DATABASE_URL: z.url({ protocol: /^postgres(ql)?$/ }).optional(),
  /**
   * libpq's names: disable, require (encrypted, any certificate; with a root certificate, verify-ca as in
   * libpq), verify-ca, verify-full (and the host name). libpq's allow and prefer (TLS if the server offers it)
   * are refused: a connection must not fall back to clear text without anyone knowing.
   */
  PGSSLMODE: z.enum(SSL_MODES).default('disable'),
  /** CA certificate(s) the server's certificate must chain to (verify-ca, verify-full); Node's own CAs when unset. */
  PGSSLROOTCERT: readableFile.optional(),
  /** Client certificate and key, for a server that asks for one. */
  PGSSLCERT: readableFile.optional(),
  PGSSLKEY: readableFile.optional(),
  /**
   * Connections per process. A payment holds one for a round trip, which on a busy machine lasts as long as the
   * process takes to read the answer: a burst needs about payments/s × that time (docs/operations.md).
   */
  PG_POOL_MAX: z.coerce.number().int().min(1).max(500).default(50),

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
  REDIS_CLUSTER_NODES: z
    .string()
    .regex(/^[^\s,:]+:\d{1,5}(,[^\s,:]+:\d{1,5})*$/, 'a comma-separated list of host:port')
    .optional(),
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
   * has it (AOF); 1 or more keeps every 202 through a failover (README, What a 202 promises).
   */
  REDIS_WAIT_REPLICAS: z.coerce.number().int().min(0).max(16).default(0),
  /** How long a purchase waits for REDIS_WAIT_REPLICAS (ms); too few replicas in time answers 503. */
  REDIS_WAIT_TIMEOUT_MS: positiveMs(1000),

  KAFKA_HOST: z.string().min(1).default('127.0.0.1'),
  KAFKA_PORT: port(9092),
  /** Comma-separated host:port seed brokers; wins over KAFKA_HOST and KAFKA_PORT. */
  KAFKA_BROKERS: z
    .string()
    .regex(/^[^,\s:]+:\d{1,5}(,[^,\s:]+:\d{1,5})*$/, 'expected host:port[,host:port…]')
    .optional(),
  KAFKA_TLS: tlsSwitch,
  KAFKA_TLS_CA_FILE: readableFile.optional(),
  KAFKA_TLS_CERT_FILE: readableFile.optional(),
  KAFKA_TLS_KEY_FILE: readableFile.optional(),
  KAFKA_SASL_MECHANISM: z.enum(['none', 'plain', 'scram-sha-256', 'scram-sha-512', 'oauthbearer']).default('none'),
  KAFKA_SASL_USERNAME: z.string().min(1).optional(),
  KAFKA_SASL_PASSWORD: z.string().min(1).optional(),
  /**
   * OAUTHBEARER: a CommonJS module whose export `oauthBearerProvider` returns `{ value: token }` (kafkajs'
   * contract), e.g. a wrapper around AWS's MSK IAM signer; resolved from the working directory.
   */
  KAFKA_OAUTHBEARER_MODULE: z.string().min(1).optional(),
  KAFKA_TOPIC: z
    .string()
    .regex(/^[A-Za-z0-9._-]{1,249}$/)
    .default('flash-sale-orders'),
  // The idempotent producer spares consumers the producer-retry duplicates, and tools/bench/kafka.ts shows it
  // publishing far above the order rate.
  KAFKA_IDEMPOTENT: flag(true),

  TEMPORAL_HOST: z.string().min(1).default('127.0.0.1'),
  TEMPORAL_PORT: port(7233),
  TEMPORAL_NAMESPACE: z.string().min(1).default('flash-sale'),
  /** TLS to the frontend: with the system's CAs, or TEMPORAL_TLS_CA_FILE's. */
  TEMPORAL_TLS: tlsSwitch,
  TEMPORAL_TLS_CA_FILE: readableFile.optional(),
  TEMPORAL_TLS_SERVER_NAME: z.string().min(1).optional(),
  /** mTLS: the client certificate and key (Temporal Cloud's certificate authentication). */
  TEMPORAL_TLS_CERT_FILE: readableFile.optional(),
  TEMPORAL_TLS_KEY_FILE: readableFile.optional(),
  /** API key (Temporal Cloud's other authentication), sent as a bearer token over TLS. */
  TEMPORAL_API_KEY: z.string().min(1).optional(),
  TEMPORAL_TASK_QUEUE: z.string().min(1).default('flash-sale-orders'),
  /** Deadline of each call the API makes to Temporal (start, describe, the pay update, readiness): past it, 503. */
  TEMPORAL_CALL_TIMEOUT_MS: positiveMs(10_000),
  WORKER_MAX_CONCURRENT_ACTIVITIES: z.coerce.number().int().min(1).max(10000).default(200),
  /**
   * Workflow tasks the worker holds at once. Their local activities and activations share one event loop and
   * one workflow thread, so more held at once only wait longer inside the worker and outlast their timeout
   * (docs/performance.md); the backlog waits in Temporal's queue instead, which has no timeout.
   */
  WORKER_MAX_CONCURRENT_WORKFLOW_TASKS: z.coerce.number().int().min(2).max(10000).default(20),
  /**
   * Workflows the worker keeps in its sticky cache. Every open order waits on its timer (a window long);
   * one evicted meanwhile is replayed from its history when it wakes (server and worker CPU), so the cache
   * holds a whole sale's orders. The SDK's default, from the heap size, is about 2,300 on a 4 GB heap.
   */
  WORKER_MAX_CACHED_WORKFLOWS: z.coerce.number().int().min(2).max(1_000_000).default(20_000),
  /** Port of the worker's Prometheus endpoint (Temporal Core's metrics: sticky cache, task latencies); 0: none. */
  WORKER_METRICS_PORT: z.coerce.number().int().min(0).max(65535).default(0),
  WORKER_METRICS_HOST: z.string().min(1).default('127.0.0.1'),

  /**
   * Traces (OpenTelemetry, src/tracing/index.ts), by its standard variables. OTEL_TRACES_EXPORTER: none (the default:
   * no tracer is installed), otlp (OTLP over HTTP to OTEL_EXPORTER_OTLP_ENDPOINT or
   * OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, which the exporter reads itself), or jsonl, ours: one JSON line per span
   * appended to OTEL_TRACES_FILE, for `npm run trace` where no collector runs.
   */
  OTEL_TRACES_EXPORTER: z.enum(['none', 'otlp', 'jsonl']).default('none'),
  OTEL_TRACES_FILE: z.string().min(1).default('traces.jsonl'),
  /** service.name of this process' spans; the default is the process' role (flash-sale-api, -worker, -starter). */
  OTEL_SERVICE_NAME: z.string().min(1).optional(),
  /** The SDK's samplers (it reads these two itself); the default samples every trace a parent does not decide. */
  OTEL_TRACES_SAMPLER: z
    .enum(['always_on', 'always_off', 'traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio'])
    .default('parentbased_always_on'),
  OTEL_TRACES_SAMPLER_ARG: z.coerce.number().min(0).max(1).optional(),

  /** The public door: buyers' routes, the sale view and page, /healthz, the public contract. */
  API_HOST: z.string().min(1).default('127.0.0.1'),
  // 0 asks the OS for a free port (tests, benchmarks); startApi reports the one it got.
  API_PORT: z.coerce.number().int().min(0).max(65535).default(3000),
  /**
   * The internal door: admin, payments, /metrics, /readyz and the whole contract, on its own listener that a
   * deployment does not expose (loopback by default; 0 picks a free port).
   */
  INTERNAL_API_HOST: z.string().min(1).default('127.0.0.1'),
  INTERNAL_API_PORT: z.coerce.number().int().min(0).max(65535).default(3100),
  /** Failed credentials (admin, payment service) per client address per minute on the internal door; then 429. */
  INTERNAL_AUTH_FAILURES_PER_MIN: z.coerce.number().int().min(1).max(1_000_000).default(20),
  /** How long a client may take to send a request's headers (ms), then 408 and the connection is closed. */
  HTTP_HEADERS_TIMEOUT_MS: positiveMs(10_000),
  /** How long a client may take to send a whole request (ms), then 408. */
  HTTP_REQUEST_TIMEOUT_MS: positiveMs(30_000),
  /** Open connections per listener and process; past it new ones are closed at once. */
  HTTP_MAX_CONNECTIONS: z.coerce.number().int().min(1).max(1_000_000).default(20_000),
  /**
   * API processes `npm run api` runs (node:cluster), sharing API_PORT, each with its starter; 1 runs the API in
   * the process itself. What each keeps for itself: docs/operations.md, Several API processes.
   */
  API_PROCESSES: z.coerce.number().int().min(1).max(256).default(1),

  JWT_ALGORITHM: z.enum(['HS256', 'RS256']).default('HS256'),
  JWT_SECRET: z.string().min(32, 'must be at least 32 characters').default(DEV_JWT_SECRET),
  JWT_PUBLIC_KEY: z.string().optional(),
  JWT_JWKS_URL: z.url().optional(),
  /** Required in production (iss and aud then checked on every token). */
  JWT_ISSUER: z.string().min(1).optional(),
  JWT_AUDIENCE: z.string().min(1).optional(),
  /** Oldest token admitted, from its `iat` (seconds); 0 admits any age. With a limit, `iat` is required. */
  JWT_MAX_AGE_S: z.coerce.number().int().min(0).max(31_536_000).default(86_400),
  /** JWKS: a token whose `kid` the key set lacks fetches the set again at most this often (ms). */
  JWT_JWKS_REFETCH_COOLDOWN_MS: positiveMs(30_000),
  ADMIN_TOKEN: z.string().min(16, 'must be at least 16 characters').default(DEV_ADMIN_TOKEN),
  PAYMENT_SERVICE_TOKEN: z.string().min(16, 'must be at least 16 characters').default(DEV_PAYMENT_TOKEN),

  /**
   * true (default): a purchase carries its sale's gate value (header `Sale-Gate`), which the public sale view
   * hands out only from the sale's start (src/api/saleGate.ts); without it, 403 SALE_GATE_INVALID.
   */
  SALE_GATE_REQUIRED: flag(true),
  SALE_GATE_SECRET: z.string().min(32, 'must be at least 32 characters').default(DEV_SALE_GATE_SECRET),

  /** Rate limits of the buyer routes (src/api/rateLimits.ts): requests per RATE_LIMIT_WINDOW_S per client IP and per buyer. */
  RATE_LIMIT_ENABLED: flag(true),
  RATE_LIMIT_PER_IP: z.coerce.number().int().min(1).max(1_000_000_000).default(100),
  RATE_LIMIT_PER_BUYER: z.coerce.number().int().min(1).max(1_000_000_000).default(10),
  RATE_LIMIT_WINDOW_S: z.coerce.number().int().min(1).max(3600).default(1),
  /** Public reads (the sale view, the page, the clock) per RATE_LIMIT_WINDOW_S per client address. */
  RATE_LIMIT_READS_PER_IP: z.coerce.number().int().min(1).max(1_000_000_000).default(100),
  /**
   * Which X-Forwarded-For entries to believe (src/api/clientAddress.ts): false (the socket's address), a hop
   * count (that many proxies in front, each appending the address it saw), or the proxies' addresses and CIDR
   * ranges, comma-separated. Required in production, where a wrong guess either counts every buyer as the
   * balancer or lets a client pick its own address.
   */
  TRUST_PROXY: z
    .string()
    .transform((value, ctx): TrustProxy => {
      const parsed = parseTrustProxy(value);
      if (typeof parsed === 'string') {
        ctx.addIssue({ code: 'custom', message: parsed });
        return z.NEVER;
      }
      return parsed;
    })
    .optional(),

  SOLD_OUT_CACHE: flag(true),
  /**
   * false (default): a purchase of an item flagged sold out is answered 410 once its bearer token is present
   * and JWT-shaped, before its signature and claims are checked: that answer is the same for every buyer, and
   * the check would cost more than the whole answer. true: every purchase is verified first (401 before 410).
   */
  SOLD_OUT_VERIFIES_TOKEN: flag(false),
  SOLD_OUT_RECHECK_MS: positiveMs(1000),
  CATALOG_REFRESH_MS: positiveMs(5000),
  DEFAULT_PAYMENT_WINDOW_MS: positiveMs(600_000),
  /**
   * Whether the API process runs a starter (src/starter/). false: the workflows of the orders it accepts are
   * started by starter processes (`npm run starter`) that share its Redis, PostgreSQL and Temporal.
   */
  STARTER_IN_API: flag(true),
  /**
   * Whether each worker process runs a starter too, on the worker's own connection with eager start: the server
   * hands each workflow's first task straight back to that worker (when it has a free slot), not through
   * matching. Needs the server's system.enableEagerWorkflowStart (on in services.sh's real server).
   */
  STARTER_IN_WORKER: flag(false),
  /** Workflow starts a starter keeps in flight at most. */
  STARTER_MAX_IN_FLIGHT: z.coerce.number().int().min(1).max(10_000).default(20),
  /** The starter starts nothing while more workflow tasks than this wait for a worker on the task queue. */
  STARTER_MAX_BACKLOG: z.coerce.number().int().min(1).max(1_000_000).default(200),
  /**
   * The starter starts nothing while this API process accepts this many orders per second or more (0: never
   * waits; src/starter/starter.ts, AcceptancePace): above the starts/s a Temporal server takes at best
   * (docs/performance.md), so a queue filled at that pace would not drain sooner for being started meanwhile. An idle
   * starter also waits out the first 250 ms of orders after a quiet 250 ms, whose pace is not known before.
   */
  STARTER_YIELD_ABOVE_PER_S: z.coerce.number().int().min(0).max(1_000_000).default(200),
  /**
   * An accepted order left pending this long by a starter (one that died, or whose start failed) is claimed by
   * another; longer than TEMPORAL_CALL_TIMEOUT_MS, so that a start still in flight is not taken. A purchase claim
   * this old (by Redis' clock) is repaired, every half of it; a claim's unit may be taken for half of it
   * (src/reservation/claims.ts).
   */
  STARTER_CLAIM_IDLE_MS: positiveMs(DEFAULT_CLAIM_IDLE_MS),
  /**
   * Port of the starter's own Prometheus endpoint (src/starter/metrics.ts), for a starter without an API beside
   * it: `npm run starter`, or a worker's (STARTER_IN_WORKER); 0: none. An API's starter reports on its /metrics.
   */
  STARTER_METRICS_PORT: z.coerce.number().int().min(0).max(65535).default(0),
  STARTER_METRICS_HOST: z.string().min(1).default('127.0.0.1'),

  ...(Object.fromEntries(FILE_SECRETS.map((name) => [`${name}_FILE`, readableFile.optional()])) as Record<
    `${(typeof FILE_SECRETS)[number]}_FILE`,
    z.ZodOptional<typeof readableFile>
  >),
});
/** TRUST_PROXY parsed: false, a hop count, or the trusted proxies' addresses and CIDR ranges. */
export type TrustProxy = false | { hops: number } | { addresses: string[] };

/** @returns TRUST_PROXY's value parsed, or what is wrong with it */
function parseTrustProxy(value: string): TrustProxy | string {
  if (value === 'false') return false;
  if (/^\d+$/.test(value)) {
    const hops = Number(value);
    return hops >= 1 && hops <= 32 ? { hops } : 'a hop count is 1 to 32 (or false)';
  }
  const addresses = value.split(',').map((a) => a.trim());
  const bad = addresses.filter((a) => !isAddressOrRange(a));
  return bad.length ? `false, a hop count, or IP addresses and CIDR ranges; not ${bad.join(', ')}` : { addresses };
}

function isAddressOrRange(text: string): boolean {
  const [address, bits, ...rest] = text.split('/');
  const family = isIP(address);
  if (!family || rest.length) return false;
  return bits === undefined || (/^\d+$/.test(bits) && Number(bits) <= (family === 4 ? 32 : 128));
}

function isLoopback(host: string): boolean {
  const bare = host.replace(/^\[(.*)\]$/, '$1');
  return bare === 'localhost' || bare === '::1' || (isIP(bare) === 4 && bare.startsWith('127.'));
}

/** Who loads the configuration: the API checks its own doors and secrets too. */
export type Role = 'api' | 'service';

const DEV_PG_PASSWORD = 'flash_sale';

/**
 * What production refuses, as [setting, reason] pairs: the stores' development password and clear text to a
 * store off loopback (unless ALLOW_PLAINTEXT_STORES) for every process; for the API, the development secrets,
 * an unsaid TRUST_PROXY, tokens without issuer and audience, and a key set fetched over plain http.
 */
function productionIssues(env: z.infer<typeof fields>, role: Role): [string, string][] {
  const issues: [string, string][] = [];
  const url = env.DATABASE_URL && URL.canParse(env.DATABASE_URL) ? new URL(env.DATABASE_URL) : undefined;
  if ((url?.password ? decodeURIComponent(url.password) : env.PGPASSWORD) === DEV_PG_PASSWORD) {
    issues.push([url?.password ? 'DATABASE_URL' : 'PGPASSWORD', 'the development password; set the database\'s own']);
  }
  if (!env.ALLOW_PLAINTEXT_STORES) {
    const [redisTls, kafkaTls, temporalTls] = tlsSettings(env).map(([, on, settings]) => on ?? settings.length > 0);
    const redisHosts = env.REDIS_CLUSTER_NODES
      ? env.REDIS_CLUSTER_NODES.split(',').map((node) => node.replace(/:\d+$/, ''))
      : [env.REDIS_URL && URL.canParse(env.REDIS_URL) ? new URL(env.REDIS_URL).hostname : env.REDIS_HOST];
    const kafkaHosts = env.KAFKA_BROKERS ? env.KAFKA_BROKERS.split(',').map((broker) => broker.replace(/:\d+$/, '')) : [env.KAFKA_HOST];
    const plaintext: [string, boolean, string[]][] = [
      ['PGSSLMODE', databaseUrlTls(env).PGSSLMODE === 'disable', [url?.hostname || env.PGHOST]],
      ['REDIS_TLS', !redisTls, redisHosts],
      ['KAFKA_TLS', !kafkaTls, kafkaHosts],
      ['TEMPORAL_TLS', !temporalTls, [env.TEMPORAL_HOST]],
    ];
    for (const [name, clear, hosts] of plaintext) {
      const remote = hosts.filter((host) => !isLoopback(host));
      if (clear && remote.length) issues.push([name, `clear text to ${remote.join(', ')}; turn TLS on, or set ALLOW_PLAINTEXT_STORES=true on a private network`]);
    }
  }
  if (role === 'api') {
    const devDefaults: [string, string, string][] = [
      ['JWT_SECRET', env.JWT_SECRET, DEV_JWT_SECRET],
      ['ADMIN_TOKEN', env.ADMIN_TOKEN, DEV_ADMIN_TOKEN],
      ['PAYMENT_SERVICE_TOKEN', env.PAYMENT_SERVICE_TOKEN, DEV_PAYMENT_TOKEN],
      ['SALE_GATE_SECRET', env.SALE_GATE_SECRET, DEV_SALE_GATE_SECRET],
    ];
    for (const [name, value, dev] of devDefaults) {
      if (value === dev) issues.push([name, 'the public development value; set a secret of your own (or NODE_ENV=development)']);
    }
    if (env.TRUST_PROXY === undefined) issues.push(['TRUST_PROXY', 'must be said in production: false (clients connect directly), a hop count, or the proxies\' addresses']);
    if (!env.JWT_ISSUER) issues.push(['JWT_ISSUER', 'required in production: the identity provider\'s issuer, checked on every token']);
    if (!env.JWT_AUDIENCE) issues.push(['JWT_AUDIENCE', 'required in production: this service\'s audience, checked on every token']);
    if (env.JWT_JWKS_URL && !env.JWT_JWKS_URL.startsWith('https:')) issues.push(['JWT_JWKS_URL', 'https only in production: keys fetched in clear text can be swapped']);
  }
  return issues;
}

/** The schema of a role: the fields, the rules between them, the TLS switches resolved. */
const schemaFor = (role: Role) => fields
  .superRefine((env, ctx) => {
    if (env.JWT_ALGORITHM === 'RS256' && !env.JWT_PUBLIC_KEY && !env.JWT_JWKS_URL) {
      ctx.addIssue({ code: 'custom', path: ['JWT_PUBLIC_KEY'], message: 'RS256 needs JWT_PUBLIC_KEY (PEM) or JWT_JWKS_URL' });
    }
    const pairs: [string, string | undefined, string | undefined][] = [
      ['REDIS_TLS_CERT_FILE', env.REDIS_TLS_CERT_FILE, env.REDIS_TLS_KEY_FILE],
      ['KAFKA_TLS_CERT_FILE', env.KAFKA_TLS_CERT_FILE, env.KAFKA_TLS_KEY_FILE],
      ['TEMPORAL_TLS_CERT_FILE', env.TEMPORAL_TLS_CERT_FILE, env.TEMPORAL_TLS_KEY_FILE],
      ['PGSSLCERT', env.PGSSLCERT, env.PGSSLKEY],
    ];
    for (const [name, cert, key] of pairs) {
      if (Boolean(cert) !== Boolean(key)) ctx.addIssue({ code: 'custom', path: [name], message: 'a client certificate and its key go together (set both or neither)' });
    }
    if (['plain', 'scram-sha-256', 'scram-sha-512'].includes(env.KAFKA_SASL_MECHANISM) && (!env.KAFKA_SASL_USERNAME || !env.KAFKA_SASL_PASSWORD)) {
      ctx.addIssue({ code: 'custom', path: ['KAFKA_SASL_MECHANISM'], message: `${env.KAFKA_SASL_MECHANISM} needs KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD` });
    }
    if (env.KAFKA_SASL_MECHANISM === 'oauthbearer' && !env.KAFKA_OAUTHBEARER_MODULE) {
      ctx.addIssue({ code: 'custom', path: ['KAFKA_SASL_MECHANISM'], message: 'oauthbearer needs KAFKA_OAUTHBEARER_MODULE' });
    }
    for (const [name, on, settings] of tlsSettings(env)) {
      if (on === false && settings.length) {
        ctx.addIssue({ code: 'custom', path: [name], message: `false contradicts ${settings.join(', ')}: TLS settings without TLS (set ${name}=true, or drop them)` });
      }
    }
    checkDatabaseUrl(env, ctx);
    if (env.REDIS_CLUSTER_NODES && env.REDIS_DB !== 0) {
      ctx.addIssue({ code: 'custom', path: ['REDIS_DB'], message: 'a Redis Cluster has database 0 only (use REDIS_KEY_PREFIX to share one)' });
    }
    if (env.STARTER_IN_WORKER && env.STARTER_METRICS_PORT && env.STARTER_METRICS_PORT === env.WORKER_METRICS_PORT) {
      ctx.addIssue({ code: 'custom', path: ['STARTER_METRICS_PORT'], message: 'must differ from WORKER_METRICS_PORT with STARTER_IN_WORKER (the worker serves both)' });
    }
    if (env.STARTER_CLAIM_IDLE_MS <= env.TEMPORAL_CALL_TIMEOUT_MS) {
      ctx.addIssue({ code: 'custom', path: ['STARTER_CLAIM_IDLE_MS'], message: `must exceed TEMPORAL_CALL_TIMEOUT_MS (${env.TEMPORAL_CALL_TIMEOUT_MS})` });
    }
    if (env.NODE_ENV === 'production') {
      for (const [name, message] of productionIssues(env, role)) ctx.addIssue({ code: 'custom', path: [name], message });
    }
  })
  .transform((env) => {
    // Every TLS switch resolved: as set, else on when any of the store's TLS settings is given.
    const [redis, kafka, temporal] = tlsSettings(env).map(([, on, settings]) => on ?? settings.length > 0);
    return { ...env, ...databaseUrlTls(env), REDIS_TLS: redis, KAFKA_TLS: kafka, TEMPORAL_TLS: temporal, TRUST_PROXY: env.TRUST_PROXY ?? false };
  });
const SCHEMAS = { api: schemaFor('api'), service: schemaFor('service') };

/**
 * Per store with a TLS switch: the switch as set (undefined when unset) and the TLS settings given. A CA, a client
 * certificate or key, a server name (or a rediss:// URL, a Temporal API key) only make sense over TLS, so they
 * turn it on; with the switch set to false they are a contradiction that loadConfig refuses, rather than a
 * password sent in clear text.
 */
function tlsSettings(env: z.infer<typeof fields>): [name: 'REDIS_TLS' | 'KAFKA_TLS' | 'TEMPORAL_TLS', on: boolean | undefined, settings: string[]][] {
  const given = (entries: [string, unknown][]) => entries.filter(([, value]) => Boolean(value)).map(([name]) => name);
  return [
    [
      'REDIS_TLS',
      env.REDIS_TLS,
      given([
        ['REDIS_TLS_CA_FILE', env.REDIS_TLS_CA_FILE],
        ['REDIS_TLS_CERT_FILE', env.REDIS_TLS_CERT_FILE],
        ['REDIS_TLS_KEY_FILE', env.REDIS_TLS_KEY_FILE],
        ['REDIS_TLS_SERVER_NAME', env.REDIS_TLS_SERVER_NAME],
        ['REDIS_URL (rediss://)', env.REDIS_URL?.startsWith('rediss:')],
      ]),
    ],
    [
      'KAFKA_TLS',
      env.KAFKA_TLS,
      given([
        ['KAFKA_TLS_CA_FILE', env.KAFKA_TLS_CA_FILE],
        ['KAFKA_TLS_CERT_FILE', env.KAFKA_TLS_CERT_FILE],
        ['KAFKA_TLS_KEY_FILE', env.KAFKA_TLS_KEY_FILE],
      ]),
    ],
    [
      'TEMPORAL_TLS',
      env.TEMPORAL_TLS,
      given([
        ['TEMPORAL_TLS_CA_FILE', env.TEMPORAL_TLS_CA_FILE],
        ['TEMPORAL_TLS_CERT_FILE', env.TEMPORAL_TLS_CERT_FILE],
        ['TEMPORAL_TLS_KEY_FILE', env.TEMPORAL_TLS_KEY_FILE],
        ['TEMPORAL_TLS_SERVER_NAME', env.TEMPORAL_TLS_SERVER_NAME],
        ['TEMPORAL_API_KEY', env.TEMPORAL_API_KEY],
      ]),
    ],
  ];
}

/** @returns DATABASE_URL's TLS parameters as the PG* variables they win over (libpq's rule) */
function databaseUrlTls(env: Pick<z.infer<typeof fields>, 'DATABASE_URL' | 'PGSSLMODE' | 'PGSSLROOTCERT' | 'PGSSLCERT' | 'PGSSLKEY'>) {
  const params = env.DATABASE_URL && URL.canParse(env.DATABASE_URL) ? new URL(env.DATABASE_URL).searchParams : new URLSearchParams();
  const tls = { PGSSLMODE: env.PGSSLMODE, PGSSLROOTCERT: env.PGSSLROOTCERT, PGSSLCERT: env.PGSSLCERT, PGSSLKEY: env.PGSSLKEY };
  for (const [parameter, variable] of URL_TLS) {
    const value = params.get(parameter);
    if (value !== null) Object.assign(tls, { [variable]: value });
  }
  return tls;
}

/**
 * DATABASE_URL's parameters: only those we honour, an sslmode we know, files that can be read; and, with the
 * PG* variables they win over, no TLS file without TLS (sslmode disable).
 */
function checkDatabaseUrl(env: z.infer<typeof fields>, ctx: z.RefinementCtx): void {
  const issue = (path: string, message: string) => ctx.addIssue({ code: 'custom', path: [path], message });
  // The refinement runs even when the URL itself was refused.
  if (env.DATABASE_URL && URL.canParse(env.DATABASE_URL)) {
    const params = new URL(env.DATABASE_URL).searchParams;
    for (const name of new Set(params.keys())) {
      if (!(URL_PARAMETERS as readonly string[]).includes(name)) issue('DATABASE_URL', `parameter ${name} is not supported (only ${URL_PARAMETERS.join(', ')})`);
    }
    const mode = params.get('sslmode');
    if (mode !== null && !(SSL_MODES as readonly string[]).includes(mode)) issue('DATABASE_URL', `sslmode=${mode} is not supported (only ${SSL_MODES.join(', ')})`);
    for (const name of ['sslrootcert', 'sslcert', 'sslkey']) {
      const path = params.get(name);
      if (path !== null && !isReadable(path)) issue('DATABASE_URL', `${name}: no readable file at ${path}`);
    }
  }
  const tls = databaseUrlTls(env);
  const files = (['PGSSLROOTCERT', 'PGSSLCERT', 'PGSSLKEY'] as const).filter((name) => tls[name]);
  if (tls.PGSSLMODE === 'disable' && files.length) {
    issue('PGSSLMODE', `disable contradicts ${files.join(', ')}: TLS files without TLS (set require, verify-ca or verify-full, or drop them)`);
  }
  if (Boolean(tls.PGSSLCERT) !== Boolean(tls.PGSSLKEY) && Boolean(env.PGSSLCERT) === Boolean(env.PGSSLKEY)) {
    issue('DATABASE_URL', 'sslcert and sslkey go together (set both or neither)');
  }
}

export type Config = z.output<(typeof SCHEMAS)['service']>;

/**
 * @returns whether the API serves POST /api/dev/token: outside production, with HS256 and the development
 *   JWT_SECRET only — a deployment with a real secret (whatever its NODE_ENV) never mints tokens for anyone
 */
export function devTokensServed(config: Pick<Config, 'NODE_ENV' | 'JWT_ALGORITHM' | 'JWT_SECRET'>): boolean {
  return config.NODE_ENV !== 'production' && config.JWT_ALGORITHM === 'HS256' && config.JWT_SECRET === DEV_JWT_SECRET;
}

/** Thrown by loadConfig; its message names each bad variable and why. */
export class ConfigError extends Error {}

/**
 * Parses and validates the environment.
 * @param env usually process.env; an empty value counts as unset
 * @param role 'api' adds the API's production rules (its secrets, TRUST_PROXY, token issuer and audience)
 * @returns the typed configuration with defaults applied
 * @throws ConfigError with one line per invalid variable
 */
export function loadConfig(env: NodeJS.ProcessEnv = process.env, role: Role = 'service'): Config {
  // An empty variable counts as unset, as compose files and shells often leave them.
  const { values, issues } = withFileSecrets(Object.fromEntries(Object.entries(env).filter(([, value]) => value !== '')));
  const parsed = SCHEMAS[role].safeParse(values);
  if (parsed.success && !issues.length) return parsed.data;
  const lines = [...issues, ...(parsed.error?.issues ?? [])].map((issue) => {
    const name = issue.path.join('.');
    const given = name in env && !SECRET_NAMES.has(name) ? ` (got ${redactUrls(JSON.stringify(env[name]))})` : '';
    return `  ${name}: ${issue.message}${given}`;
  });
  throw new ConfigError(`Invalid configuration:\n${lines.join('\n')}`);
}

/** The variables the configuration reads, for the documentation's table (test/config.unit.test.ts). */
export const CONFIG_VARIABLES: readonly string[] = Object.keys(fields.shape);

/** The environment with each `<SECRET>_FILE` read into `<SECRET>`; a clash or an unreadable file is an issue. */
function withFileSecrets(env: NodeJS.ProcessEnv): { values: NodeJS.ProcessEnv; issues: { path: string[]; message: string }[] } {
  const values = { ...env };
  const issues: { path: string[]; message: string }[] = [];
  for (const name of FILE_SECRETS) {
    const path = env[`${name}_FILE`];
    if (!path) continue;
    if (env[name] !== undefined) {
      issues.push({ path: [`${name}_FILE`], message: `set ${name} or ${name}_FILE, not both` });
      continue;
    }
    try {
      values[name] = readFileSync(path, 'utf8').replace(/\r?\n$/, '');
    } catch {
      // The schema's own check of the _FILE variable names the problem.
    }
  }
  return { values, issues };
}
