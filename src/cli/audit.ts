/**
 * `npm run audit [-- --sale N] [--json]`: audits a sale event (default: the newest) against docs/design.md's
 * invariants. Prints each check with its figures; exits 1 on any violation, 2 on bad arguments.
 */
import { parseArgs } from 'node:util';
import { auditSale, formatAudit, type AuditReport } from '../audit';
import { loadConfig } from '../config';
import { createPool } from '../infra/db';
import { parseId } from '../order/ids';
import { createKafka } from '../infra/kafka';
import { ReservationStore } from '../reservation/store';
import { createRedis } from '../reservation/client';
import { SaleLayouts } from '../reservation/layout';
import { connectTemporal } from '../workflows/client';

async function main(): Promise<AuditReport> {
  const { values } = parseArgs({ options: { sale: { type: 'string' }, json: { type: 'boolean', default: false } } });
  const config = loadConfig();
  const pool = createPool(config);
  const redis = createRedis(config);
  const temporal = await connectTemporal(config);
  try {
    let saleId = values.sale === undefined ? undefined : parseId(values.sale);
    if (values.sale !== undefined && saleId === undefined) {
      console.error(`--sale ${values.sale}: expected a positive integer`);
      process.exit(2);
    }
    saleId ??= (await pool.query<{ id: number }>('SELECT max(id) AS id FROM sale_events')).rows[0]?.id ?? undefined;
    if (!saleId) throw new Error('no sale to audit');
    const report = await auditSale(
      { pool, store: new ReservationStore(redis, new SaleLayouts(pool)), temporal, kafka: createKafka(config, 'flash-sale-audit'), topic: config.KAFKA_TOPIC },
      saleId,
    );
    console.log(values.json ? JSON.stringify(report, null, 2) : formatAudit(report));
    return report;
  } finally {
    await Promise.allSettled([pool.end(), redis.quit(), temporal.connection.close()]);
  }
}

main().then(
  (report) => process.exit(report.ok ? 0 : 1),
  (err) => {
    console.error(`audit failed: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  },
);
