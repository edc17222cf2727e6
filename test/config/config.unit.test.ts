/**
 * The configuration: docs/configuration.md's table lists every variable the schema accepts, and no other, with
 * the defaults loadConfig applies; secrets from `<NAME>_FILE`; bad values refused one line each, a secret's
 * value never printed; the connection settings each store's client gets (src/infra/connections.ts).
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CONFIG_VARIABLES, ConfigError, loadConfig } from '../../src/config';
import { kafkaConnection, pgConnection, redisConnection, temporalConnection } from '../../src/infra/connections';

/** The configuration of a development run: the tests below are about everything but production's own rules. */
const devConfig = (env: NodeJS.ProcessEnv) => loadConfig({ NODE_ENV: 'development', ...env });
const DOC = readFileSync(join(__dirname, '..', '..', 'docs', 'configuration.md'), 'utf8');
const ROWS = [...DOC.matchAll(/^\| `([A-Z][A-Z0-9_]*)` \| ([^|]+) \|/gm)].map(([, name, fallback]) => ({ name, fallback: fallback.trim() }));
const dir = mkdtempSync(join(tmpdir(), 'flash-sale-config-'));
const file = (name: string, content: string) => {
  const path = join(dir, name);
  writeFileSync(path, content);
  return path;
};
const refusal = (env: Record<string, string>) => {
  try {
    devConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) return err.message;
    throw err;
  }
  throw new Error('accepted');
};

test("the documentation's table holds every variable of the schema, once, and no other", () => {
  const documented = ROWS.map((r) => r.name);
  expect(new Set(documented).size).toBe(documented.length);
  expect([...documented].sort()).toEqual([...CONFIG_VARIABLES].sort());
});

test("the table's defaults are loadConfig's", () => {
  // Production is the default; its refusals of development values are the next tests'.
  const defaults = { ...devConfig({}), NODE_ENV: loadConfig({ PGPASSWORD: 'the-database-own' }).NODE_ENV } as unknown as Record<string, unknown>;
  for (const { name, fallback } of ROWS) {
    if (fallback === 'development value') expect([name, typeof defaults[name]]).toEqual([name, 'string']);
    else if (fallback === '—') expect([name, defaults[name]]).toEqual([name, undefined]);
    else expect([name, fallback]).toEqual([name, `\`${String(defaults[name])}\``]);
  }
});

test('a secret from <NAME>_FILE (final newline dropped); both set, or an unreadable file, is refused', () => {
  const secret = 'x'.repeat(40);
  expect(devConfig({ JWT_SECRET_FILE: file('jwt', `${secret}\n`) }).JWT_SECRET).toBe(secret);
  expect(devConfig({ REDIS_PASSWORD_FILE: file('redis', 'p@ss') }).REDIS_PASSWORD).toBe('p@ss');
  expect(refusal({ JWT_SECRET: secret, JWT_SECRET_FILE: file('jwt2', secret) })).toContain('JWT_SECRET_FILE: set JWT_SECRET or JWT_SECRET_FILE, not both');
  expect(refusal({ PGPASSWORD_FILE: join(dir, 'missing') })).toContain('PGPASSWORD_FILE: no readable file at this path');
});

test("a bad secret is named, never shown; other bad values are shown", () => {
  const message = refusal({ JWT_SECRET: 'short-and-secret', REDIS_PORT: 'abc' });
  expect(message).toContain('JWT_SECRET: must be at least 32 characters');
  expect(message).not.toContain('short-and-secret');
  expect(message).toContain('REDIS_PORT');
  expect(message).toContain('"abc"');
});

test('TLS and credentials are refused half-set: a certificate without its key, SASL without a password', () => {
  const cert = file('cert.pem', 'cert');
  expect(refusal({ REDIS_TLS_CERT_FILE: cert })).toContain('REDIS_TLS_CERT_FILE: a client certificate and its key go together');
  expect(refusal({ TEMPORAL_TLS_CERT_FILE: cert })).toContain('TEMPORAL_TLS_CERT_FILE');
  expect(refusal({ KAFKA_SASL_MECHANISM: 'scram-sha-512', KAFKA_SASL_USERNAME: 'shop' })).toContain('KAFKA_SASL_MECHANISM: scram-sha-512 needs KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD');
  expect(refusal({ KAFKA_SASL_MECHANISM: 'oauthbearer' })).toContain('oauthbearer needs KAFKA_OAUTHBEARER_MODULE');
  expect(refusal({ PGSSLMODE: 'prefer' })).toContain('PGSSLMODE');
  expect(refusal({ REDIS_URL: 'http://cache:6379' })).toContain('REDIS_URL');
});

