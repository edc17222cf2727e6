/** The rate limits' client key (src/api/clientAddress.ts): which X-Forwarded-For entry is believed, and IPv6 by /64. */
import type { IncomingMessage } from 'node:http';
import { clientKeyOf, limitKey } from '../../src/api/clientAddress';

/** A request as Node hands it over: the socket's peer address and the headers. */
const request = (socketAddress: string, forwardedFor?: string) =>
  ({ socket: { remoteAddress: socketAddress }, connection: { remoteAddress: socketAddress }, headers: forwardedFor ? { 'x-forwarded-for': forwardedFor } : {} }) as unknown as IncomingMessage;

test('an IPv6 client is counted by its /64; an IPv4-mapped one as its IPv4 address', () => {
  expect(limitKey('2001:db8:1:2:aaaa::1')).toBe('2001:db8:1:2::/64');
  expect(limitKey('2001:db8:1:2:ffff:ffff:ffff:fffe')).toBe(limitKey('2001:db8:1:2::1'));
  expect(limitKey('2001:db8:1:3::1')).not.toBe(limitKey('2001:db8:1:2::1'));
  expect(limitKey('::ffff:203.0.113.9')).toBe('203.0.113.9');
  expect(limitKey('203.0.113.9')).toBe('203.0.113.9');
});

test('TRUST_PROXY false: the socket’s address, whatever X-Forwarded-For says', () => {
  expect(clientKeyOf(false)(request('198.51.100.1', '203.0.113.9'))).toBe('198.51.100.1');
});

test('a hop count believes only the entries its proxies appended, from the end', () => {
  const forged = request('10.0.0.2', '1.2.3.4, 203.0.113.9');
  expect(clientKeyOf({ hops: 1 })(forged)).toBe('203.0.113.9');
  expect(clientKeyOf({ hops: 2 })(request('10.0.0.2', '1.2.3.4, 203.0.113.9, 10.0.0.1'))).toBe('203.0.113.9');
  // Fewer entries than hops: the farthest one there is.
  expect(clientKeyOf({ hops: 3 })(request('10.0.0.2', '203.0.113.9'))).toBe('203.0.113.9');
});

test('proxies by address: their entries are skipped from the end, the first other address is the client', () => {
  const trust = clientKeyOf({ addresses: ['10.0.0.0/8'] });
  expect(trust(request('10.0.0.2', '1.2.3.4, 203.0.113.9, 10.1.2.3'))).toBe('203.0.113.9');
  // A client that reaches the API directly is not a proxy: what it writes is not read.
  expect(trust(request('198.51.100.1', '203.0.113.9'))).toBe('198.51.100.1');
});
