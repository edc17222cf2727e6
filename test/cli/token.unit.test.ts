/**
 * `npm run token` (src/cli/token.ts), pure logic: the token it signs is admitted by the API's own buyer
 * authenticator as the buyer named, with or without a configured issuer and audience; a token without the
 * configured issuer or audience, or with another, is refused; and it refuses what the API would refuse to
 * admit (a bad buyer id) or what it cannot sign (RS256). The command itself refuses a secret that is not the
 * development default unless told (--real-secret), and a lifetime over a day; run as a process, such a refusal
 * is one line on stderr and exit status 2.
 */
import { spawnSync } from 'node:child_process';
import { createVerifier } from 'fast-jwt';
import { buyerAuthenticator } from '../../src/api/auth';
import { MAX_EXPIRES_IN_S, tokenCommand } from '../../src/cli/token';
import { signBuyerToken } from '../../src/api/devTokens';
import { loadConfig } from '../../src/config';
import { createLogger } from '../../src/infra/logger';

const log = createLogger('silent', 'test');
/** NODE_ENV defaults to production, whose checks (the stores' development password) are not this suite's subject. */
const DEV = { NODE_ENV: 'development' };
const REAL_SECRET = 'r'.repeat(40);

test.each([
  ['the development defaults', {}],
  ['an issuer and an audience', { JWT_ISSUER: 'https://id.example', JWT_AUDIENCE: 'flash-sale' }],
])('with %s, the API admits the token as the buyer named', async (_name, env) => {
  const config = loadConfig({ ...DEV, ...env });
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
  const token = signBuyerToken(loadConfig({ ...DEV, ...signedWith }), 'bob', 60);
  expect(await buyerAuthenticator(loadConfig({ ...DEV, ...apiEnv }), log)(`Bearer ${token}`)).toEqual({ error: 'TOKEN_INVALID' });
});

test('refuses a buyer id the API would refuse, and RS256', () => {
  expect(() => signBuyerToken(loadConfig(DEV), 'a|b', 60)).toThrow('not a valid buyer id');
  expect(() => signBuyerToken(loadConfig({ ...DEV, JWT_ALGORITHM: 'RS256', JWT_PUBLIC_KEY: 'x' }), 'alice', 60)).toThrow('only HS256');
});

/** The `exp - iat` of a compact JWT (s). */
const lifetimeS = (token: string) => {
  const { iat, exp } = JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString()) as { iat: number; exp: number };
  return exp - iat;
};

test('the command signs with the development secret as asked; a secret of its own only with --real-secret, in any NODE_ENV', async () => {
  const token = tokenCommand(['alice'], DEV);
  expect(await buyerAuthenticator(loadConfig(DEV), log)(`Bearer ${token}`)).toEqual({ buyerId: 'alice' });
  expect(lifetimeS(token)).toBe(3600);

  // The service role's production checks do not look at JWT_SECRET: the command's own refusal is what stops it.
  const production = { NODE_ENV: 'production', PGPASSWORD: 'not-the-development-one', JWT_SECRET: REAL_SECRET };
  for (const env of [{ ...DEV, JWT_SECRET: REAL_SECRET }, production]) {
    expect(() => tokenCommand(['alice'], env)).toThrow(/^JWT_SECRET is not the development default: .* add --real-secret to sign anyway$/);
    const real = tokenCommand(['alice', '--real-secret'], env);
    expect(createVerifier({ key: REAL_SECRET, algorithms: ['HS256'] })(real)).toMatchObject({ sub: 'alice' });
  }
});

test(`the command caps the lifetime at ${MAX_EXPIRES_IN_S} s (a day)`, () => {
  expect(MAX_EXPIRES_IN_S).toBe(86_400);
  expect(lifetimeS(tokenCommand(['alice', '--expires-in-s', '86400'], DEV))).toBe(86_400);
  for (const args of [['alice', '--expires-in-s', '86401'], ['alice', '--expires-in-s', '31536000', '--real-secret']]) {
    expect(() => tokenCommand(args, DEV)).toThrow(/^--expires-in-s \d+: at most 86400 \(a day\)$/);
  }
  expect(() => tokenCommand(['alice', '--expires-in-s', '0'], DEV)).toThrow(/^usage: /);
});

test('run as a process, a refusal is one line on stderr and exit status 2, nothing on stdout', () => {
  const run = (args: string[], env: Record<string, string>) =>
    spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/token.ts', ...args], { env: { PATH: process.env.PATH, ...env }, encoding: 'utf8' });
  for (const [args, env, message] of [
    [['alice'], { ...DEV, JWT_SECRET: REAL_SECRET }, /^JWT_SECRET is not the development default: /],
    [['alice', '--expires-in-s', '90000'], DEV, /^--expires-in-s 90000: at most 86400/],
  ] as const) {
    const { status, stdout, stderr } = run([...args], env);
    expect({ status, stdout, lines: stderr.trimEnd().split('\n').length }).toEqual({ status: 2, stdout: '', lines: 1 });
    expect(stderr).toMatch(message);
  }
  const ok = run(['alice', '--real-secret'], { ...DEV, JWT_SECRET: REAL_SECRET });
  expect([ok.status, ok.stderr]).toEqual([0, '']);
  expect(createVerifier({ key: REAL_SECRET, algorithms: ['HS256'] })(ok.stdout.trim())).toMatchObject({ sub: 'alice' });
});