test('each client gets its address, TLS and credentials', () => {
  const ca = file('ca.pem', 'CA');
  const [cert, key] = [file('client.pem', 'CERT'), file('client.key', 'KEY')];
  const config = devConfig({
    DATABASE_URL: 'postgres://shop:s%40cret@db.internal:6432/orders?sslmode=verify-full',
    PGSSLROOTCERT: ca,
    REDIS_URL: 'rediss://cache-user:pw@cache.internal:6380/3',
    REDIS_TLS_CA_FILE: ca,
    KAFKA_BROKERS: 'b1.internal:9096,b2.internal:9096',
    KAFKA_TLS: 'true',
    KAFKA_SASL_MECHANISM: 'scram-sha-512',
    KAFKA_SASL_USERNAME: 'shop',
    KAFKA_SASL_PASSWORD_FILE: file('kafka', 'kpw\n'),
    TEMPORAL_HOST: 'shop.acct.tmprl.cloud',
    TEMPORAL_TLS_CERT_FILE: cert,
    TEMPORAL_TLS_KEY_FILE: key,
  });
  const blank = devConfig({ REDIS_TLS_CA_FILE: '', KAFKA_BROKERS: '' });
  expect([blank.REDIS_TLS_CA_FILE, blank.KAFKA_BROKERS]).toEqual([undefined, undefined]);
  expect(pgConnection(config)).toMatchObject({ host: 'db.internal', port: 6432, user: 'shop', password: 's@cret', database: 'orders', ssl: { rejectUnauthorized: true, servername: 'db.internal' } });
  expect(String((pgConnection(config).ssl as { ca: Buffer }).ca)).toBe('CA');
  expect(redisConnection(config)).toMatchObject({ host: 'cache.internal', port: 6380, db: 3, username: 'cache-user', password: 'pw', tls: { servername: 'cache.internal' } });
  expect(kafkaConnection(config)).toMatchObject({ brokers: ['b1.internal:9096', 'b2.internal:9096'], ssl: {}, sasl: { mechanism: 'scram-sha-512', username: 'shop', password: 'kpw' } });
  const temporal = temporalConnection(config);
  expect(temporal.address).toBe('shop.acct.tmprl.cloud:7233');
  expect(String(temporal.tls?.clientCertPair?.crt)).toBe('CERT');
  expect(String(temporal.tls?.clientCertPair?.key)).toBe('KEY');

  const plain = devConfig({});
  expect(pgConnection(plain).ssl).toBe(false);
  expect(redisConnection(plain).tls).toBeUndefined();
  expect(kafkaConnection(plain)).toEqual({ brokers: ['127.0.0.1:9092'] });
  expect(temporalConnection(plain)).toEqual({ address: '127.0.0.1:7233' });
  expect(pgConnection(devConfig({ PGSSLMODE: 'require' })).ssl).toMatchObject({ rejectUnauthorized: false });
  expect(pgConnection(devConfig({ PGSSLMODE: 'verify-ca' })).ssl).toMatchObject({ rejectUnauthorized: true, checkServerIdentity: expect.any(Function) });
});

test('a URL with credentials is shown with its password blotted out', () => {
  const message = refusal({ DATABASE_URL: 'postgres://app:S3cr3tPw@db:99999/x', REDIS_URL: 'redis://cache-user:R3d1sPw@cache:99999/0' });
  expect(message).toContain('DATABASE_URL');
  expect(message).toContain('postgres://app:***@db:99999/x');
  expect(message).toContain('redis://cache-user:***@cache:99999/0');
  expect(message).not.toMatch(/S3cr3tPw|R3d1sPw/);
});

