/**
 * The sale page in a real browser: Debian's chromium (installed by scripts/services.sh) driven by
 * playwright-core, against the real API and worker. One unit, a sale that starts a few seconds after the page
 * opens: before the start the button is disabled and the countdown runs on the server's clock; at the start
 * a click reserves (the page names the order's deadline); a payment through the payment route turns it paid;
 * a second buyer then sees the item sold out. Each state's screenshot is saved under reports/test/browser/.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import type { Sale } from '../src/sale/sales';
import { createTestSale, testConfig } from './helpers';
import { useAppHarness } from './api/harness';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const SHOTS = join(__dirname, '..', 'reports', 'test', 'browser');
const PRICE = 2499;
const config = testConfig({ SALE_GATE_REQUIRED: 'true' });
const app = useAppHarness(config, 'browser');
let browser: Browser;
let sale: Sale;

beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true });
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  sale = await createTestSale(app.clients, { quantities: [1], priceMinor: PRICE, startsInMs: 8000, paymentWindowMs: 120_000 });
});
afterAll(async () => {
  await browser?.close();
});

async function openAs(buyerId: string): Promise<Page> {
  const page = await (await browser.newContext({ viewport: { width: 900, height: 560 } })).newPage();
  await page.goto(`${app.api.url}/sale/${sale.saleId}`);
  await page.fill('#buyer-id', buyerId);
  await page.click('#sign-in button');
  await page.locator('#signed-in').getByText(`Signed in as ${buyerId}`).waitFor();
  return page;
}

test('before the start, a click at the start, paid, then sold out for the next buyer', async () => {
  const alice = await openAs(`alice-${sale.saleId}`);
  const buy = alice.locator(`button[data-item="${sale.items[0].itemId}"]`);
  await expect(buy.isDisabled()).resolves.toBe(true);
  const first = await alice.textContent('#clock');
  expect(first).toMatch(/^Starts in 00:0\d$/);
  // The countdown runs: the text changes within a second or so (a locator: the page's CSP forbids eval).
  await alice.locator('#clock', { hasNotText: first as string }).waitFor();
  await expect(alice.textContent('.price')).resolves.toBe('€24.99');
  await alice.screenshot({ path: join(SHOTS, '1-before-start.png') });

  await alice.locator(`button[data-item="${sale.items[0].itemId}"]:enabled`).waitFor({ timeout: 15_000 });
  await expect(alice.textContent('#clock')).resolves.toMatch(/^On sale — ends in /);
  await buy.click();
  await alice.locator('#status[data-state="reserved"]').waitFor({ timeout: 15_000 });
  const reserved = (await alice.textContent('#status')) ?? '';
  expect(reserved).toMatch(/^Reserved — pay by \d\d:\d\d:\d\d \((0[12]|00):\d\d left\)$/);
  await alice.screenshot({ path: join(SHOTS, '2-reserved.png') });

  const orderId = new URL(alice.url()).searchParams.get('order');
  expect(orderId).toMatch(/^[0-9a-f-]{36}$/);
  app.accepted.push(orderId as string);
  const paid = await app.call('POST', `/api/flash-sales/orders/${orderId}/payment`, { token: config.PAYMENT_SERVICE_TOKEN, json: { paymentId: `browser-${orderId}`, amount: PRICE } });
  expect(paid.status).toBe(200);
  await alice.locator('#status[data-state="paid"]').waitFor({ timeout: 15_000 });
  await expect(alice.textContent('#status')).resolves.toBe('Paid — the item is yours');
  await alice.screenshot({ path: join(SHOTS, '3-paid.png') });

  const bob = await openAs(`bob-${sale.saleId}`);
  const bobsButton = bob.locator(`button[data-item="${sale.items[0].itemId}"]`);
  await bobsButton.getByText('Sold out').waitFor();
  await expect(bob.textContent('#status[data-state="sold-out"]')).resolves.toBe('Sold out — every unit is taken');
  await expect(bobsButton.isDisabled()).resolves.toBe(true);
  await bob.screenshot({ path: join(SHOTS, '4-sold-out.png') });
}, 60_000);
