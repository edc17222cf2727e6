/**
 * `npm run sale -- <command>`: sale set-up from the command line.
 *   create --name N --starts-at ISO --ends-at ISO [--payment-window-ms MS] --item PRODUCT:QUANTITY:PRICE_MINOR[:NAME] ...
 *          [--stock-shards S]   every item's stock split over S shards, each on its own Redis Cluster master
 *          (defaults: starts now, ends in 1 hour, one item flash-item:10000:1999, 1 shard)
 *   load SALE_ID [--rebuild [--force]]   load stock into Redis; --rebuild replaces Redis' view from
 *          PostgreSQL once Redis lost the sale's keys (--force: even though it still holds them)
 *   show SALE_ID
 * Prints the sale as JSON. Exits 2 on bad arguments, 1 on other failures.
 */
import { parseArgs } from 'node:util';
import { loadConfig } from '../config';
import { createPool } from '../infra/db';
import { parseId } from '../order/ids';
import { ReservationStore } from '../reservation/store';
import { createRedis } from '../reservation/client';
import { SaleLayouts } from '../reservation/layout';
import { createSale, findSale, loadSale, SaleInput, type Sale } from '../sale/sales';
import { shardPlacer, sharedMasters } from '../reservation/placement';

class UsageError extends Error {}

/** `PRODUCT:QUANTITY:PRICE_MINOR[:NAME]`; the name is the rest of the text, colons and all. */
function parseItem(text: string) {
  const [productId, quantity, priceMinor, ...name] = text.split(':');
  if (!productId || quantity === undefined || priceMinor === undefined) throw new UsageError(`--item ${text}: expected PRODUCT:QUANTITY:PRICE_MINOR[:NAME]`);
  return { productId, quantity: Number(quantity), priceMinor: Number(priceMinor), ...(name.length && { name: name.join(':') }) };
}

async function run(argv: string[]): Promise<Sale> {
  const { positionals, values } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      name: { type: 'string', default: 'Flash sale' },
      'starts-at': { type: 'string' },
      'ends-at': { type: 'string' },
      'payment-window-ms': { type: 'string' },
      item: { type: 'string', multiple: true },
      'stock-shards': { type: 'string', default: '1' },
      rebuild: { type: 'boolean', default: false },
      force: { type: 'boolean', default: false },
    },
  });
  const [command, idText] = positionals;
  const config = loadConfig();
  const pool = createPool(config);
  const redis = createRedis(config);
  const store = new ReservationStore(redis, new SaleLayouts(pool));
  try {
    if (command === 'create') {
      const now = Date.now();
      const input = SaleInput.safeParse({
        name: values.name,
        startsAt: values['starts-at'] ?? new Date(now).toISOString(),
        endsAt: values['ends-at'] ?? new Date(now + 3_600_000).toISOString(),
        paymentWindowMs: Number(values['payment-window-ms'] ?? config.DEFAULT_PAYMENT_WINDOW_MS),
        items: (values.item ?? ['flash-item:10000:1999']).map((text) => ({ ...parseItem(text), stockShards: Number(values['stock-shards']) })),
      });
      if (!input.success) throw new UsageError(input.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('\n'));
      const sale = await createSale(pool, input.data, shardPlacer(store.redis));
      await loadSale(pool, store, sale.saleId, false);
      return sale;
    }
    const saleId = parseId(idText ?? '');
    if ((command === 'load' || command === 'show') && saleId === undefined) throw new UsageError(`${command}: SALE_ID must be a positive integer`);
    const sale = command === 'load' ? await loadSale(pool, store, saleId as number, values.rebuild, values.force) : command === 'show' ? await findSale(pool, saleId as number) : undefined;
    if (command !== 'load' && command !== 'show') throw new UsageError('usage: sale create|load|show (see src/cli/sale.ts)');
    if (!sale) throw new Error(`sale ${saleId} not found`);
    if (command === 'load') {
      const shared = await sharedMasters(store.redis, store.layouts, sale.saleId);
      if (shared.length) console.error(`warning: stock shards share a master (slots moved since the sale was made): ${shared.join(', ')}`);
    }
    return sale;
  } finally {
    await Promise.allSettled([pool.end(), redis.quit()]);
  }
}

run(process.argv.slice(2)).then(
  (sale) => console.log(JSON.stringify(sale, null, 2)),
  (err) => {
    console.error(err instanceof Error ? err.message : String(err));
    process.exit(err instanceof UsageError ? 2 : 1);
  },
);
