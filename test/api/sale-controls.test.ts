/**
 * An operator's sale controls over HTTP on the real stores (docs/design.md, "Sale controls"): a pause in the
 * middle of a burst of presses takes effect where purchases are decided (no unit is reserved after the pause's
 * answer), a resume lets presses through again, an end refuses them for good while accepted orders stay payable,
 * two controls that cross (a resume through a process whose link to Redis is slow, an end through another) leave
 * the later one's state on every shard, and a rebuild of a shard that lost its data puts the pause back. The
 * starter is off, so the start queue keeps every entry a reservation wrote, with Redis' own time in its id.
 */
import { randomUUID } from 'node:crypto';
import { startApi } from '../../src/api/main';
import { parseMark } from '../../src/reservation/closing';
import { loadSale, type Sale } from '../../src/sale/sales';
import { shardKeys, tagOf } from '../../src/reservation/layout';
import { useAppHarness } from '../support/apiHarness';
import { bounded, buyerToken, createTestSale, testConfig, until } from '../support/helpers';
import { http } from '../support/openapi';
import { openRelay } from '../support/relay';

const config = testConfig({ STARTER_IN_API: 'false' });
const app = useAppHarness(config, 'sale-controls');
const run = randomUUID().slice(0, 8);
const admin = config.ADMIN_TOKEN;

const control = (sale: Sale, action: 'pause' | 'resume' | 'end') => app.internal('POST', `/api/admin/sales/${sale.saleId}/${action}`, { token: admin });
const press = async (sale: Sale, buyer: string) => app.call('POST', `/api/flash-sales/items/${sale.items[0].itemId}/purchase`, { token: await buyerToken(config, `${buyer}-${run}`) });
const viewState = async (sale: Sale) => (await app.call('GET', `/api/flash-sales/sales/${sale.saleId}`)).body.state;

/** @returns the ms (Redis' clock) of every entry in the sale's start queue: one per reservation, as reserve.lua wrote it */
async function reservedAtMs(sale: Sale): Promise<number[]> {
  const keys = shardKeys(tagOf(await app.clients.store.layouts.get(sale.saleId), 0));
  const entries = await app.clients.redis.xrange(keys.startQueue, '-', '+');
  return entries.map(([id]) => Number(id.split('-')[0]));
}

test('a pause in the middle of a 5,000-press burst: no unit reserved after its answer; presses then answer 503 SALE_PAUSED with Retry-After', async () => {
  const presses = 5000;
  const sale = await createTestSale(app.clients, { quantities: [presses] });
  const tokens = await Promise.all(Array.from({ length: presses }, (_, i) => buyerToken(config, `burst-${i}-${run}`)));
  let accepted = 0;
  let pause: Promise<{ answeredAt: number; status: number }> | undefined;
  const answers = await bounded(
    50,
    tokens.map((token) => async () => {
      const sentAt = Date.now();
      const reply = await app.call('POST', `/api/flash-sales/items/${sale.items[0].itemId}/purchase`, { token });
      if (reply.status === 202 && ++accepted === 1500) pause = control(sale, 'pause').then((r) => ({ answeredAt: Date.now(), status: r.status }));
      return { sentAt, status: reply.status, error: reply.body.error, retryAfter: reply.headers.get('retry-after') };
    }),
  );
  const paused = await (pause as NonNullable<typeof pause>);
  expect(paused.status).toBe(200);
  const reservations = await reservedAtMs(sale);
  // Every 202 has its reservation, and none was written after the pause's answer.
  expect(reservations).toHaveLength(answers.filter((a) => a.status === 202).length);
  expect(reservations.filter((ms) => ms > paused.answeredAt)).toEqual([]);
  expect(answers.filter((a) => a.sentAt > paused.answeredAt && a.status === 202)).toEqual([]);
  const refused = answers.filter((a) => a.status === 503);
  expect(refused.length).toBeGreaterThan(0);
  expect(refused.every((a) => a.error === 'SALE_PAUSED' && a.retryAfter === '5')).toBe(true);
  expect(refused.length + reservations.length).toBe(presses);
  await until('the public view to say PAUSED', async () => (await viewState(sale)) === 'PAUSED', 2000);

  // A second pause answers as the first, changing nothing; a resume lets presses through again.
  expect((await control(sale, 'pause')).body).toEqual({ saleId: sale.saleId, state: 'PAUSED', changed: false });
  expect((await control(sale, 'resume')).body).toEqual({ saleId: sale.saleId, state: 'OPEN', changed: true });
  expect((await press(sale, 'after-resume')).status).toBe(202);
  await until('the public view to say OPEN', async () => (await viewState(sale)) === 'OPEN', 2000);
}, 180_000);

