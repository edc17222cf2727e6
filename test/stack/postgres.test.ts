/**
 * PostgreSQL round trip on the migrated schema: the constraints behind I1 (sold within 0..quantity) and I3
 * (one live order per buyer per sale event, buying again after EXPIRED allowed) hold in the database itself.
 */
import { randomUUID } from 'node:crypto';
import { connectClients, createTestSale, testConfig, type Clients } from '../helpers';

const config = testConfig();
let clients: Clients;

beforeAll(() => {
  clients = connectClients(config);
});
afterAll(async () => {
  await clients?.close();
});

const error = (p: Promise<unknown>) => p.then(() => undefined, (err: { code?: string; constraint?: string }) => err);

test('a sale and its item round-trip; the CHECK refuses sold above quantity or below zero', async () => {
  const sale = await createTestSale(clients, { quantities: [3] });
  const item = sale.items[0];
  const read = await clients.pool.query('SELECT quantity, sold FROM items WHERE id = $1', [item.itemId]);
  expect(read.rows[0]).toEqual({ quantity: 3, sold: 0 });

  expect(await error(clients.pool.query('UPDATE items SET sold = quantity + 1 WHERE id = $1', [item.itemId]))).toMatchObject({
    code: '23514',
    constraint: 'items_sold_within_quantity',
  });
  expect(await error(clients.pool.query('UPDATE items SET sold = -1 WHERE id = $1', [item.itemId]))).toMatchObject({ code: '23514' });
  await clients.pool.query('UPDATE items SET sold = quantity WHERE id = $1', [item.itemId]);
  expect((await clients.pool.query('SELECT sold FROM items WHERE id = $1', [item.itemId])).rows[0].sold).toBe(3);
});

test('one live order per buyer per sale event; an EXPIRED one does not block buying again', async () => {
  const sale = await createTestSale(clients, { quantities: [5, 5] });
  const insert = (itemId: number, status: string) =>
    clients.pool.query(
      `INSERT INTO orders (id, sale_id, item_id, user_id, status, price_minor, reserved_at, deadline_at)
       VALUES ($1, $2, $3, 'same-buyer', $4, 100, now(), now() + interval '10 minutes')`,
      [randomUUID(), sale.saleId, itemId, status],
    );
  await insert(sale.items[0].itemId, 'EXPIRED');
  await insert(sale.items[0].itemId, 'PENDING');
  // Another item of the same sale event is still the same sale: refused.
  expect(await error(insert(sale.items[1].itemId, 'PAID'))).toMatchObject({ code: '23505', constraint: 'orders_one_live_per_buyer' });
  expect(await error(insert(sale.items[1].itemId, 'BOUGHT'))).toMatchObject({ code: '23514' });
});
