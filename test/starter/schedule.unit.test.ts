/** The starter's poll schedule and back-off (src/starter/schedule.ts), on a clock the test moves. */
import { Backoff, MAX_POLL_MS, MAX_SLEEP_MS, MIN_POLL_MS, POLL_BATCH, PollSchedule } from '../../src/starter/schedule';

const CLAIM_IDLE_MS = 30_000;

test('a listed sale is due at once with a claim sweep, then waits longer after each empty poll, up to MAX_POLL_MS', () => {
  const schedule = new PollSchedule(CLAIM_IDLE_MS);
  schedule.watch([7], []);
  expect(schedule.due(1000)).toEqual([{ saleId: 7, claimFrom: '0-0' }]);
  schedule.claimed(7, '0-0', 1000);
  schedule.polled(7, 0, 1000);
  expect(schedule.due(1000 + MAX_POLL_MS - 1)).toEqual([]);
  // Counted idle until a poll finds entries: the interval starts at its longest.
  expect(schedule.due(1000 + MAX_POLL_MS)).toEqual([{ saleId: 7 }]);
  expect(schedule.nextWake(1000)).toBe(1000 + MAX_SLEEP_MS);
});

test('a poll that finds entries polls again after MIN_POLL_MS; empty ones double the interval', () => {
  const schedule = new PollSchedule(CLAIM_IDLE_MS);
  schedule.watch([1], []);
  schedule.polled(1, 5, 0);
  expect(schedule.due(MIN_POLL_MS - 1)).toEqual([]);
  expect(schedule.due(MIN_POLL_MS).map((d) => d.saleId)).toEqual([1]);
  let now = MIN_POLL_MS;
  const waits: number[] = [];
  for (let i = 0; i < 12; i += 1) {
    schedule.polled(1, 0, now);
    const next = schedule.nextWake(now) - now;
    waits.push(next);
    now += MAX_POLL_MS;
  }
  expect(waits.slice(0, 4)).toEqual([2 * MIN_POLL_MS, 4 * MIN_POLL_MS, 8 * MIN_POLL_MS, 16 * MIN_POLL_MS]);
  expect(Math.max(...waits)).toBe(MAX_SLEEP_MS);
});

test('a noticed sale is polled within MIN_POLL_MS of its last poll and goes before idle ones; at most POLL_BATCH a turn', () => {
  const schedule = new PollSchedule(CLAIM_IDLE_MS);
  const listed = Array.from({ length: POLL_BATCH + 5 }, (_, i) => i + 1);
  schedule.watch(listed, []);
  for (const id of listed) schedule.polled(id, 0, 0);
  expect(schedule.notice(99, 100)).toBeLessThanOrEqual(100);
  schedule.polled(99, 0, 100);
  expect(schedule.notice(99, 105)).toBe(100 + MIN_POLL_MS);
  const due = schedule.due(MAX_POLL_MS);
  expect(due).toHaveLength(POLL_BATCH);
  expect(due[0].saleId).toBe(99);
});

test('a sale that leaves the list is dropped unless noticed here and not listed yet, or entries of it wait here', () => {
  const schedule = new PollSchedule(CLAIM_IDLE_MS);
  schedule.watch([1, 2, 3], []);
  schedule.notice(4, 0);
  schedule.watch([1], [3]);
  expect(schedule.saleIds().sort()).toEqual([1, 3, 4]);
  schedule.watch([4], []);
  schedule.watch([], []);
  expect(schedule.saleIds()).toEqual([]);
});

test('a claim sweep part-way goes on at the next poll; one that went round waits claimIdleMs/2', () => {
  const schedule = new PollSchedule(CLAIM_IDLE_MS);
  schedule.watch([1], []);
  schedule.claimed(1, '1700000000000-3', 0);
  schedule.polled(1, 1, 0);
  expect(schedule.due(MIN_POLL_MS)).toEqual([{ saleId: 1, claimFrom: '1700000000000-3' }]);
  schedule.claimed(1, '0-0', MIN_POLL_MS);
  schedule.polled(1, 1, MIN_POLL_MS);
  expect(schedule.due(2 * MIN_POLL_MS)).toEqual([{ saleId: 1 }]);
  expect(schedule.due(MIN_POLL_MS + CLAIM_IDLE_MS / 2)).toEqual([{ saleId: 1, claimFrom: '0-0' }]);
});

test('the back-off doubles from 100 ms to 5 s, is not lengthened during a pause, and starts small after a success', () => {
  const backoff = new Backoff();
  const pauses: number[] = [];
  let now = 0;
  for (let i = 0; i < 9; i += 1) {
    backoff.pause(now);
    backoff.pause(now + 1);
    pauses.push(backoff.pausedUntil - now);
    now = backoff.pausedUntil;
  }
  expect(pauses).toEqual([100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
  backoff.reset();
  backoff.pause(now);
  expect(backoff.pausedUntil - now).toBe(100);
});
