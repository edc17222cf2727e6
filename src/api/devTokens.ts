/**
 * Development buyer tokens: `npm run token` and, outside production, the sale page's sign-in
 * (POST /api/dev/token). Production tokens come from the identity provider.
 */
import { createSigner } from 'fast-jwt';
import type { Config } from '../config';
import { BUYER_ID } from '../order/ids';

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
