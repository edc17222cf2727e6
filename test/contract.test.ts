/**
 * The contract fuzzed: schemathesis (`st`, installed by scripts/services.sh from PyPI) generates requests from
 * openapi.yaml (the whole document, as the internal door serves it) against the real API on the real stack with
 * every check (`--checks all`), once per credential, each at its door: a buyer JWT (the buyer routes) at the
 * public door, the admin token (the admin routes) and the payment service token (the payment route) at the
 * internal one; in every pass the routes without a credential that its door serves. The data each needs to
 * reach past 401/403/404 (an active sale, its item and purchase gate, an order of that buyer) is made here first
 * and handed over through test/contract/schemathesis.toml, which also fixes the seed and the number of examples.
 * Each pass's report is kept in reports/test/schemathesis-*.txt; a failure prints it, with a curl line that
 * reproduces each failing case.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SaleGates } from '../src/api/saleGate';
import { buyerToken, createTestSale, testConfig } from './support/helpers';
import { useAppHarness } from './support/apiHarness';

const ROOT = join(__dirname, '..');
const ST = join(ROOT, '.local', 'venv', 'bin', 'st');
/** The operations without a credential, by the door that serves them. */
const OPEN = {
  public: ['health', 'openapi', 'getSaleView', 'serverTime', 'devToken', 'salePage', 'saleAsset'],
  internal: ['health', 'ready', 'metrics', 'openapi'],
};
// schemathesis sends wrong and missing credentials on purpose (its auth checks): all from this one address,
// which the internal door's failed-credential limit would soon answer 429.
const config = testConfig({ SALE_GATE_REQUIRED: 'true', INTERNAL_AUTH_FAILURES_PER_MIN: '1000000' });
const app = useAppHarness(config, 'contract');
const data: Record<string, string> = {};
let buyer = '';

beforeAll(async () => {
  const sale = await createTestSale(app.clients, { quantities: [1000], paymentWindowMs: 600_000 });
  buyer = await buyerToken(config, `contract-${sale.saleId}`, '2h');
  const gate = new SaleGates(config.SALE_GATE_SECRET).of(sale.saleId);
  const order = await app.call('POST', `/api/flash-sales/items/${sale.items[0].itemId}/purchase`, { token: buyer, headers: { 'sale-gate': gate } });
  expect(order.status).toBe(202);
  app.accepted.push(order.body.orderId as string);
  Object.assign(data, { SALE_ID: String(sale.saleId), ITEM_ID: String(sale.items[0].itemId), ORDER_ID: order.body.orderId as string, SALE_GATE: gate });
});

/**
 * Runs one schemathesis pass over the given operation ids with the credential, at one of the API's doors (in a
 * child process: the API it fuzzes answers from this one).
 * @returns its exit status and report
 */
async function fuzz(door: keyof typeof OPEN, token: string, operations: string[]): Promise<{ status: number | null; output: string }> {
  const child = spawn(
    ST,
    [
      '--no-color',
      '--config-file',
      join(__dirname, 'contract', 'schemathesis.toml'),
      'run',
      `${app.api.internalUrl}/openapi.json`,
      '--url',
      door === 'public' ? app.api.url : app.api.internalUrl,
      '--checks',
      'all',
      '-H',
      `Authorization: Bearer ${token}`,
      ...operations.flatMap((id) => ['--include-operation-id', id]),
    ],
    { cwd: ROOT, env: { ...process.env, ...data }, stdio: ['ignore', 'pipe', 'pipe'], timeout: 170_000 },
  );
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
  const [status] = (await once(child, 'close')) as [number | null];
  return { status, output };
}

test.each<[string, string, keyof typeof OPEN, () => string, string[]]>([
  ['a buyer JWT', 'buyer', 'public', () => buyer, ['purchase', 'getOrder']],
  ['the admin token', 'admin', 'internal', () => config.ADMIN_TOKEN, ['createSale', 'getSale', 'loadStock']],
  ['the payment service token', 'payment', 'internal', () => config.PAYMENT_SERVICE_TOKEN, ['pay', 'getOrderForPayment']],
])('schemathesis with %s: no failure, every operation of the pass tested, none left for auth or data', async (_name, pass, door, credential, own) => {
  const operations = [...own, ...OPEN[door]];
  const { status, output } = await fuzz(door, credential(), operations);
  mkdirSync(join(ROOT, 'reports', 'test'), { recursive: true });
  writeFileSync(join(ROOT, 'reports', 'test', `schemathesis-${pass}.txt`), output);
  // Generated bodies can be tens of KB on one line: the report keeps each line's head.
  const report = output.split('\n').map((line) => (line.length > 600 ? `${line.slice(0, 600)} …` : line)).join('\n');
  if (status !== 0) throw new Error(`schemathesis failed (exit ${status}):\n${report}`);
  expect(output).toContain(`Selected: ${operations.length}/`);
  expect(output).toContain(`Tested: ${operations.length}`);
  expect(output).not.toMatch(/Skipped:|Missing authentication|Missing valid test data/);
}, 180_000);