test('end now: presses refused for good (403 SALE_NOT_ACTIVE, no resume), accepted orders still payable until their deadline', async () => {
  const sale = await createTestSale(app.clients, { quantities: [10], priceMinor: 900 });
  const before = await press(sale, 'before-end');
  expect(before.status).toBe(202);
  expect((await control(sale, 'end')).body).toEqual({ saleId: sale.saleId, state: 'ENDED', changed: true });
  expect(await press(sale, 'after-end')).toMatchObject({ status: 403, body: { error: 'SALE_NOT_ACTIVE' } });
  expect(await control(sale, 'resume')).toMatchObject({ status: 409, body: { error: 'SALE_ENDED' } });
  expect(await control(sale, 'pause')).toMatchObject({ status: 409, body: { error: 'SALE_ENDED' } });
  const orderId = before.body.orderId as string;
  const paid = await app.internal('POST', `/api/flash-sales/orders/${orderId}/payment`, { token: config.PAYMENT_SERVICE_TOKEN, json: { paymentId: `pay-${orderId}`, amount: 900 } });
  expect(paid).toMatchObject({ status: 200, body: { status: 'PAID' } });
  await until('the public view to say ENDED', async () => (await viewState(sale)) === 'ENDED', 2000);
  expect((await control(sale, 'end')).body).toEqual({ saleId: sale.saleId, state: 'ENDED', changed: false });
});

test('a rebuild of a shard that lost its data puts the pause back with its stock', async () => {
  const sale = await createTestSale(app.clients, { quantities: [5] });
  await control(sale, 'pause');
  const keys = shardKeys(tagOf(await app.clients.store.layouts.get(sale.saleId), 0));
  await app.clients.redis.del(keys.loaded, keys.closed, keys.stock(sale.items[0].itemId));
  await loadSale(app.clients.pool, app.clients.store, sale.saleId, true);
  expect(parseMark(await app.clients.redis.get(keys.closed))?.closed).toBe('PAUSED');
  expect(await press(sale, 'after-rebuild')).toMatchObject({ status: 503, body: { error: 'SALE_PAUSED' } });
  await control(sale, 'resume');
  expect((await press(sale, 'after-rebuild')).status).toBe(202);
});

test('a resume through a process whose link to Redis is slow, then an end through another: the end stays on every shard, presses are refused', async () => {
  const sale = await createTestSale(app.clients, { quantities: [40] });
  expect((await control(sale, 'pause')).status).toBe(200);
  // A second API process whose every byte to and from Redis waits 3 s (a congested link), its own PostgreSQL.
  const relay = await openRelay(config.REDIS_HOST, config.REDIS_PORT);
  const slow = await startApi(testConfig({ STARTER_IN_API: 'false', REDIS_PORT: String(relay.port) }));
  try {
    relay.delay(3000);
    const resume = http(slow.internalUrl)('POST', `/api/admin/sales/${sale.saleId}/resume`, { token: admin });
    await new Promise((r) => setTimeout(r, 400));
    expect((await control(sale, 'end')).body).toEqual({ saleId: sale.saleId, state: 'ENDED', changed: true });
    const endedAt = Date.now();
    // The resume's own answer (200, or 503 when its marks outlived the command timeout) does not matter: PostgreSQL
    // took it before the end, its marks land after the end's.
    await resume;
    await new Promise((r) => setTimeout(r, Math.max(0, endedAt + 4000 - Date.now())));
    const keys = shardKeys(tagOf(await app.clients.store.layouts.get(sale.saleId), 0));
    expect(parseMark(await app.clients.redis.get(keys.closed))).toEqual({ closed: 'ENDED', version: 4 });
    const presses = await Promise.all(Array.from({ length: 20 }, (_, i) => press(sale, `crossed-${i}`)));
    expect(presses.map((p) => p.status)).toEqual(Array(20).fill(403));
    expect(await viewState(sale)).toBe('ENDED');
  } finally {
    relay.delay(0);
    await slow.close();
    await relay.close();
  }
}, 60_000);

test('controls of an unknown or malformed sale change nothing: 404 SALE_NOT_FOUND, 400 INVALID_SALE_ID; no credential: 401', async () => {
  expect(await app.internal('POST', '/api/admin/sales/999999999/pause', { token: admin })).toMatchObject({ status: 404, body: { error: 'SALE_NOT_FOUND' } });
  expect(await app.internal('POST', '/api/admin/sales/0/pause', { token: admin })).toMatchObject({ status: 400, body: { error: 'INVALID_SALE_ID' } });
  expect((await app.internal('POST', '/api/admin/sales/1/end', {})).status).toBe(401);
});
