/**
 * Unit tests of Polled (src/api/polled.ts), the timer behind /readyz and the store gauges of /metrics: readers get
 * the last settled reading at once, readings never overlap, a failure is answered until the next reading, and
 * stop() ends the timer.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Polled } from '../../src/api/polled';

const EVERY_MS = 20;

test('the first call waits for the first reading; later calls answer the last settled one, never two readings at once', async () => {
  let reads = 0;
  let inFlight = 0;
  let mostInFlight = 0;
  const polled = new Polled(async () => {
    const n = ++reads;
    mostInFlight = Math.max(mostInFlight, ++inFlight);
    // Slower than the period: the next reading waits for this one.
    await sleep(EVERY_MS * 2);
    inFlight--;
    return n;
  }, EVERY_MS);
  try {
    expect(reads).toBe(0);
    expect(await polled.latest()).toBe(1);
    // A reading is in flight or due: the last settled one answers, without waiting.
    expect(await Promise.race([polled.latest(), sleep(EVERY_MS / 2).then(() => 'waited')])).toBe(1);
    await sleep(EVERY_MS * 8);
    expect(await polled.latest()).toBeGreaterThanOrEqual(2);
    expect(mostInFlight).toBe(1);
  } finally {
    polled.stop();
  }
});

test('a failed reading is answered as a rejection until a later one succeeds; stop() takes no more', async () => {
  let fail = true;
  let reads = 0;
  const polled = new Polled(async () => {
    reads++;
    if (fail) throw new Error('store down');
    return 'up';
  }, EVERY_MS);
  await expect(polled.latest()).rejects.toThrow('store down');
  fail = false;
  await sleep(EVERY_MS * 4);
  await expect(polled.latest()).resolves.toBe('up');
  polled.stop();
  const stoppedAt = reads;
  await sleep(EVERY_MS * 4);
  expect(reads).toBe(stoppedAt);
});
