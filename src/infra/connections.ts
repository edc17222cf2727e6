/**
 * How the service reaches each store, from the configuration: addresses, TLS (CA, client certificate, server
 * name) and credentials for PostgreSQL, Redis, Kafka and Temporal — one place, so the API, the starter, the
 * worker and the CLIs connect alike (docs/configuration.md). Files are read when a client is made; loadConfig
 * has already checked that they are readable.
 */
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { resolve } from 'node:path';
import type { ConnectionOptions as TlsOptions } from 'node:tls';
import type { RedisOptions } from 'ioredis';
import type { KafkaConfig, SASLOptions } from 'kafkajs';
import type { ClientConfig } from 'pg';
import type { Config } from '../config';

const read = (path: string | undefined) => (path === undefined ? undefined : readFileSync(path));
/** SNI carries host names only (RFC 6066): an IP address is checked against the certificate, not sent. */
const serverName = (host: string) => (isIP(host) ? undefined : host);

/**
 * node-pg's settings: DATABASE_URL's parts over the PG* variables (loadConfig has put the URL's sslmode,
 * sslrootcert, sslcert and sslkey into PGSSL*), and PGSSLMODE as libpq reads it: require, encrypted with any
 * certificate, or verify-ca when a root certificate is given (libpq's rule); verify-ca, chained to
 * PGSSLROOTCERT; verify-full, and issued to the host.
 */
export function pgConnection(config: Config): ClientConfig {
  const url = config.DATABASE_URL ? new URL(config.DATABASE_URL) : undefined;
  const host = url?.hostname || config.PGHOST;
  const mode = config.PGSSLMODE === 'require' && config.PGSSLROOTCERT ? 'verify-ca' : config.PGSSLMODE;
  const ssl: TlsOptions | false =
    mode === 'disable'
      ? false
      : {
          rejectUnauthorized: mode !== 'require',
          ca: read(config.PGSSLROOTCERT),
          cert: read(config.PGSSLCERT),
          key: read(config.PGSSLKEY),
          servername: serverName(host),
          ...(mode === 'verify-ca' && { checkServerIdentity: () => undefined }),
        };
  return {
    host,
    port: url?.port ? Number(url.port) : config.PGPORT,
    user: url?.username ? decodeURIComponent(url.username) : config.PGUSER,
    password: url?.password ? decodeURIComponent(url.password) : config.PGPASSWORD,
    database: url && url.pathname.length > 1 ? decodeURIComponent(url.pathname.slice(1)) : config.PGDATABASE,
    ssl,
    ...(url?.searchParams.has('application_name') && { application_name: url.searchParams.get('application_name') as string }),
  };
}

/** ioredis' settings: REDIS_URL's parts over the REDIS_* variables; TLS as loadConfig resolved it (REDIS_TLS). */
export function redisConnection(config: Config): RedisOptions {
  const url = config.REDIS_URL ? new URL(config.REDIS_URL) : undefined;
  const host = url?.hostname || config.REDIS_HOST;
  return {
    host,
    port: url?.port ? Number(url.port) : config.REDIS_PORT,
    db: url && url.pathname.length > 1 ? Number(url.pathname.slice(1)) : config.REDIS_DB,
    username: url?.username ? decodeURIComponent(url.username) : config.REDIS_USERNAME,
    password: url?.password ? decodeURIComponent(url.password) : config.REDIS_PASSWORD,
    ...(config.REDIS_TLS && {
      tls: {
        ca: read(config.REDIS_TLS_CA_FILE),
        cert: read(config.REDIS_TLS_CERT_FILE),
        key: read(config.REDIS_TLS_KEY_FILE),
        servername: config.REDIS_TLS_SERVER_NAME ?? serverName(host),
      },
    }),
  };
}

/**
 * @returns the Redis Cluster's seed nodes (REDIS_CLUSTER_NODES), or undefined for a single Redis; each node is
 *   reached with redisConnection's credentials and TLS
 */
export function redisClusterNodes(config: Config): { host: string; port: number }[] | undefined {
  return config.REDIS_CLUSTER_NODES?.split(',').map((node) => {
    const at = node.lastIndexOf(':');
    return { host: node.slice(0, at), port: Number(node.slice(at + 1)) };
  });
}

/** kafkajs' brokers, TLS and SASL (PLAIN, SCRAM, or OAUTHBEARER through KAFKA_OAUTHBEARER_MODULE). */
export function kafkaConnection(config: Config): Pick<KafkaConfig, 'brokers' | 'ssl' | 'sasl'> {
  const brokers = config.KAFKA_BROKERS ? config.KAFKA_BROKERS.split(',') : [`${config.KAFKA_HOST}:${config.KAFKA_PORT}`];
  return {
    brokers,
    ...(config.KAFKA_TLS && { ssl: { ca: read(config.KAFKA_TLS_CA_FILE), cert: read(config.KAFKA_TLS_CERT_FILE), key: read(config.KAFKA_TLS_KEY_FILE) } }),
    ...(config.KAFKA_SASL_MECHANISM !== 'none' && { sasl: kafkaSasl(config) }),
  };
}

function kafkaSasl(config: Config): SASLOptions {
  if (config.KAFKA_SASL_MECHANISM === 'oauthbearer') {
    // A deployment's own module (e.g. MSK IAM): loaded at start, so a wrong path fails there, not at the first send.
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- the module is named by configuration
    const hook = require(resolve(config.KAFKA_OAUTHBEARER_MODULE as string)) as { oauthBearerProvider?: () => Promise<{ value: string }> };
    if (typeof hook.oauthBearerProvider !== 'function') throw new Error(`KAFKA_OAUTHBEARER_MODULE ${config.KAFKA_OAUTHBEARER_MODULE} exports no oauthBearerProvider function`);
    return { mechanism: 'oauthbearer', oauthBearerProvider: hook.oauthBearerProvider };
  }
  // loadConfig refused these mechanisms without a username and password.
  const mechanism = config.KAFKA_SASL_MECHANISM as 'plain' | 'scram-sha-256' | 'scram-sha-512';
  return { mechanism, username: config.KAFKA_SASL_USERNAME as string, password: config.KAFKA_SASL_PASSWORD as string };
}

/**
 * The Temporal frontend's address, TLS (CA, server name, mTLS client certificate) and API key, for both the
 * client's Connection and the worker's NativeConnection.
 */
export function temporalConnection(config: Config): {
  address: string;
  tls?: { serverRootCACertificate?: Buffer; serverNameOverride?: string; clientCertPair?: { crt: Buffer; key: Buffer } };
  apiKey?: string;
} {
  const tls = config.TEMPORAL_TLS
    ? {
        serverRootCACertificate: read(config.TEMPORAL_TLS_CA_FILE),
        serverNameOverride: config.TEMPORAL_TLS_SERVER_NAME,
        ...(config.TEMPORAL_TLS_CERT_FILE && {
          clientCertPair: { crt: read(config.TEMPORAL_TLS_CERT_FILE) as Buffer, key: read(config.TEMPORAL_TLS_KEY_FILE) as Buffer },
        }),
      }
    : undefined;
  return { address: `${config.TEMPORAL_HOST}:${config.TEMPORAL_PORT}`, ...(tls && { tls }), ...(config.TEMPORAL_API_KEY && { apiKey: config.TEMPORAL_API_KEY }) };
}
