/** Order ids that carry their sale (src/order/orderId.ts): well-formed RFC 9562 version 8 UUIDs, read back exactly. */
import { randomUUID } from 'node:crypto';
import { MAX_INT4 } from '../../src/order/ids';
import { isOrderId } from '../../src/order/types';
import { newOrderId, saleOfOrder } from '../../src/order/orderId';

test.each([1, 42, 65_536, MAX_INT4])('sale %d: the id is a version 8 UUID our parser accepts, and names its sale', (saleId) => {
  const ids = new Set(Array.from({ length: 1000 }, () => newOrderId(saleId)));
  expect(ids.size).toBe(1000);
  for (const id of ids) {
    expect(isOrderId(id)).toBe(true);
    expect(id[14]).toBe('8');
    expect('89ab').toContain(id[19]);
    expect(saleOfOrder(id)).toBe(saleId);
  }
});

test('ids of another layout name no sale: a version 4 UUID, or a version 8 one whose first 32 bits are no INT4 sale id', () => {
  expect(isOrderId(randomUUID())).toBe(false);
  expect(saleOfOrder(randomUUID())).toBeUndefined();
  expect(saleOfOrder('00000000-1234-8abc-9def-123456789abc')).toBeUndefined();
  expect(saleOfOrder('80000000-1234-8abc-9def-123456789abc')).toBeUndefined();
  expect(saleOfOrder('7fffffff-1234-8abc-9def-123456789abc')).toBe(MAX_INT4);
});
