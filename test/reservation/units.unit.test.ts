/**
 * Unit numbers, pure logic (src/reservation/layout.ts shardUnits, src/reservation/formats.ts): an item's shards
 * hold its units 1..quantity, each once, as many as shardQuantity says; a reservation value and a start queue
 * entry carry the unit and its shard's epoch and read back exactly (with its traceparent, tracing on); an entry
 * whose terms name no unit or epoch is refused (it cannot be placed).
 */
import { entryFields, entryTraceParent, InvalidEntry, parseEntryFields, parseReservation, reservationTerms, reservationValue } from '../../src/reservation/formats';
import { shardQuantity, shardUnits } from '../../src/reservation/layout';
import type { OrderInput } from '../../src/order/types';

test.each([
  [1, 1],
  [10, 3],
  [10_000, 3],
  [7, 7],
  [5, 8],
  [1_000, 64],
])('quantity %d over %d shards: every unit 1..quantity on exactly one shard, each shard its share', (quantity, shards) => {
  const runs = Array.from({ length: shards }, (_, k) => shardUnits(quantity, shards, k));
  runs.forEach((run, k) => expect(run).toHaveLength(shardQuantity(quantity, shards, k)));
  expect(runs.flat()).toEqual(Array.from({ length: quantity }, (_, i) => i + 1));
});

const order: OrderInput = { orderId: '00000001-0000-8000-8000-000000000001', saleId: 1, itemId: 7, userId: 'u-1', priceMinor: 1999, paymentWindowMs: 600_000, reservedAtMs: 1_760_000_000_000 };

test('a reservation value is the terms, the unit and the epoch, and reads back as the order with its unit, shard and epoch', () => {
  const value = reservationValue({ ...order, unit: 42, stockEpoch: 3 });
  expect(value).toBe(`${reservationTerms(order)}|42|3`);
  expect(parseReservation(1, 2, order.orderId, value)).toEqual({ ...order, unit: 42, stockShard: 2, stockEpoch: 3 });
  expect(() => reservationValue(order)).toThrow(/holds no unit of an epoch/);
  expect(() => reservationValue({ ...order, unit: 42 })).toThrow(/holds no unit of an epoch/);
});

test('a start queue entry as a reserving script writes it (fields, then the value) reads back with its unit and epoch; one without either is refused', () => {
  const written = [...entryFields(order), `${reservationTerms(order)}|3|1`];
  expect(parseEntryFields(1, '1-0', written)).toEqual({ ...order, unit: 3, stockEpoch: 1 });
  expect(() => parseEntryFields(1, '1-0', [...entryFields(order), reservationTerms(order)])).toThrow(InvalidEntry);
  expect(() => parseEntryFields(1, '1-0', [...entryFields(order), `${reservationTerms(order)}|3`])).toThrow(InvalidEntry);
});

test("with tracing on, an entry carries the reservation's traceparent first, and reads back the same order", () => {
  const traceParent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
  const written = [...entryFields(order, traceParent), `${reservationTerms(order)}|3|1`];
  expect(entryTraceParent(written)).toBe(traceParent);
  expect(parseEntryFields(1, '1-0', written)).toEqual({ ...order, unit: 3, stockEpoch: 1 });
  expect(entryTraceParent([...entryFields(order), `${reservationTerms(order)}|3|1`])).toBeUndefined();
});
