/**
 * `npm run token` (src/cli/token.ts), pure logic: the token it signs is admitted by the API's own buyer
 * authenticator as the buyer named, with or without a configured issuer and audience; a token without the
 * configured issuer or audience, or with another, is refused; and it refuses what the API would refuse to
 * admit (a bad buyer id) or what it cannot sign (RS256).
 */
import { buyerAuthenticator } from '../src/api/auth';
import { signBuyerToken } from '../src/devTokens';
import { loadConfig } from '../src/config';
import { createLogger } from '../src/logger';

const log = createLogger('silent', 'test');

test.each([
  ['the development defaults', {}],
  ['an issuer and an audience', { JWT_ISSUER: 'https://id.example', JWT_AUDIENCE: 'flash-sale' }],
])('with %s, the API admits the token as the buyer named', async (_name, env) => {
  const config = loadConfig(env);
  const token = signBuyerToken(config, 'alice-1', 60);
  expect(await buyerAuthenticator(config, log)(`Bearer ${token}`)).toEqual({ buyerId: 'alice-1' });
  const exp = JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString()).exp as number;
  expect(exp - Date.now() / 1000).toBeGreaterThan(55);
  expect(exp - Date.now() / 1000).toBeLessThanOrEqual(60);
});

test.each([
  ['no iss, an API that expects one', {}, { JWT_ISSUER: 'https://id.example' }],
  ['no aud, an API that expects one', {}, { JWT_AUDIENCE: 'flash-sale' }],
  ['another issuer', { JWT_ISSUER: 'https://other.example' }, { JWT_ISSUER: 'https://id.example' }],
  ['another audience', { JWT_AUDIENCE: 'other' }, { JWT_AUDIENCE: 'flash-sale' }],
])('a token with %s → TOKEN_INVALID', async (_name, signedWith, apiEnv) => {
  const token = signBuyerToken(loadConfig(signedWith), 'bob', 60);
  expect(await buyerAuthenticator(loadConfig(apiEnv), log)(`Bearer ${token}`)).toEqual({ error: 'TOKEN_INVALID' });
});

test('refuses a buyer id the API would refuse, and RS256', () => {
  expect(() => signBuyerToken(loadConfig({}), 'a|b', 60)).toThrow('not a valid buyer id');
  expect(() => signBuyerToken(loadConfig({ JWT_ALGORITHM: 'RS256', JWT_PUBLIC_KEY: 'x' }), 'alice', 60)).toThrow('only HS256');
});
