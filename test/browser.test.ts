/**
 * The sale page in a real browser: Debian's chromium (installed by scripts/services.sh) driven by
 * playwright-core, against the real API and worker, in a buyer's language and time zone (en-GB, Tokyo) that are
 * not the server's. One unit, a sale that starts a few seconds after the page opens: before the start Buy is
 * disabled and says from when it is on sale, the countdown runs on the server's clock, the item shows its name
 * and units left; at the start a click reserves (the page names the deadline with its date in the buyer's
 * time) and Buy is disabled because the buyer holds an order; the development "Pay" pays it; a second buyer
 * then sees the item sold out. Each state's screenshot is saved under reports/test/browser/.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import type { Sale } from '../src/sale/sales';
import { buyerToken, createTestSale, testConfig } from './support/helpers';
import { useAppHarness } from './support/apiHarness';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const SHOTS = join(__dirname, '..', 'reports', 'test', 'browser');
const PRICE = 2499;
const LOCALE = 'en-GB';
const TIME_ZONE = 'Asia/Tokyo';
/** What the page should write for an instant: the buyer's language and zone, with the date. */
const local = (iso: string) =>
  new Date(iso).toLocaleString(LOCALE, { timeZone: TIME_ZONE, year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false, timeZoneName: 'short' });
const config = testConfig({ SALE_GATE_REQUIRED: 'true' });
const app = useAppHarness(config, 'browser');
let browser: Browser;
let sale: Sale;

beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true });
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  sale = await createTestSale(app.clients, { name: 'Winter sale', quantities: [1], names: ['Air Runner 90'], priceMinor: PRICE, startsInMs: 20_000, paymentWindowMs: 120_000 });
});
afterAll(async () => {
  await browser?.close();
});

async function openAs(buyerId: string): Promise<Page> {
  const page = await (await browser.newContext({ viewport: { width: 900, height: 560 }, locale: LOCALE, timezoneId: TIME_ZONE })).newPage();
  await page.goto(`${app.api.url}/sale/${sale.saleId}`);
  await page.fill('#buyer-id', buyerId);
  await page.click('#sign-in button');
  await page.locator('#signed-in').getByText(`Signed in as ${buyerId}`).waitFor();
  return page;
}

test('before the start, a click at the start, paid with the development Pay, then sold out for the next buyer', async () => {
  const alice = await openAs(`alice-${sale.saleId}`);
  const buy = alice.locator(`button[data-item="${sale.items[0].itemId}"]`);
  const why = alice.locator('.why');
  await expect(buy.isDisabled()).resolves.toBe(true);
  await expect(alice.textContent('.name')).resolves.toBe('Air Runner 90');
  await expect(alice.textContent('.left')).resolves.toBe('1 left');
  await expect(why.textContent()).resolves.toBe(`On sale from ${local(sale.startsAt.toISOString())}`);
  const first = await alice.textContent('#clock');
  expect(first).toMatch(/^Starts in 00:[0-2]\d$/);
  // The countdown runs: the text changes within a second or so (a locator: the page's CSP forbids eval).
  await alice.locator('#clock', { hasNotText: first as string }).waitFor();
  await expect(alice.textContent('.price')).resolves.toBe('€24.99');
  await alice.screenshot({ path: join(SHOTS, '1-before-start.png') });

  await alice.locator(`button[data-item="${sale.items[0].itemId}"]:enabled`).waitFor({ timeout: 30_000 });
  await expect(alice.textContent('#clock')).resolves.toMatch(/^On sale — ends in /);
  await buy.click();
  await alice.locator('#status[data-state="reserved"]').waitFor({ timeout: 15_000 });
  const orderId = new URL(alice.url()).searchParams.get('order') as string;
  expect(orderId).toMatch(/^[0-9a-f-]{36}$/);
  app.accepted.push(orderId);
  const order = await app.call('GET', `/api/flash-sales/orders/${orderId}`, { token: await buyerToken(config, `alice-${sale.saleId}`) });
  const reserved = (await alice.textContent('#status')) ?? '';
  expect(reserved.startsWith(`Reserved — pay by ${local(order.body.paymentDeadline as string)} (`)).toBe(true);
  expect(reserved).toMatch(/ \((0[12]|00):\d\d left\)$/);
  // One action at a time: Buy stays disabled while the buyer holds the order, and says why.
  await expect(buy.isDisabled()).resolves.toBe(true);
  await expect(why.textContent()).resolves.toBe('One unit per buyer: you hold an order in this sale');
  await alice.locator('#pay:visible').waitFor();
  await alice.locator('.left', { hasText: 'none left' }).waitFor();
  await alice.screenshot({ path: join(SHOTS, '2-reserved.png') });

  await alice.click('#pay');
  await alice.locator('#status[data-state="paid"]').waitFor({ timeout: 15_000 });
  await expect(alice.textContent('#status')).resolves.toBe('Paid — the item is yours');
  await expect(alice.locator('#pay').isHidden()).resolves.toBe(true);
  await expect(why.textContent()).resolves.toBe('You bought your unit in this sale');
  const row = await app.clients.pool.query('SELECT status, payment_id AS "paymentId", price_minor::int AS "priceMinor" FROM orders WHERE id = $1', [orderId]);
  expect(row.rows[0]).toEqual({ status: 'PAID', paymentId: `dev-${orderId}`, priceMinor: PRICE });
  await alice.screenshot({ path: join(SHOTS, '3-paid.png') });

  const bob = await openAs(`bob-${sale.saleId}`);
  const bobsButton = bob.locator(`button[data-item="${sale.items[0].itemId}"]`);
  await bobsButton.getByText('Sold out').waitFor();
  await expect(bob.textContent('#status[data-state="sold-out"]')).resolves.toBe('Sold out — every unit is taken');
  await expect(bobsButton.isDisabled()).resolves.toBe(true);
  await expect(bob.textContent('.left')).resolves.toBe('none left');
  await bob.screenshot({ path: join(SHOTS, '4-sold-out.png') });
}, 60_000);