test('any TLS setting turns TLS on; with its switch set to false it is refused, one line each', () => {
  const [ca, cert, key] = [file('tls-ca.pem', 'CA'), file('tls-cert.pem', 'CERT'), file('tls-key.pem', 'KEY')];
  expect(redisConnection(devConfig({ REDIS_TLS_CERT_FILE: cert, REDIS_TLS_KEY_FILE: key, REDIS_PASSWORD: 'pw' })).tls).toBeDefined();
  expect(redisConnection(devConfig({ REDIS_TLS_SERVER_NAME: 'cache.internal' })).tls).toMatchObject({ servername: 'cache.internal' });
  expect(kafkaConnection(devConfig({ KAFKA_TLS_CERT_FILE: cert, KAFKA_TLS_KEY_FILE: key })).ssl).toBeDefined();
  expect(temporalConnection(devConfig({ TEMPORAL_TLS_SERVER_NAME: 'frontend.internal' })).tls).toMatchObject({ serverNameOverride: 'frontend.internal' });
  expect(redisConnection(devConfig({ REDIS_TLS: 'false' })).tls).toBeUndefined();

  const lines = (env: Record<string, string>) => refusal(env).split('\n').slice(1);
  expect(lines({ REDIS_TLS: 'false', REDIS_TLS_CERT_FILE: cert, REDIS_TLS_KEY_FILE: key })).toEqual([
    '  REDIS_TLS: false contradicts REDIS_TLS_CERT_FILE, REDIS_TLS_KEY_FILE: TLS settings without TLS (set REDIS_TLS=true, or drop them) (got "false")',
  ]);
  expect(lines({ REDIS_TLS: 'false', REDIS_URL: 'rediss://cache:6380' })).toEqual([expect.stringMatching(/^ {2}REDIS_TLS: false contradicts REDIS_URL \(rediss:\/\/\)/)]);
  expect(lines({ KAFKA_TLS: 'false', KAFKA_TLS_CA_FILE: ca })).toEqual([expect.stringMatching(/^ {2}KAFKA_TLS: false contradicts KAFKA_TLS_CA_FILE:/)]);
  expect(lines({ TEMPORAL_TLS: 'false', TEMPORAL_TLS_SERVER_NAME: 'frontend.internal' })).toEqual([expect.stringMatching(/^ {2}TEMPORAL_TLS: false contradicts TEMPORAL_TLS_SERVER_NAME:/)]);
  expect(lines({ PGSSLROOTCERT: ca })).toEqual([expect.stringMatching(/^ {2}PGSSLMODE: disable contradicts PGSSLROOTCERT: TLS files without TLS/)]);
  expect(lines({ DATABASE_URL: `postgres://db/x?sslmode=disable&sslrootcert=${ca}` })).toEqual([expect.stringMatching(/^ {2}PGSSLMODE: disable contradicts PGSSLROOTCERT/)]);
});

test("PGSSLMODE and DATABASE_URL's parameters mean what they mean to libpq; the others are refused", () => {
  const [ca, cert, key] = [file('pg-ca.pem', 'PGCA'), file('pg-cert.pem', 'PGCERT'), file('pg-key.pem', 'PGKEY')];
  // require with a root certificate verifies the chain, as libpq does (verify-ca).
  expect(pgConnection(devConfig({ PGSSLMODE: 'require', PGSSLROOTCERT: ca })).ssl).toMatchObject({ rejectUnauthorized: true, checkServerIdentity: expect.any(Function) });
  // The URL's parameters win over the variables.
  const fromUrl = pgConnection(
    devConfig({ PGSSLMODE: 'require', DATABASE_URL: `postgres://shop@db.internal/orders?sslmode=verify-full&sslrootcert=${ca}&sslcert=${cert}&sslkey=${key}&application_name=flash` }),
  );
  expect(fromUrl).toMatchObject({ host: 'db.internal', application_name: 'flash', ssl: { rejectUnauthorized: true, servername: 'db.internal' } });
  expect((fromUrl.ssl as { checkServerIdentity?: unknown }).checkServerIdentity).toBeUndefined();
  expect((['ca', 'cert', 'key'] as const).map((k) => String((fromUrl.ssl as Record<string, Buffer>)[k]))).toEqual(['PGCA', 'PGCERT', 'PGKEY']);

  expect(refusal({ DATABASE_URL: 'postgres://db/x?sslmode=prefer' })).toContain('DATABASE_URL: sslmode=prefer is not supported');
  expect(refusal({ DATABASE_URL: 'postgres://db/x?ssl=true&connect_timeout=3' })).toMatch(/parameter ssl is not supported[^\n]*\n[^\n]*parameter connect_timeout is not supported/);
  expect(refusal({ DATABASE_URL: `postgres://db/x?sslmode=verify-full&sslrootcert=${join(dir, 'nowhere.pem')}` })).toContain('DATABASE_URL: sslrootcert: no readable file');
  expect(refusal({ DATABASE_URL: `postgres://db/x?sslmode=require&sslcert=${cert}` })).toContain('DATABASE_URL: sslcert and sslkey go together');
});

