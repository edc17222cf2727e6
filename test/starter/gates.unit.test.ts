/**
 * The starter's gates (src/starter/gates.ts), pure logic with a fake backlog reading and clock: BacklogGate lets
 * at most maxBacklog minus the workers' backlog starts go until its next reading, and a failed reading lets a
 * full budget go; AcceptanceGate holds the starts while the sales' start queues fill at a stampede's pace.
 */
import pino from 'pino';
import { AcceptanceGate, BacklogGate } from '../../src/starter/gates';
import { PACE_WINDOW_MS } from '../../src/starter/pacing';
import { classify } from '../../src/starter/failures';

const log = pino({ level: 'silent' });

test('BacklogGate: room is maxBacklog minus the backlog; spent, starts wait until the next reading, which refills it', async () => {
  let now = 0;
  const readings = [150, 0];
  const told: number[] = [];
  const gate = new BacklogGate(async () => readings.shift() as number, 200, (tasks) => told.push(tasks), log, () => now);
  expect(await gate.waitMs()).toBe(0);
  expect(gate.room()).toBe(50);
  for (let i = 0; i < 50; i++) gate.started();
  now = 400;
  expect(gate.room()).toBe(0);
  expect(await gate.waitMs()).toBe(600);
  now = 1000;
  expect(await gate.waitMs()).toBe(0);
  expect(gate.room()).toBe(200);
  expect(told).toEqual([150, 0]);
});

test('BacklogGate: a backlog at or over maxBacklog holds every start; a failed reading lets a full budget go', async () => {
  let now = 0;
  const gate = new BacklogGate(async () => (now === 0 ? 250 : Promise.reject(new Error('UNAVAILABLE'))), 200, () => undefined, log, () => now);
  expect(await gate.waitMs()).toBe(1000);
  expect(gate.room()).toBe(0);
  now = 1000;
  expect(await gate.waitMs()).toBe(0);
  expect(gate.room()).toBe(200);
});

test("AcceptanceGate: reads the sales' counts once a window; a stampede in any process holds the starts, a sale first seen mid-stampede included", async () => {
  let now = 0;
  const readings: ReadonlyMap<number, number>[] = [
    // The first reading only sets the start: sale 1's 9,000 orders are old.
    new Map([[1, 9000]]),
    // 100 more in sale 1 over a window: 400/s.
    new Map([[1, 9100]]),
    new Map([[1, 9100]]),
    new Map([[1, 9100]]),
    // Sale 2 first seen with 60 orders, which came within this window: 240/s.
    new Map([[1, 9100], [2, 60]]),
  ];
  let reads = 0;
  const gate = new AcceptanceGate(200, 60_000, async () => readings[reads++], log, () => now);
  expect(await gate.waitMs(false)).toBe(0);
  now = PACE_WINDOW_MS;
  expect(await gate.waitMs(false)).toBe(PACE_WINDOW_MS);
  // Asked again within the window: no new reading, the same verdict until it ends.
  now += 100;
  expect(await gate.waitMs(false)).toBe(PACE_WINDOW_MS - 100);
  expect(reads).toBe(2);
  now = 2 * PACE_WINDOW_MS;
  expect(await gate.waitMs(false)).toBe(PACE_WINDOW_MS);
  now = 3 * PACE_WINDOW_MS;
  expect(await gate.waitMs(false)).toBe(0);
  now = 4 * PACE_WINDOW_MS;
  expect(await gate.waitMs(false)).toBe(PACE_WINDOW_MS);
  expect(reads).toBe(5);
});

test('AcceptanceGate: an idle starter waits out an opening window; a failed reading lets the starts go; 0 never reads', async () => {
  let now = 0;
  const readings: (ReadonlyMap<number, number> | Error)[] = [new Map([[1, 0]]), new Map([[1, 0]]), new Map([[1, 20]]), new Error('CLUSTERDOWN')];
  const gate = new AcceptanceGate(200, 60_000, async () => {
    const next = readings.shift() as ReadonlyMap<number, number> | Error;
    if (next instanceof Error) throw next;
    return next;
  }, log, () => now);
  expect(await gate.waitMs(true)).toBe(0);
  now = 1000;
  expect(await gate.waitMs(true)).toBe(0);
  now = 2000;
  expect(await gate.waitMs(true)).toBe(PACE_WINDOW_MS);
  now = 2000 + PACE_WINDOW_MS;
  expect(await gate.waitMs(true)).toBe(0);
  let read = false;
  expect(await new AcceptanceGate(0, 60_000, async () => ((read = true), new Map()), log).waitMs(true)).toBe(0);
  expect(read).toBe(false);
});

test.each([
  ['PostgreSQL refusing connections (the store before the start)', Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' }), 'unavailable'],
  ['PostgreSQL shutting down', Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01' }), 'unavailable'],
  ["Temporal's gRPC UNAVAILABLE", Object.assign(new Error('14 UNAVAILABLE: No connection established'), { code: 14 }), 'unavailable'],
  ["Temporal's RESOURCE_EXHAUSTED", new Error('8 RESOURCE_EXHAUSTED: namespace rate limit exceeded'), 'resource_exhausted'],
  ['anything else', new Error('something broke'), 'other'],
])('a start failing with %s is classed %s', (_name, err, cause) => {
  expect(classify(err)).toBe(cause);
});
