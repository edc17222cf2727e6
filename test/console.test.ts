/**
 * The operators' console in a real browser (Debian's chromium through playwright-core) against the real API,
 * worker and stores: the live figures of a sale with two stock shards, a pause asked for and confirmed (a press
 * then answers SALE_PAUSED), an end asked for and not confirmed (nothing sent), and an order cancelled by id
 * (its unit back). Screenshots of the live sale, the paused sale and the cancelled order go to
 * reports/test/console/.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import type { Sale } from '../src/sale/sales';
import { useAppHarness } from './support/apiHarness';
import { buyerToken, createTestSale, eventually, testConfig } from './support/helpers';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const SHOTS = join(__dirname, '..', 'reports', 'test', 'console');
const config = testConfig();
const app = useAppHarness(config, 'console');
let browser: Browser;
let sale: Sale;
const orderIds: string[] = [];

beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true });
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  sale = await createTestSale(app.clients, { name: 'Winter sale', quantities: [20], names: ['Air Runner 90'], stockShards: [2], paymentWindowMs: 120_000 });
  for (let i = 0; i < 5; i++) {
    const reply = await app.call('POST', `/api/flash-sales/items/${sale.items[0].itemId}/purchase`, { token: await buyerToken(config, `console-${i}-${sale.saleId}`) });
    expect(reply.status).toBe(202);
    orderIds.push(reply.body.orderId as string);
  }
  app.accepted.push(...orderIds);
});
afterAll(async () => {
  await browser?.close();
});

/** @returns the free units the items table shows, summed over the shards */
async function freeShown(page: Page): Promise<number> {
  const cells = await page.locator('#items tr').nth(1).locator('td').allTextContents();
  return cells.slice(3).reduce((n, text) => n + Number(text), 0);
}

test('live figures, a confirmed pause, an end not confirmed, and an order cancelled by id', async () => {
  const page = await (await browser.newContext({ viewport: { width: 1100, height: 760 } })).newPage();
  await page.goto(`${app.api.internalUrl}/console/sales/${sale.saleId}`);
  await page.fill('#admin-token', config.ADMIN_TOKEN);
  await page.click('#sign-in button');
  await page.locator('#state', { hasText: 'Purchases open' }).waitFor();
  await expect(page.textContent('#title')).resolves.toBe(`Sale ${sale.saleId}: Winter sale`);
  // Two shards' free units, 20 less the 5 reserved; the orders as the starter stores them.
  await expect(page.locator('#items th').allTextContents()).resolves.toEqual(['item', 'quantity', 'held by live orders', 'free on shard 0', 'free on shard 1']);
  await expect(freeShown(page)).resolves.toBe(15);
  await page.locator('#orders tr', { hasText: 'PENDING' }).locator('td', { hasText: /^5$/ }).waitFor();
  await page.screenshot({ path: join(SHOTS, 'live-sale.png'), fullPage: true });

  page.once('dialog', (dialog) => void dialog.accept());
  await page.click('#pause');
  await page.locator('#state', { hasText: 'Purchases paused' }).waitFor();
  await expect(page.locator('#log li').first().textContent()).resolves.toMatch(new RegExp(`pause: sale ${sale.saleId} is PAUSED$`));
  const press = await app.call('POST', `/api/flash-sales/items/${sale.items[0].itemId}/purchase`, { token: await buyerToken(config, `console-late-${sale.saleId}`) });
  expect(press.body.error).toBe('SALE_PAUSED');
  await expect(page.isDisabled('#pause')).resolves.toBe(true);
  await page.screenshot({ path: join(SHOTS, 'paused-sale.png'), fullPage: true });

  // Not confirmed: nothing is sent, and the sale stays paused.
  page.once('dialog', (dialog) => void dialog.dismiss());
  await page.click('#end');
  await expect(page.locator('#log li').first().textContent()).resolves.toMatch(/Not sent: End sale/);
  expect((await app.internal('GET', `/api/admin/sales/${sale.saleId}/live`, { token: config.ADMIN_TOKEN })).body.state).toBe('PAUSED');

  await page.fill('#order-id', orderIds[0]);
  await page.fill('#note', 'a fraudulent order');
  page.once('dialog', (dialog) => void dialog.accept());
  await page.click('#cancel-order button');
  await page.locator('#log li', { hasText: `cancel: order ${orderIds[0]} is CANCELLED (OPERATOR)` }).waitFor();
  await page.locator('#orders tr', { hasText: 'CANCELLED' }).locator('td', { hasText: /^1$/ }).waitFor();
  await eventually(async () => expect(await freeShown(page)).toBe(16));
  await page.screenshot({ path: join(SHOTS, 'cancelled-order.png'), fullPage: true });
}, 120_000);

test('the console page and its assets are on the internal door only; its figures need the admin token', async () => {
  // The public door does not know the path (its contract does not document it): a plain fetch.
  expect((await fetch(`${app.api.url}/console/sales/${sale.saleId}`)).status).toBe(404);
  expect((await app.internal('GET', `/api/admin/sales/${sale.saleId}/live`, {})).status).toBe(401);
  expect((await app.internal('GET', '/console/assets/nothing.js')).status).toBe(404);
});
