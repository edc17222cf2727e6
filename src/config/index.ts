/**
 * Configuration from environment variables, validated once at start-up (zod): each store's settings and rules in
 * a module of its own, production's rules here. Durations are in ms. Names and defaults: docs/configuration.md.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { apiFields, apiInProduction, checkApi, DEV_JWT_SECRET } from './api';
import { kafkaFields, kafkaTls, checkKafka } from './kafka';
import { isLoopback, readableFile, tlsOn, type Issue } from './kinds';
import { checkPostgres, postgresFields, postgresInProduction, postgresTls } from './postgres';
import { checkRedis, redisFields, redisTls } from './redis';
import { FILE_SECRETS, redactUrls, SECRET_NAMES, withFileSecrets } from './secrets';
import { checkService, serviceFields } from './service';
import { checkTemporal, temporalFields, temporalTls } from './temporal';

export { DEFAULT_CLAIM_IDLE_MS } from './service';
export { redactUrls } from './secrets';
export type { TrustProxy } from './api';

const fields = z.object({
  ...serviceFields,
  ...postgresFields,
  ...redisFields,
  ...kafkaFields,
  ...temporalFields,
  ...apiFields,
  ...(Object.fromEntries(FILE_SECRETS.map((name) => [`${name}_FILE`, readableFile.optional()])) as Record<`${(typeof FILE_SECRETS)[number]}_FILE`, z.ZodOptional<typeof readableFile>>),
});
type Env = z.infer<typeof fields>;

/** Who loads the configuration: the API checks its own doors and secrets too. */
export type Role = 'api' | 'service';

const storesTls = (env: Env) => [redisTls(env), kafkaTls(env), temporalTls(env)];

/**
 * What production refuses: the stores' development password and clear text to a store off loopback (unless
 * ALLOW_PLAINTEXT_STORES) for every process; for the API, its own rules (apiInProduction).
 */
function checkProduction(env: Env, role: Role, issue: Issue): void {
  const postgres = postgresInProduction(env, issue);
  if (!env.ALLOW_PLAINTEXT_STORES) {
    const stores = [postgres, ...storesTls(env).map((tls) => ({ name: tls.name, clear: !tlsOn(tls), hosts: tls.hosts }))];
    for (const { name, clear, hosts } of stores) {
      const remote = hosts.filter((host) => !isLoopback(host));
      if (clear && remote.length) issue(name, `clear text to ${remote.join(', ')}; turn TLS on, or set ALLOW_PLAINTEXT_STORES=true on a private network`);
    }
  }
  if (role === 'api') apiInProduction(env, issue);
}

/** The schema of a role: the fields, the rules between them, the TLS switches resolved. */
const schemaFor = (role: Role) =>
  fields
    .superRefine((env, ctx) => {
      const issue: Issue = (setting, message) => ctx.addIssue({ code: 'custom', path: [setting], message });
      checkApi(env, issue);
      checkPostgres(env, issue);
      checkRedis(env, issue);
      checkKafka(env, issue);
      checkTemporal(env, issue);
      checkService(env, issue);
      if (env.NODE_ENV === 'production') checkProduction(env, role, issue);
    })
    .transform((env) => {
      const [redis, kafka, temporal] = storesTls(env).map(tlsOn);
      return { ...env, ...postgresTls(env), REDIS_TLS: redis, KAFKA_TLS: kafka, TEMPORAL_TLS: temporal, TRUST_PROXY: env.TRUST_PROXY ?? false };
    });
const SCHEMAS = { api: schemaFor('api'), service: schemaFor('service') };

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
  const set = Object.fromEntries(Object.entries(env).filter(([, value]) => value !== ''));
  const { values, issues } = withFileSecrets(set, (path) => readFileSync(path, 'utf8'));
  const parsed = SCHEMAS[role].safeParse(values);
  if (parsed.success && !issues.length) return parsed.data;
  const lines = [...issues, ...(parsed.error?.issues ?? [])].map((issue) => {
    const name = issue.path.join('.');
    const given = name in env && !SECRET_NAMES.has(name) ? ` (got ${redactUrls(JSON.stringify(env[name]))})` : '';
    return `  ${name}: ${issue.message}${given}`;
  });
  throw new ConfigError(`Invalid configuration:\n${lines.join('\n')}`);
}

/** The variables the configuration reads, for the documentation's table (test/config/config.unit.test.ts). */
export const CONFIG_VARIABLES: readonly string[] = Object.keys(fields.shape);
