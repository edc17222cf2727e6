/**
 * AcceptancePace (src/starter/pacing.ts), pure logic on explicit times: the starter's starts wait while this
 * process accepts orders at or above the configured pace, for at most the configured span in a row, and an idle
 * starter waits out the first window after a quiet one. `at(t, false)`: a starter with starts under way.
 */
import { AcceptancePace } from '../../src/starter/pacing';

/** Accepts `count` orders evenly over [fromMs, toMs). */
function accept(pace: AcceptancePace, count: number, fromMs: number, toMs: number): void {
  for (let i = 0; i < count; i++) pace.accepted(fromMs + ((toMs - fromMs) * i) / count);
}

test('quiet, or slower than the pace: starts go', () => {
  const pace = new AcceptancePace(200, 5000);
  expect(pace.at(0, false)).toBe('go');
  // 100 orders/s for a second: under 200/s.
  accept(pace, 100, 0, 1000);
  expect(pace.at(1000, false)).toBe('go');
});

test('at the pace or faster: starts wait, and go again one quiet window after the last order', () => {
  const pace = new AcceptancePace(200, 5000);
  // 50 orders in the first 100 ms of a 250 ms window: 200/s already.
  accept(pace, 50, 0, 100);
  expect(pace.at(100, false)).toBe('wait');
  accept(pace, 500, 100, 1000);
  expect(pace.at(1000, false)).toBe('wait');
  // The window that held the last orders still counts until the next one has passed without any.
  expect(pace.at(1200, false)).toBe('wait');
  expect(pace.at(1600, false)).toBe('go');
});

test('hot for longer than the span: starts go on until the pace has once dropped', () => {
  const pace = new AcceptancePace(200, 1000);
  accept(pace, 200, 0, 500);
  expect(pace.at(500, false)).toBe('wait');
  accept(pace, 400, 500, 1500);
  expect(pace.at(1500, false)).toBe('overdue');
  accept(pace, 400, 1500, 2500);
  expect(pace.at(2500, false)).toBe('overdue');
  // A pause resets the span: the next burst waits again.
  expect(pace.at(3500, false)).toBe('go');
  accept(pace, 100, 3500, 3600);
  expect(pace.at(3600, false)).toBe('wait');
});

test('the first order after a quiet spell opens a window, so a burst is hot after abovePerS × window orders, wherever it begins', () => {
  const pace = new AcceptancePace(100, 5000);
  // Asked often while idle, as the starter's loop does: the windows it rolls hold nothing.
  for (let t = 0; t <= 1200; t += 10) expect(pace.at(t, false)).toBe('go');
  // 25 orders in 50 ms, 1,205 ms in: 100/s over a 250 ms window.
  accept(pace, 25, 1205, 1255);
  expect(pace.at(1255, false)).toBe('wait');
});

test('an idle starter waits out the first window after a quiet spell: its pace is not known before', () => {
  const pace = new AcceptancePace(200, 5000);
  expect(pace.at(0, true)).toBe('go');
  // One order 2 s into a quiet spell: a stampede's first, or a lone buyer's.
  pace.accepted(2000);
  expect(pace.at(2001, true)).toBe('opening');
  expect(pace.windowLeftMs(2001)).toBe(249);
  expect(pace.at(2249, true)).toBe('opening');
  // Its window passed holding that one order (4/s): starts go.
  expect(pace.at(2250, true)).toBe('go');
  // A lone order once more after a quiet window: it waits for its own window again.
  pace.accepted(3000);
  expect(pace.at(3100, true)).toBe('opening');
  expect(pace.at(3250, true)).toBe('go');
  // A stampede that follows a quiet window: opening, then hot once the window holds abovePerS' worth.
  accept(pace, 10, 4000, 4010);
  expect(pace.at(4010, true)).toBe('opening');
  accept(pace, 40, 4010, 4050);
  expect(pace.at(4050, true)).toBe('wait');
});

test('a starter with starts under way does not wait for an opening window: a trickle must not hold a drain', () => {
  const pace = new AcceptancePace(200, 5000);
  // One order every 600 ms, each after a quiet window.
  for (let t = 1000; t < 5000; t += 600) {
    pace.accepted(t);
    expect(pace.at(t + 1, false)).toBe('go');
    expect(pace.at(t + 1, true)).toBe('opening');
  }
});

test('a whole window below the pace: starts go during it, and the next hot spell waits anew', () => {
  const pace = new AcceptancePace(200, 1000);
  accept(pace, 60, 0, 250);
  expect(pace.at(250, false)).toBe('wait');
  accept(pace, 300, 250, 1250);
  expect(pace.at(1250, false)).toBe('overdue');
  // 1,250–1,500 ms: 40 orders, 160/s; once that window is whole, starts go.
  accept(pace, 40, 1250, 1500);
  expect(pace.at(1501, false)).toBe('go');
  accept(pace, 60, 1501, 1600);
  expect(pace.at(1600, false)).toBe('wait');
});

test('a pace of 0 never waits', () => {
  const pace = new AcceptancePace(0, 5000);
  accept(pace, 10_000, 0, 100);
  expect(pace.at(100, false)).toBe('go');
});
