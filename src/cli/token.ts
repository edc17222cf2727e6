/**
 * `npm run token -- BUYER_ID [--expires-in-s S]`: prints a buyer JWT for trying the API by hand, signed HS256
 * with the configured JWT_SECRET (the development default unless set), `sub` = BUYER_ID, expiring in S seconds
 * (3600). For development only: production tokens come from the identity provider. Exits 2 on bad arguments
 * or when JWT_ALGORITHM is not HS256 (an RS256 token needs the provider's private key).
 */
import { parseArgs } from 'node:util';
import { createSigner } from 'fast-jwt';
import { loadConfig, type Config } from '../config';
import { BUYER_ID } from '../domain';

/**
 * @param buyerId the token's `sub`; must be a valid buyer id (BUYER_ID), as the API requires (I6)
 * @param expiresInS lifetime in seconds
 * @returns a compact HS256 JWT the API admits as buyerId
 * @throws Error when the API is not configured for HS256 or buyerId is not a valid buyer id
 */
export function signBuyerToken(config: Config, buyerId: string, expiresInS: number): string {
  if (config.JWT_ALGORITHM !== 'HS256') throw new Error(`JWT_ALGORITHM is ${config.JWT_ALGORITHM}: only HS256 tokens can be signed here`);
  if (!BUYER_ID.test(buyerId)) throw new Error(`not a valid buyer id: ${JSON.stringify(buyerId)}`);
  const sign = createSigner({ key: config.JWT_SECRET, algorithm: 'HS256', expiresIn: expiresInS * 1000 });
  return sign({ sub: buyerId, iss: config.JWT_ISSUER, aud: config.JWT_AUDIENCE });
}

if (require.main === module) {
  try {
    const { positionals, values } = parseArgs({ allowPositionals: true, options: { 'expires-in-s': { type: 'string', default: '3600' } } });
    const expiresInS = Number(values['expires-in-s']);
    if (positionals.length !== 1 || !Number.isInteger(expiresInS) || expiresInS <= 0) {
      throw new Error('usage: npm run token -- BUYER_ID [--expires-in-s SECONDS]');
    }
    console.log(signBuyerToken(loadConfig(), positionals[0], expiresInS));
  } catch (err) {
    console.error(err instanceof Error ? err.message : String(err));
    process.exit(2);
  }
}
