/**
 * The audit's checks (src/audit/checks.ts) on facts made here: a settled sale passes every check, and each kind of
 * broken store fails the check of its invariant, naming the offender. test/audit/audit.test.ts reads real stores.
 */
import { conservation, eventsOnKafka, everyOrderEnds, noOversell, oneLiveOrderPerBuyer, unitsReturned, type SaleEvents } from '../../src/audit/checks';
import type { OrderRow, SaleFacts } from '../../src/audit/facts';
import type { OrderEvent } from '../../src/order/events';
import type { OrderInput } from '../../src/order/types';

const ITEM = 7;
const order = (n: number, status: OrderRow['status'], unit: number | null): OrderRow => ({
  id: `0000002a-0000-8000-8000-${String(n).padStart(12, '0')}`,
  userId: `buyer-${n}`,
  itemId: ITEM,
  status,
  paymentId: status === 'PAID' ? `pay-${n}` : null,
  reason: status === 'CANCELLED' ? 'BUYER' : null,
  stockShard: 0,
  unit,
});
const reservationOf = (o: OrderRow): OrderInput => ({ orderId: o.id, saleId: 42, itemId: o.itemId, userId: o.userId, priceMinor: 100, paymentWindowMs: 1000, reservedAtMs: 0, stockShard: 0, unit: o.unit ?? undefined });

/** A sale of 3 units at rest: one PAID (unit 1), one EXPIRED (its unit 2 back), units 2 and 3 free. */
function settledSale(): SaleFacts {
  const paid = order(1, 'PAID', 1);
  const expired = order(2, 'EXPIRED', null);
  const done = { status: 'COMPLETED' };
  return {
    saleId: 42,
    items: [{ id: ITEM, quantity: 3, live: 1, units: 1, outside: 0 }],
    orders: [paid, expired],
    layout: { saleId: 42, tags: ['{sale:42}'], itemShards: new Map() },
    freeUnits: new Map([[ITEM, [[2, 3]]]]),
    reservations: [reservationOf(paid)],
    buyers: new Map([[paid.userId, paid.id]]),
    claims: [],
    workflows: new Map([
      [paid.id, { ...done, orderStatus: 'PAID' }],
      [expired.id, { ...done, orderStatus: 'EXPIRED' }],
    ]),
  };
}

function eventsOf(facts: SaleFacts): SaleEvents {
  const events = new Map<string, OrderEvent>();
  for (const o of facts.orders) {
    const base = { version: 1, occurredAt: '2026-12-06T00:00:00Z', orderId: o.id, saleId: 42, itemId: o.itemId, userId: o.userId };
    events.set(`${o.id}-placed`, { ...base, eventId: `${o.id}-placed`, type: 'OrderPlaced' } as OrderEvent);
    const final = o.status === 'PAID' ? { type: 'OrderPaid', paymentId: o.paymentId } : o.status === 'CANCELLED' ? { type: 'OrderCancelled', reason: o.reason } : { type: 'OrderExpired' };
    events.set(`${o.id}-final`, { ...base, eventId: `${o.id}-final`, ...final } as OrderEvent);
  }
  return { events, duplicates: 0, conflicting: [], unrelayed: 0 };
}

const all = (facts: SaleFacts, events = eventsOf(facts)) => [noOversell(facts), conservation(facts), oneLiveOrderPerBuyer(facts), everyOrderEnds(facts), unitsReturned(facts), eventsOnKafka(facts, events)];

test('a settled sale passes every check', () => {
  expect(all(settledSale()).map((c) => [c.invariant, c.ok])).toEqual([['I1', true], ['I1, I2', true], ['I3', true], ['I4', true], ['I2, I4', true], ['I5', true]]);
});

test('a unit both free and held fails conservation (I1, I2), naming the shard', () => {
  const facts = settledSale();
  facts.freeUnits = new Map([[ITEM, [[1, 2, 3]]]]);
  const check = conservation(facts);
  expect(check.ok).toBe(false);
  expect(check.examples?.[0]).toMatch(/^item 7 shard 0:/);
});

test('an expired order whose reservation is still held fails unitsReturned (I2, I4)', () => {
  const facts = settledSale();
  facts.reservations.push(reservationOf({ ...facts.orders[1], unit: 2 }));
  expect(unitsReturned(facts)).toMatchObject({ ok: false, examples: [facts.orders[1].id, facts.orders[1].id] });
});

