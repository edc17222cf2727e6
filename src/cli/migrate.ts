/** `npm run migrate`: applies pending migrations from migrations/ (node-pg-migrate); safe to re-run. */
import { loadConfig } from '../config';
import { migrate } from '../infra/db';

migrate(loadConfig(), (msg) => console.log(msg)).catch((err) => {
  console.error(`migrate failed: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
