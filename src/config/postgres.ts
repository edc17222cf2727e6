/**
 * PostgreSQL's settings by libpq's names (PGHOST…, PGSSLMODE…) or one DATABASE_URL, whose parts and TLS
 * parameters win over the variables (libpq's rule); the connection is built in src/infra/connections.ts.
 */
import { z } from 'zod';
import { isReadable, port, readableFile, type Issue } from './kinds';

/** The PGSSLMODE values we honour, with libpq's meanings. */
const SSL_MODES = ['disable', 'require', 'verify-ca', 'verify-full'] as const;
/** DATABASE_URL parameters we honour (libpq's names); any other is refused, never silently ignored. */
const URL_PARAMETERS = ['sslmode', 'sslrootcert', 'sslcert', 'sslkey', 'application_name'] as const;
/** DATABASE_URL parameters that win over a PG* variable. */
const URL_TLS = [
  ['sslmode', 'PGSSLMODE'],
  ['sslrootcert', 'PGSSLROOTCERT'],
  ['sslcert', 'PGSSLCERT'],
  ['sslkey', 'PGSSLKEY'],
] as const;
/** The local stack's password, refused in production. */
const DEV_PASSWORD = 'flash_sale';

export const postgresFields = {
  PGHOST: z.string().min(1).default('127.0.0.1'),
  PGPORT: port(5432),
  PGUSER: z.string().min(1).default('flash_sale'),
  PGPASSWORD: z.string().default(DEV_PASSWORD),
  PGDATABASE: z.string().min(1).default('flash_sale'),
  /**
   * postgres://user:password@host:port/db?…; its parts win over the PG* variables, and so do its parameters
   * sslmode, sslrootcert, sslcert and sslkey; any other parameter but application_name is refused.
   */
  DATABASE_URL: z.url({ protocol: /^postgres(ql)?$/ }).optional(),
  /**
   * libpq's names: disable, require (encrypted, any certificate; with a root certificate, verify-ca as in
   * libpq), verify-ca, verify-full (and the host name). allow and prefer are refused: a connection must not fall
   * back to clear text without anyone knowing.
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
};

type Env = z.infer<z.ZodObject<typeof postgresFields>>;

const databaseUrl = (env: Env) => (env.DATABASE_URL && URL.canParse(env.DATABASE_URL) ? new URL(env.DATABASE_URL) : undefined);

/** @returns the TLS settings in force: DATABASE_URL's parameters over the PG* variables */
export function postgresTls(env: Env) {
  const params = databaseUrl(env)?.searchParams ?? new URLSearchParams();
  const tls = { PGSSLMODE: env.PGSSLMODE, PGSSLROOTCERT: env.PGSSLROOTCERT, PGSSLCERT: env.PGSSLCERT, PGSSLKEY: env.PGSSLKEY };
  for (const [parameter, variable] of URL_TLS) {
    const value = params.get(parameter);
    if (value !== null) Object.assign(tls, { [variable]: value });
  }
  return tls;
}

/**
 * DATABASE_URL's parameters: only those we honour, an sslmode we know, files that can be read; and, with the
 * PG* variables they win over, no TLS file without TLS and a client certificate with its key.
 */
export function checkPostgres(env: Env, issue: Issue): void {
  const url = databaseUrl(env);
  if (url) {
    for (const name of new Set(url.searchParams.keys())) {
      if (!(URL_PARAMETERS as readonly string[]).includes(name)) issue('DATABASE_URL', `parameter ${name} is not supported (only ${URL_PARAMETERS.join(', ')})`);
    }
    const mode = url.searchParams.get('sslmode');
    if (mode !== null && !(SSL_MODES as readonly string[]).includes(mode)) issue('DATABASE_URL', `sslmode=${mode} is not supported (only ${SSL_MODES.join(', ')})`);
    for (const name of ['sslrootcert', 'sslcert', 'sslkey']) {
      const path = url.searchParams.get(name);
      if (path !== null && !isReadable(path)) issue('DATABASE_URL', `${name}: no readable file at ${path}`);
    }
  }
  if (Boolean(env.PGSSLCERT) !== Boolean(env.PGSSLKEY)) issue('PGSSLCERT', 'a client certificate and its key go together (set both or neither)');
  const tls = postgresTls(env);
  const files = (['PGSSLROOTCERT', 'PGSSLCERT', 'PGSSLKEY'] as const).filter((name) => tls[name]);
  if (tls.PGSSLMODE === 'disable' && files.length) {
    issue('PGSSLMODE', `disable contradicts ${files.join(', ')}: TLS files without TLS (set require, verify-ca or verify-full, or drop them)`);
  }
  if (Boolean(tls.PGSSLCERT) !== Boolean(tls.PGSSLKEY) && Boolean(env.PGSSLCERT) === Boolean(env.PGSSLKEY)) {
    issue('DATABASE_URL', 'sslcert and sslkey go together (set both or neither)');
  }
}

/** Production's rules: not the development password; the host and whether it is reached in clear text. */
export function postgresInProduction(env: Env, issue: Issue): { name: string; clear: boolean; hosts: string[] } {
  const url = databaseUrl(env);
  if ((url?.password ? decodeURIComponent(url.password) : env.PGPASSWORD) === DEV_PASSWORD) {
    issue(url?.password ? 'DATABASE_URL' : 'PGPASSWORD', "the development password; set the database's own");
  }
  return { name: 'PGSSLMODE', clear: postgresTls(env).PGSSLMODE === 'disable', hosts: [url?.hostname || env.PGHOST] };
}
