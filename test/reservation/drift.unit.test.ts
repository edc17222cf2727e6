/**
 * The reconciler's comparison (src/reservation/drift.ts), pure: each kind of drift between what PostgreSQL holds and
 * what a shard holds yields its repair, and the normal states of a sale (a stampede's reservations without rows, an
 * order's own release still to come, a purchase between its claim and its take) yield none.
 */
import { planRepairs, toLookUp, type SaleTruth, type ShardView } from '../../src/reservation/drift';
import { reservationValue } from '../../src/reservation/formats';
import type { SaleLayout } from '../../src/reservation/layout';
import type { RowState } from '../../src/order/truth';
import type { OrderInput } from '../../src/order/types';

const layout: SaleLayout = { saleId: 7, tags: ['{sale:7}'], itemShards: new Map([[70, 1]]) };
const order = (n: number, unit: number, userId = `u${n}`): OrderInput => ({
  orderId: `0000000${n}-0000-8000-8000-000000000000`,
  saleId: 7,
  itemId: 70,
  userId,
  priceMinor: 100,
  paymentWindowMs: 60_000,
  reservedAtMs: 1_000,
  stockShard: 0,
  unit,
  stockEpoch: 1,
});
const [a, b, c] = [order(1, 1), order(2, 2), order(3, 3)];
const truth = (live: OrderInput[]): SaleTruth => ({ live, mark: { closed: undefined, version: 1 }, items: [{ itemId: 70, quantity: 4 }] });

/** A shard holding the given reservations (and buyers' entries for them), the rest of its 4 units free. */
function shard(reserved: OrderInput[], changes: Partial<ShardView> = {}): ShardView {
  const held = new Set(reserved.map((o) => o.unit));
  return {
    k: 0,
    epoch: '1',
    free: new Map([[70, [1, 2, 3, 4].filter((u) => !held.has(u))]]),
    buyers: new Map(reserved.map((o) => [o.userId, o.orderId])),
    claimed: new Set(),
    reservations: new Map(reserved.map((o) => [o.orderId, { value: reservationValue(o), order: o }])),
    mark: { closed: undefined, version: 1 },
    ...changes,
  };
}
const rows = (entries: [OrderInput, RowState][]) => new Map(entries.map(([o, state]) => [o.orderId, state]));
const kinds = (repairs: { kind: string }[]) => repairs.map((r) => r.kind);

test('in line: live orders reserved, a stampede\'s reservation without a row, its buyer entry: nothing to repair', () => {
  const view = shard([a, b, c]);
  expect(toLookUp(truth([a, b]), [view])).toEqual([c.orderId]);
  expect(planRepairs(layout, truth([a, b]), [view], new Map(), 2000)).toEqual([]);
});

test('a final order\'s reservation: released with its unit back, once past the grace its compensation has', () => {
  const view = shard([a, b]);
  expect(planRepairs(layout, truth([a]), [view], rows([[b, { status: 'EXPIRED', ageMs: 500 }]]), 2000)).toEqual([]);
  const [repair] = planRepairs(layout, truth([a]), [view], rows([[b, { status: 'EXPIRED', ageMs: 2500 }]]), 2000);
  expect(repair).toMatchObject({ kind: 'release', orderId: b.orderId, unit: 2, unitBack: true, value: reservationValue(b) });
});

test('a final order\'s reservation of a unit a live order holds (Redis handed it out twice): released, the unit kept out', () => {
  const twice = { ...b, unit: 1 };
  const view = shard([a], { reservations: new Map([a, twice].map((o) => [o.orderId, { value: reservationValue(o), order: o }])) });
  const [repair] = planRepairs(layout, truth([a]), [view], rows([[twice, { status: 'REJECTED', ageMs: 9000 }]]), 2000);
  expect(repair).toMatchObject({ kind: 'release', orderId: b.orderId, unitBack: false });
});

test('a live order whose entry is gone: its entry set; one whose reservation and entry are gone, its unit free: both restored', () => {
  expect(kinds(planRepairs(layout, truth([a]), [shard([a], { buyers: new Map() })], new Map(), 2000))).toEqual(['setBuyer']);
  const restored = planRepairs(layout, truth([a]), [shard([])], new Map(), 2000);
  expect(kinds(restored)).toEqual(['restore', 'setBuyer']);
  expect(restored[0]).toMatchObject({ kind: 'restore', value: reservationValue(a) });
  expect(restored[1]).toMatchObject({ userId: a.userId, orderId: a.orderId, expected: '' });
});

test('an entry naming an order that ended or that no store knows, held nowhere and not claimed: cleared; one being claimed: left', () => {
  const stale = shard([a], { buyers: new Map([[a.userId, a.orderId], [b.userId, b.orderId], [c.userId, c.orderId]]) });
  const repairs = planRepairs(layout, truth([a]), [stale], rows([[b, { status: 'EXPIRED', ageMs: 100 }]]), 2000);
  expect(repairs.map((r) => [r.kind, 'orderId' in r && r.orderId])).toEqual([
    ['clearBuyer', b.orderId],
    ['clearBuyer', c.orderId],
  ]);
  expect(planRepairs(layout, truth([a]), [{ ...stale, claimed: new Set([b.orderId, c.orderId]) }], new Map(), 2000)).toEqual([]);
});

test('a live order whose buyer\'s entry names an order held nowhere: the entry set to the live one, against the stale one', () => {
  const view = shard([a], { buyers: new Map([[a.userId, b.orderId]]) });
  expect(planRepairs(layout, truth([a]), [view], rows([[b, { status: 'EXPIRED', ageMs: 100 }]]), 2000)).toEqual([
    expect.objectContaining({ kind: 'setBuyer', userId: a.userId, orderId: a.orderId, expected: b.orderId }),
  ]);
});

test('units: free and reserved → taken out; free twice → once; neither free nor held → free', () => {
  const view = shard([a, b], { free: new Map([[70, [1, 4, 4]]]) });
  const repairs = planRepairs(layout, truth([a, b]), [view], new Map(), 2000);
  expect(repairs.map((r) => [r.kind, 'unit' in r && r.unit])).toEqual([
    ['take', 1],
    ['free', 3],
    ['dedupe', 4],
  ]);
});

test('a unit a live order holds but whose reservation is gone is not freed: the order is restored instead', () => {
  const view = shard([b], { free: new Map([[70, [3, 4]]]) });
  expect(kinds(planRepairs(layout, truth([a, b]), [view], new Map(), 2000))).toEqual(['restore', 'setBuyer']);
});

test('a mark older than the sale\'s state, or none: the state\'s; a newer one (a control after the read) is left', () => {
  const newer: SaleTruth = { ...truth([]), mark: { closed: 'ENDED', version: 4 } };
  expect(planRepairs(layout, newer, [shard([], { mark: { closed: undefined, version: 3 } })], new Map(), 2000)).toEqual([expect.objectContaining({ kind: 'mark', mark: { closed: 'ENDED', version: 4 } })]);
  expect(kinds(planRepairs(layout, newer, [shard([], { mark: undefined })], new Map(), 2000))).toEqual(['mark']);
  expect(planRepairs(layout, truth([]), [shard([], { mark: { closed: 'PAUSED', version: 5 } })], new Map(), 2000)).toEqual([]);
});
