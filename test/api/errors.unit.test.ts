/**
 * isUnavailable (src/api/errors.ts), pure: what deserves a 503 with Retry-After. A Redis Cluster reconfiguring
 * (CLUSTERDOWN while a failover elects a master, TRYAGAIN while a slot's keys move, ioredis giving up after its
 * redirections) is one: the chaos campaign's seed 20405 on the cluster (a master SIGKILLed) answered the payment
 * route 500 with "Too many Cluster redirections. Last error: ReplyError: CLUSTERDOWN The cluster is down".
 */
import { ReplyError } from 'ioredis';
import { isUnavailable } from '../../src/api/errors';

test.each([
  ['ioredis giving up after CLUSTERDOWN', new Error('Too many Cluster redirections. Last error: ReplyError: CLUSTERDOWN The cluster is down'), true],
  ['CLUSTERDOWN itself', new ReplyError('CLUSTERDOWN The cluster is down'), true],
  ['TRYAGAIN', new ReplyError('TRYAGAIN Multiple keys request during rehashing of slot'), true],
  ['a refused connection', Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6379'), { code: 'ECONNREFUSED' }), true],
  ["a script's own refusal", new ReplyError('ITEM_MISMATCH reservation x is for item 3'), false],
  ['a bug', new TypeError("Cannot read properties of undefined (reading 'x')"), false],
])('%s → %s', (_name, err, unavailable) => {
  expect(isUnavailable(err)).toBe(unavailable);
});
