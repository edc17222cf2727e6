/**
 * How a process judges a store it cannot reach at start (src/infra/startup.ts): a misconfiguration, which no retry
 * mends, fails the start naming the store; an outage lets it start (its clients reconnect). Pure logic: the
 * errors are shaped as the drivers raise them (node-pg, ioredis, kafkajs, Node's TLS); test/secure.test.ts
 * meets the real ones.
 */
import { causeOf, checkAtStart, DependencyError, isMisconfiguration } from '../../src/infra/startup';

const shaped = (message: string, fields: Record<string, unknown> = {}) => Object.assign(new Error(message), fields);

test.each([
  ['PostgreSQL refused the password (SQLSTATE 28P01)', shaped('password authentication failed for user "shop"', { code: '28P01' }), true],
  ['PostgreSQL has no hostssl line for a plaintext client (28000)', shaped('no pg_hba.conf entry for host "10.0.0.1", user "shop", database "x", no encryption', { code: '28000' }), true],
  ['PostgreSQL has no such database (3D000)', shaped('database "x" does not exist', { code: '3D000' }), true],
  ['a certificate no configured CA signed', shaped('unable to verify the first certificate', { code: 'UNABLE_TO_VERIFY_LEAF_SIGNATURE' }), true],
  ['Redis refused the ACL user', shaped('WRONGPASS invalid username-password pair or user is disabled.'), true],
  ["Kafka's SASL failure", shaped('SASL SCRAM SHA512 authentication failed', { name: 'KafkaJSSASLAuthenticationError' }), true],
  ["kafkajs' retries over a TLS failure", shaped('Connection error', { originalError: shaped('unable to verify the first certificate') }), true],
  ['a refused connection', shaped('connect ECONNREFUSED 127.0.0.1:5432', { code: 'ECONNREFUSED' }), false],
  ['a connection dropped as it opened', shaped('Connection terminated unexpectedly'), false],
  ['a timeout', shaped('timeout exceeded when trying to connect'), false],
])('%s → misconfiguration: %s', (_what, err, expected) => {
  expect(isMisconfiguration(err)).toBe(expected);
});

test('checkAtStart: a misconfiguration throws naming the store; an outage only warns', async () => {
  const warnings: string[] = [];
  const warn = (line: string) => warnings.push(line);
  await expect(checkAtStart('postgres', Promise.reject(shaped('password authentication failed', { code: '28P01' })), warn)).rejects.toMatchObject({
    service: 'postgres',
    message: 'postgres: password authentication failed',
  });
  await expect(checkAtStart('kafka', Promise.reject(shaped('connect ECONNREFUSED', { code: 'ECONNREFUSED' })), warn)).resolves.toBeUndefined();
  expect(warnings).toEqual(['kafka not reachable at start, starting anyway: connect ECONNREFUSED']);
  expect(new DependencyError('redis', shaped('closed'))).toBeInstanceOf(Error);
});

test("causeOf: the message, its cause when it adds one, each of an AggregateError's; another realm's errors too", () => {
  expect(causeOf(shaped('Connection error', { cause: shaped('unable to verify the first certificate') }))).toBe('Connection error (unable to verify the first certificate)');
  expect(causeOf(new AggregateError([shaped('connect ECONNREFUSED ::1:5432'), shaped('connect ECONNREFUSED 127.0.0.1:5432')]))).toBe(
    'connect ECONNREFUSED ::1:5432; connect ECONNREFUSED 127.0.0.1:5432',
  );
  expect(causeOf({ name: 'Error', message: 'from a sandbox', code: 'X' })).toBe('from a sandbox');
});
