/**
 * The conformance checker itself (pure logic, no servers): it must accept what openapi.yaml documents and
 * reject what it does not, or the checks wrapped around every API test's fetch would prove nothing.
 */
import { randomUUID } from 'node:crypto';
import { ConformanceError, validateResponse, type ObservedResponse } from '../support/openapi';

function observed(method: string, path: string, status: number, body: unknown, headers: Record<string, string> = {}): ObservedResponse {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  return { method, path, status, text, headers: new Headers({ 'content-type': 'application/json; charset=utf-8', ...headers }) };
}

const purchase = '/api/flash-sales/items/12/purchase';

describe('validateResponse accepts documented responses', () => {
  test.each([
    ['202 PENDING', observed('POST', purchase, 202, { orderId: randomUUID(), status: 'PENDING', paymentDeadline: new Date().toISOString() })],
    ['409 with the held order', observed('POST', purchase, 409, { error: 'ALREADY_PURCHASED', orderId: randomUUID() })],
    ['410 SOLD_OUT', observed('POST', purchase, 410, { error: 'SOLD_OUT' })],
    ['503 with Retry-After', observed('POST', purchase, 503, { error: 'SERVICE_UNAVAILABLE' }, { 'retry-after': '1' })],
    ['healthz', observed('GET', '/healthz', 200, { status: 'ok' })],
    ['stock with a query string', observed('POST', '/api/admin/sales/3/stock?rebuild=true', 401, { error: 'TOKEN_MISSING' })],
    ['metrics text', { ...observed('GET', '/metrics', 200, 'x 1\n'), headers: new Headers({ 'content-type': 'text/plain; version=0.0.4' }) }],
  ])('%s', (_name, response) => {
    expect(() => validateResponse(response)).not.toThrow();
  });
});

describe('validateResponse rejects what the document does not say', () => {
  test.each([
    ['an extra property on 202', observed('POST', purchase, 202, { orderId: randomUUID(), status: 'PENDING', paymentDeadline: new Date().toISOString(), userId: 'x' })],
    ['a non-uuid orderId', observed('POST', purchase, 202, { orderId: '42', status: 'PENDING', paymentDeadline: new Date().toISOString() })],
    ['a 202 without its deadline', observed('POST', purchase, 202, { orderId: randomUUID(), status: 'PENDING' })],
    ['409 without orderId', observed('POST', purchase, 409, { error: 'ALREADY_PURCHASED' })],
    ['an undocumented error code', observed('POST', purchase, 410, { error: 'GONE_FISHING' })],
    ['an undocumented status', observed('POST', purchase, 418, { error: 'SOLD_OUT' })],
    ['an undocumented method', observed('DELETE', purchase, 200, {})],
    ['an undocumented path', observed('GET', '/api/nothing-here', 200, {})],
    ['a body that is not JSON', observed('POST', purchase, 410, 'SOLD OUT')],
    ['an undocumented media type', { ...observed('POST', purchase, 410, { error: 'SOLD_OUT' }), headers: new Headers({ 'content-type': 'text/html' }) }],
    ['a Retry-After that is not an integer', observed('POST', purchase, 503, { error: 'SERVICE_UNAVAILABLE' }, { 'retry-after': 'soon' })],
    ['a readiness check that is neither up nor down', observed('GET', '/readyz', 200, { status: 'ready', checks: { redis: 'meh' } })],
  ])('%s', (_name, response) => {
    expect(() => validateResponse(response)).toThrow(ConformanceError);
  });
});
