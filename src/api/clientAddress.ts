/**
 * The client's address, which the rate limits key on. Behind proxies each one appends the address it saw to
 * X-Forwarded-For, so only the entries our own proxies appended can be believed: proxy-addr walks the chain from
 * the socket back and stops at the first address that is not a trusted proxy (TRUST_PROXY: none, a hop count,
 * or the proxies' addresses). Whatever a client writes before that is never read.
 */
import type { IncomingMessage } from 'node:http';
import ipaddr from 'ipaddr.js';
import proxyaddr from 'proxy-addr';
import type { TrustProxy } from '../config';

/** @returns proxy-addr's trust function for TRUST_PROXY: whether the i-th address from the socket is a proxy of ours */
function trustOf(trust: TrustProxy): (address: string, i: number) => boolean {
  if (trust === false) return () => false;
  if ('hops' in trust) return (_address, i) => i < trust.hops;
  return proxyaddr.compile(trust.addresses);
}

/**
 * The key a client's requests are counted under: an IPv4 address as it is, an IPv6 one by its /64 (one
 * subscriber's allocation, RFC 6177), an IPv4-mapped IPv6 address as the IPv4 address.
 * @param address an address as Node or proxy-addr reports it; anything unparsable is its own key
 */
export function limitKey(address: string): string {
  if (!ipaddr.isValid(address)) return address;
  const parsed = ipaddr.process(address);
  if (parsed.kind() === 'ipv4') return parsed.toString();
  return `${ipaddr.IPv6.networkAddressFromCIDR(`${parsed.toString()}/64`).toString()}/64`;
}

/**
 * @returns a function from a request to the key its client is counted under (limitKey of the address the
 *   nearest untrusted hop connected from, under TRUST_PROXY; the socket's without a trusted proxy)
 */
export function clientKeyOf(trust: TrustProxy): (req: IncomingMessage) => string {
  const trusted = trustOf(trust);
  return (req) => limitKey(proxyaddr(req, trusted));
}
