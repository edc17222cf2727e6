/**
 * AcceptancePace (src/api/starter.ts), pure logic on explicit times: the starter's starts wait while this
 * process accepts orders at or above the configured pace, for at most the configured span in a row.
 */
import { AcceptancePace } from '../src/api/starter';

/** Accepts `count` orders evenly over [fromMs, toMs). */
function accept(pace: AcceptancePace, count: number, fromMs: number, toMs: number): void {
  for (let i = 0; i < count; i++) pace.accepted(fromMs + ((toMs - fromMs) * i) / count);
}

test('quiet, or slower than the pace: starts go', () => {
  const pace = new AcceptancePace(200, 5000);
  expect(pace.at(0)).toBe('go');
  // 100 orders/s for a second: under 200/s.
  accept(pace, 100, 0, 1000);
  expect(pace.at(1000)).toBe('go');
});

test('at the pace or faster: starts wait, and go again one quiet window after the last order', () => {
  const pace = new AcceptancePace(200, 5000);
  // 50 orders in the first 100 ms of a 250 ms window: 200/s already.
  accept(pace, 50, 0, 100);
  expect(pace.at(100)).toBe('wait');
  accept(pace, 500, 100, 1000);
  expect(pace.at(1000)).toBe('wait');
  // The window that held the last orders still counts until the next one has passed without any.
  expect(pace.at(1200)).toBe('wait');
  expect(pace.at(1600)).toBe('go');
});

test('hot for longer than the span: starts go on until the pace has once dropped', () => {
  const pace = new AcceptancePace(200, 1000);
  accept(pace, 200, 0, 500);
  expect(pace.at(500)).toBe('wait');
  accept(pace, 400, 500, 1500);
  expect(pace.at(1500)).toBe('overdue');
  accept(pace, 400, 1500, 2500);
  expect(pace.at(2500)).toBe('overdue');
  // A pause resets the span: the next burst waits again.
  expect(pace.at(3500)).toBe('go');
  accept(pace, 100, 3500, 3600);
  expect(pace.at(3600)).toBe('wait');
});

test('a pace of 0 never waits', () => {
  const pace = new AcceptancePace(0, 5000);
  accept(pace, 10_000, 0, 100);
  expect(pace.at(100)).toBe('go');
});
