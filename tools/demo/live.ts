/** The demo's live line: once a second, what the run waits for and where the sale stands. */

/** The live line's columns, printed once before it. */
export const LEGEND = [
  'Live line, once a second:',
  '  phase      | what the run waits for, and how many orders or workflows are left',
  '  answered   | presses answered so far, by HTTP status (202 accepted, 409 already holds an order, 410 sold out)',
  '  to start   | accepted orders whose workflow the starter has yet to start (the sale\'s start queue in Redis)',
  '  stored     | orders in PostgreSQL: pending (in their payment window), paid, expired (unit back in stock), rejected',
  '  payments   | the payment service so far: the route\'s answers, and signals sent (their outcome is read at the end)',
].join('\n');

/**
 * Prints `line()` once a second, one at a time: a slow reading's older figures must not print after a newer
 * one's; a reading that fails (a store that did not answer this second) prints nothing.
 * @returns stop
 */
export function startLiveLine(print: (line: string) => void, line: () => Promise<string>): () => void {
  let reading = false;
  const timer = setInterval(() => {
    if (reading) return;
    reading = true;
    void line()
      .then(print, () => undefined)
      .finally(() => (reading = false));
  }, 1000);
  return () => clearInterval(timer);
}
