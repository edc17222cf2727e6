/**
 * What a buyer reads agrees with what their next press decides (I3): an order that ended without a sale reads
 * final only once its buyer may buy again (src/order/store.ts, Orders.find). 40 buyers press, let their orders
 * expire, poll their order every 10 ms and press again the moment it reads EXPIRED: every second press is 202.
 * Before, PostgreSQL said EXPIRED a moment before the workflow's compensation cleared the buyer's entry in Redis,
 * and some second presses were answered 409 naming the expired order. Every response is checked against
 * openapi.yaml.
 */
import { randomUUID } from 'node:crypto';
import { buyerToken, createTestSale, testConfig, type Clients } from '../support/helpers';
import type { Http } from '../support/openapi';
import { useAppHarness } from '../support/apiHarness';

const BUYERS = 40;
const WINDOW_MS = 2000;
const POLL_MS = 10;

const config = testConfig();
const app = useAppHarness(config, 'one-truth');
const { accepted } = app;
let clients: Clients;
let call: Http;
beforeAll(() => ({ clients, call } = app));
const run = randomUUID().slice(0, 8);

test(`${BUYERS} buyers press again the moment their order reads EXPIRED: every second press is 202`, async () => {
  // More units than buyers: the item is never sold out (a sold-out item answers 410 for a moment after units come back).
  const sale = await createTestSale(clients, { quantities: [BUYERS * 2], paymentWindowMs: WINDOW_MS });
  const itemId = sale.items[0].itemId;
  const buyers = await Promise.all(Array.from({ length: BUYERS }, (_, i) => buyerToken(config, `truth-${run}-${i}`)));
  const press = (token: string) => call('POST', `/api/flash-sales/items/${itemId}/purchase`, { token });
  const first = await Promise.all(buyers.map(press));
  expect(first.map((r) => r.status)).toEqual(buyers.map(() => 202));

  const seconds = await Promise.all(
    buyers.map(async (token, i) => {
      const orderId = first[i].body.orderId as string;
      accepted.push(orderId);
      const deadline = Date.now() + WINDOW_MS + 60_000;
      for (;;) {
        const read = await call('GET', `/api/flash-sales/orders/${orderId}`, { token });
        if (read.body.status === 'EXPIRED') break;
        expect(read.body.status).toBe('PENDING');
        if (Date.now() > deadline) throw new Error(`order ${orderId} never read EXPIRED`);
        await new Promise((resolve) => setTimeout(resolve, POLL_MS));
      }
      const again = await press(token);
      if (again.status === 202) accepted.push(again.body.orderId as string);
      return { status: again.status, orderId: again.body.orderId, expired: orderId };
    }),
  );
  expect(seconds.filter((s) => s.status !== 202)).toEqual([]);
}, 120_000);
