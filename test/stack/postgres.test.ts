/**
 * PostgreSQL on the migrated schema, around Redis: SQL written straight to the tables meets the constraints behind
 * I1 (each live order holds its own unit of its item, 1..quantity: orders_live_unit, orders_live_unit_of_item with the
 * item's quantity that orders_item_quantity ties to the item)
 * and I3 (one live order per buyer per sale event), and buying again after EXPIRED is allowed. Two transactions
 * racing for one unit: the second waits for the first and stores only if the first did not.
 */
import { randomUUID } from 'node:crypto';
import { connectClients, createTestSale, testConfig, type Clients } from '../support/helpers';

const config = testConfig();
let clients: Clients;

beforeAll(() => {
  clients = connectClients(config);
});
afterAll(async () => {
  await clients?.close();
});

const error = (p: Promise<unknown>) => p.then(() => undefined, (err: { code?: string; constraint?: string }) => err);

interface Row {
  itemId: number;
  status: string;
  unit: number | null;
  userId?: string;
  /** The item's quantity as the order states it; by default read from the item, as Orders does. */
  itemQuantity?: number | null;
}

/** Inserts an order straight into PostgreSQL (no Redis, no workflow). */
function insert(saleId: number, row: Row, client: { query: Clients['pool']['query'] } = clients.pool) {
  return client.query(
    `INSERT INTO orders (id, sale_id, item_id, user_id, status, price_minor, reserved_at, deadline_at, unit, item_quantity)
     VALUES ($1, $2, $3, $4, $5, 100, now(), now() + interval '10 minutes', $6, CASE WHEN $7 THEN $8::int ELSE (SELECT quantity FROM items WHERE id = $3) END)`,
    [randomUUID(), saleId, row.itemId, row.userId ?? `buyer-${randomUUID()}`, row.status, row.unit, row.itemQuantity !== undefined, row.itemQuantity ?? null],
  );
}