test('two live orders of one buyer, or a buyer entry naming an ended order, fail I3', () => {
  const twice = settledSale();
  twice.orders[1] = { ...twice.orders[1], userId: twice.orders[0].userId, status: 'PENDING', unit: 2 };
  expect(oneLiveOrderPerBuyer(twice).ok).toBe(false);
  const stale = settledSale();
  stale.buyers.set(stale.orders[1].userId, stale.orders[1].id);
  expect(oneLiveOrderPerBuyer(stale)).toMatchObject({ ok: false, examples: [stale.orders[1].userId] });
});

test('a row left PENDING, or a search attribute that disagrees with the row, fails I4', () => {
  const pending = settledSale();
  pending.orders[1] = { ...pending.orders[1], status: 'PENDING' };
  expect(everyOrderEnds(pending).ok).toBe(false);
  const disagree = settledSale();
  disagree.workflows.set(disagree.orders[0].id, { status: 'COMPLETED', orderStatus: 'EXPIRED' });
  expect(everyOrderEnds(disagree)).toMatchObject({ ok: false, examples: [disagree.orders[0].id] });
});

test('a missing final event, or a paid event naming another payment, fails I5', () => {
  const facts = settledSale();
  const events = eventsOf(facts);
  events.events.delete(`${facts.orders[1].id}-final`);
  expect(eventsOnKafka(facts, events)).toMatchObject({ ok: false, examples: [`${facts.orders[1].id}:OrderExpired`] });
  const wrong = eventsOf(facts);
  wrong.events.set(`${facts.orders[0].id}-final`, { ...(wrong.events.get(`${facts.orders[0].id}-final`) as OrderEvent), paymentId: 'pay-other' } as OrderEvent);
  expect(eventsOnKafka(facts, wrong).ok).toBe(false);
});

test('events still in the outbox (the relay has not published them) fail I5, every event on the topic notwithstanding', () => {
  const facts = settledSale();
  expect(eventsOnKafka(facts, eventsOf(facts)).ok).toBe(true);
  expect(eventsOnKafka(facts, { ...eventsOf(facts), unrelayed: 2 })).toMatchObject({ ok: false, figures: { unrelayed: 2 } });
});

test('a live order without a unit, or with one outside 1..quantity, fails I1', () => {
  const facts = settledSale();
  facts.items[0] = { ...facts.items[0], outside: 1 };
  expect(noOversell(facts)).toMatchObject({ ok: false });
});

/** The settled sale with a third buyer's order CANCELLED (its unit 3 back). */
function withCancelled(): SaleFacts {
  const facts = settledSale();
  const cancelled = order(3, 'CANCELLED', null);
  facts.orders.push(cancelled);
  facts.workflows.set(cancelled.id, { status: 'COMPLETED', orderStatus: 'CANCELLED' });
  return facts;
}

test('a CANCELLED order is checked like an EXPIRED one: passes settled, fails with its unit still held or its event missing', () => {
  const facts = withCancelled();
  const cancelled = facts.orders[2];
  expect(all(facts).every((c) => c.ok)).toBe(true);
  const held = withCancelled();
  held.reservations.push(reservationOf({ ...cancelled, unit: 3 }));
  expect(unitsReturned(held)).toMatchObject({ ok: false });
  const events = eventsOf(facts);
  events.events.delete(`${cancelled.id}-final`);
  expect(eventsOnKafka(facts, events)).toMatchObject({ ok: false, examples: [`${cancelled.id}:OrderCancelled`] });
});

test('a CANCELLED row whose event names another reason, or says OrderExpired, fails I5; a PENDING search attribute fails I4', () => {
  const facts = withCancelled();
  const cancelled = facts.orders[2];
  const otherReason = eventsOf(facts);
  otherReason.events.set(`${cancelled.id}-final`, { ...(otherReason.events.get(`${cancelled.id}-final`) as OrderEvent), reason: 'OPERATOR' });
  expect(eventsOnKafka(facts, otherReason)).toMatchObject({ ok: false, examples: [`${cancelled.id}:OrderCancelled`] });
  const expired = eventsOf(facts);
  expired.events.set(`${cancelled.id}-final`, { ...(expired.events.get(`${cancelled.id}-final`) as OrderEvent), type: 'OrderExpired' });
  expect(eventsOnKafka(facts, expired).ok).toBe(false);
  facts.workflows.set(cancelled.id, { status: 'COMPLETED', orderStatus: 'PENDING' });
  expect(everyOrderEnds(facts)).toMatchObject({ ok: false, examples: [cancelled.id] });
});
