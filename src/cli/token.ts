/**
 * `npm run token -- BUYER_ID [--expires-in-s S] [--real-secret]`: prints a buyer JWT for trying the API by hand,
 * signed HS256 with the configured JWT_SECRET (the development default unless set), `sub` = BUYER_ID, expiring
 * in S seconds (3600, at most MAX_EXPIRES_IN_S). For development: production tokens come from the identity
 * provider. Exits 2 with one line on bad arguments, when JWT_ALGORITHM is not HS256 (an RS256 token needs the
 * provider's private key), or when JWT_SECRET is not the development default and --real-secret is not given.
 */
import { parseArgs } from 'node:util';
import { devTokensServed, loadConfig } from '../config';
import { signBuyerToken } from '../api/devTokens';

/** The longest lifetime the command signs (s): a day, the API's default JWT_MAX_AGE_S. */
export const MAX_EXPIRES_IN_S = 86_400;

/**
 * @param args the command's arguments (after `--`)
 * @param env the environment loadConfig reads
 * @returns the signed token
 * @throws Error with a one-line message for each refusal the module's docstring lists, or a ConfigError
 */
export function tokenCommand(args: string[], env: NodeJS.ProcessEnv): string {
  const { positionals, values } = parseArgs({
    args,
    allowPositionals: true,
    options: { 'expires-in-s': { type: 'string', default: '3600' }, 'real-secret': { type: 'boolean', default: false } },
  });
  const expiresInS = Number(values['expires-in-s']);
  if (positionals.length !== 1 || !Number.isInteger(expiresInS) || expiresInS <= 0) {
    throw new Error('usage: npm run token -- BUYER_ID [--expires-in-s SECONDS] [--real-secret]');
  }
  if (expiresInS > MAX_EXPIRES_IN_S) throw new Error(`--expires-in-s ${expiresInS}: at most ${MAX_EXPIRES_IN_S} (a day)`);
  const config = loadConfig(env);
  // The secret the development sign-in signs with, whatever NODE_ENV says: any other may be a deployment's, and a
  // token it signs is a real buyer's credential.
  const devSecret = devTokensServed({ NODE_ENV: 'development', JWT_ALGORITHM: 'HS256', JWT_SECRET: config.JWT_SECRET });
  if (config.JWT_ALGORITHM === 'HS256' && !devSecret && !values['real-secret']) {
    throw new Error('JWT_SECRET is not the development default: a token signed with it is a real credential; add --real-secret to sign anyway');
  }
  return signBuyerToken(config, positionals[0], expiresInS);
}

if (require.main === module) {
  try {
    console.log(tokenCommand(process.argv.slice(2), process.env));
  } catch (err) {
    console.error(err instanceof Error ? err.message : String(err));
    process.exit(2);
  }
}