async function liveOrders(itemId: number): Promise<number> {
  const res = await clients.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM orders WHERE item_id = $1 AND status IN ('PENDING', 'PAID')`, [itemId]);
  return res.rows[0].n;
}

test('a sale and its item round-trip with no counter row; an item with orders keeps its quantity', async () => {
  const sale = await createTestSale(clients, { quantities: [3] });
  const item = sale.items[0];
  const read = await clients.pool.query('SELECT * FROM items WHERE id = $1', [item.itemId]);
  expect(read.rows[0]).toMatchObject({ quantity: 3 });
  expect(read.rows[0]).not.toHaveProperty('sold');
  await insert(sale.saleId, { itemId: item.itemId, status: 'PENDING', unit: 3 });
  // A bigger quantity would make room for more live orders than were sold against.
  expect(await error(clients.pool.query('UPDATE items SET quantity = 4 WHERE id = $1', [item.itemId]))).toMatchObject({ code: '23503', constraint: 'orders_item_quantity' });
});

test('quantity + 1 live orders of one item are refused, whatever unit the last one names', async () => {
  const sale = await createTestSale(clients, { quantities: [3, 5] });
  const itemId = sale.items[0].itemId;
  for (const unit of [1, 2, 3]) await insert(sale.saleId, { itemId, status: unit === 2 ? 'PAID' : 'PENDING', unit });

  expect(await error(insert(sale.saleId, { itemId, status: 'PENDING', unit: 4 }))).toMatchObject({ code: '23514', constraint: 'orders_live_unit_of_item' });
  expect(await error(insert(sale.saleId, { itemId, status: 'PAID', unit: 0 }))).toMatchObject({ code: '23514', constraint: 'orders_live_unit_of_item' });
  expect(await error(insert(sale.saleId, { itemId, status: 'PENDING', unit: 3 }))).toMatchObject({ code: '23505', constraint: 'orders_live_unit' });
  expect(await error(insert(sale.saleId, { itemId, status: 'PAID', unit: null }))).toMatchObject({ code: '23514', constraint: 'orders_live_unit_of_item' });
  // The other item of the sale has a unit 5; this one has not, whatever quantity the order claims for it.
  expect(await error(insert(sale.saleId, { itemId, status: 'PENDING', unit: 5 }))).toMatchObject({ constraint: 'orders_live_unit_of_item' });
  expect(await error(insert(sale.saleId, { itemId, status: 'PENDING', unit: 5, itemQuantity: 5 }))).toMatchObject({ code: '23503', constraint: 'orders_item_quantity' });
  expect(await error(insert(sale.saleId, { itemId, status: 'PENDING', unit: 5, itemQuantity: null }))).toMatchObject({ constraint: 'orders_live_unit_of_item' });
  expect(await liveOrders(itemId)).toBe(3);
});

test('the same unit held by two live orders is refused; an ended order leaves its unit free for the next', async () => {
  const sale = await createTestSale(clients, { quantities: [2] });
  const itemId = sale.items[0].itemId;
  await insert(sale.saleId, { itemId, status: 'EXPIRED', unit: 2 });
  await insert(sale.saleId, { itemId, status: 'REJECTED', unit: null });
  await insert(sale.saleId, { itemId, status: 'PENDING', unit: 2 });
  expect(await error(insert(sale.saleId, { itemId, status: 'PAID', unit: 2 }))).toMatchObject({ code: '23505', constraint: 'orders_live_unit' });

  // The holder expires (the statement Orders.settle runs): its unit may be held again, by anyone.
  await clients.pool.query(`UPDATE orders SET status = 'EXPIRED' WHERE item_id = $1 AND status = 'PENDING'`, [itemId]);
  await insert(sale.saleId, { itemId, status: 'PAID', unit: 2 });
  // An ended order cannot come back to life on a unit another holds.
  expect(await error(clients.pool.query(`UPDATE orders SET status = 'PENDING' WHERE item_id = $1 AND status = 'EXPIRED' AND unit = 2`, [itemId]))).toMatchObject({
    constraint: 'orders_live_unit',
  });
  expect(await liveOrders(itemId)).toBe(1);
});

test('two transactions racing for one unit: the second waits, fails if the first commits, stores if it rolls back', async () => {
  const sale = await createTestSale(clients, { quantities: [1] });
  const itemId = sale.items[0].itemId;
  const race = async (firstCommits: boolean) => {
    const [a, b] = [await clients.pool.connect(), await clients.pool.connect()];
    try {
      await a.query('BEGIN');
      await insert(sale.saleId, { itemId, status: 'PENDING', unit: 1 }, a);
      let settled = false;
      const second = error(insert(sale.saleId, { itemId, status: 'PENDING', unit: 1 }, b)).finally(() => (settled = true));
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(settled).toBe(false); // waiting on the first's index entry, not deciding on a snapshot
      await a.query(firstCommits ? 'COMMIT' : 'ROLLBACK');
      return await second;
    } finally {
      a.release();
      b.release();
    }
  };
  expect(await race(false)).toBeUndefined();
  expect(await liveOrders(itemId)).toBe(1);
  await clients.pool.query(`UPDATE orders SET status = 'EXPIRED' WHERE item_id = $1`, [itemId]);
  expect(await race(true)).toMatchObject({ code: '23505', constraint: 'orders_live_unit' });
  expect(await liveOrders(itemId)).toBe(1);
});

test('one live order per buyer per sale event, on any item; an EXPIRED one does not block buying again', async () => {
  const sale = await createTestSale(clients, { quantities: [5, 5] });
  const [first, second] = sale.items.map((i) => i.itemId);
  const userId = `buyer-${randomUUID()}`;
  await insert(sale.saleId, { itemId: first, status: 'PENDING', unit: 1, userId });
  expect(await error(insert(sale.saleId, { itemId: second, status: 'PAID', unit: 1, userId }))).toMatchObject({ code: '23505', constraint: 'orders_one_live_per_buyer' });
  expect(await error(insert(sale.saleId, { itemId: first, status: 'BOUGHT', unit: 2, userId }))).toMatchObject({ code: '23514' });

  await clients.pool.query(`UPDATE orders SET status = 'EXPIRED' WHERE user_id = $1`, [userId]);
  await insert(sale.saleId, { itemId: first, status: 'PENDING', unit: 1, userId });
  await clients.pool.query(`UPDATE orders SET status = 'EXPIRED' WHERE user_id = $1 AND status = 'PENDING'`, [userId]);
  await insert(sale.saleId, { itemId: second, status: 'PAID', unit: 3, userId });
  const rows = await clients.pool.query<{ status: string }>('SELECT status FROM orders WHERE user_id = $1 ORDER BY created_at', [userId]);
  expect(rows.rows.map((r) => r.status).sort()).toEqual(['EXPIRED', 'EXPIRED', 'PAID']);
});
