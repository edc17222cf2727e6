/**
 * `npm run token -- BUYER_ID [--expires-in-s S]`: prints a buyer JWT for trying the API by hand, signed HS256
 * with the configured JWT_SECRET (the development default unless set), `sub` = BUYER_ID, expiring in S seconds
 * (3600). For development only: production tokens come from the identity provider. Exits 2 on bad arguments
 * or when JWT_ALGORITHM is not HS256 (an RS256 token needs the provider's private key).
 */
import { parseArgs } from 'node:util';
import { loadConfig } from '../config';
import { signBuyerToken } from '../devTokens';

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