test('tracing settings outside what the SDK knows are refused, one line each', () => {
  const lines = refusal({ OTEL_TRACES_EXPORTER: 'zipkin', OTEL_TRACES_SAMPLER: 'sometimes', OTEL_TRACES_SAMPLER_ARG: '2' }).split('\n').slice(1);
  expect(lines).toEqual([expect.stringMatching(/^ {2}OTEL_TRACES_EXPORTER: .*zipkin/), expect.stringMatching(/^ {2}OTEL_TRACES_SAMPLER: .*sometimes/), expect.stringMatching(/^ {2}OTEL_TRACES_SAMPLER_ARG: .*<=1/)]);
  expect(devConfig({ OTEL_TRACES_EXPORTER: 'jsonl', OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.01' })).toMatchObject({ OTEL_TRACES_EXPORTER: 'jsonl', OTEL_TRACES_SAMPLER_ARG: 0.01 });
});

describe('production (no NODE_ENV) refuses what a retailer would not want by accident, one line each', () => {
  const lines = (env: Record<string, string>, role: 'api' | 'service' = 'service') => {
    try {
      loadConfig(env, role);
    } catch (err) {
      if (err instanceof ConfigError) return err.message.split('\n').slice(1).map((line) => line.trim().split(':')[0]);
      throw err;
    }
    return [];
  };
  const own = { PGPASSWORD: 'the-database-own' };
  const api = { ...own, JWT_SECRET: 'x'.repeat(40), ADMIN_TOKEN: 'a'.repeat(20), PAYMENT_SERVICE_TOKEN: 'p'.repeat(20), SALE_GATE_SECRET: 's'.repeat(40), TRUST_PROXY: 'false', JWT_ISSUER: 'https://id.shop/', JWT_AUDIENCE: 'flash-sale' };

  test('every process: the development database password, and clear text to a store off loopback', () => {
    expect(lines({})).toEqual(['PGPASSWORD']);
    expect(lines({ DATABASE_URL: 'postgres://shop:flash_sale@127.0.0.1/orders' })).toEqual(['DATABASE_URL']);
    expect(lines({ ...own, PGHOST: 'db.internal', REDIS_CLUSTER_NODES: '127.0.0.1:7001,cache.internal:7002', KAFKA_BROKERS: 'b1.internal:9092', TEMPORAL_HOST: '10.0.0.5' })).toEqual([
      'PGSSLMODE',
      'REDIS_TLS',
      'KAFKA_TLS',
      'TEMPORAL_TLS',
    ]);
    expect(lines({ ...own, PGHOST: 'db.internal', PGSSLMODE: 'verify-full', REDIS_HOST: 'localhost', KAFKA_HOST: '[::1]', TEMPORAL_HOST: '127.0.0.2' })).toEqual([]);
    expect(lines({ ...own, PGHOST: 'db.internal', KAFKA_HOST: 'b1.internal', ALLOW_PLAINTEXT_STORES: 'true' })).toEqual([]);
    expect(lines({ NODE_ENV: 'development', PGHOST: 'db.internal' })).toEqual([]);
  });

  test('the API: the development secrets, TRUST_PROXY unsaid, no issuer or audience, a key set over http', () => {
    expect(lines(own, 'api')).toEqual(['JWT_SECRET', 'ADMIN_TOKEN', 'PAYMENT_SERVICE_TOKEN', 'SALE_GATE_SECRET', 'TRUST_PROXY', 'JWT_ISSUER', 'JWT_AUDIENCE']);
    expect(lines(api, 'api')).toEqual([]);
    expect(lines({ ...api, JWT_ALGORITHM: 'RS256', JWT_JWKS_URL: 'http://id.shop/.well-known/jwks.json' }, 'api')).toEqual(['JWT_JWKS_URL']);
    expect(lines({ ...api, JWT_ALGORITHM: 'RS256', JWT_JWKS_URL: 'https://id.shop/.well-known/jwks.json' }, 'api')).toEqual([]);
    // A worker needs none of the API's secrets.
    expect(lines(own)).toEqual([]);
  });

  test('TRUST_PROXY: false, a hop count, or addresses and CIDR ranges', () => {
    expect(loadConfig({ ...api, TRUST_PROXY: '2' }, 'api').TRUST_PROXY).toEqual({ hops: 2 });
    expect(loadConfig({ ...api, TRUST_PROXY: '10.0.0.0/8, 192.0.2.7,2001:db8::/32' }, 'api').TRUST_PROXY).toEqual({ addresses: ['10.0.0.0/8', '192.0.2.7', '2001:db8::/32'] });
    expect(loadConfig(api, 'api').TRUST_PROXY).toBe(false);
    for (const bad of ['true', '0', '10.0.0.0/33', 'proxy.internal']) expect(lines({ ...api, TRUST_PROXY: bad }, 'api')).toEqual(['TRUST_PROXY']);
  });
});
