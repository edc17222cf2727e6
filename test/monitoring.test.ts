/**
 * The Prometheus alert rules (monitoring/alerts.yml) as Prometheus reads them: `promtool check rules` accepts the
 * file, and `promtool test rules` runs monitoring/alerts.test.yml, where each alert fires on the series that
 * should page and stays quiet on their healthy twin. promtool comes from Debian's prometheus package
 * (scripts/services.sh installs it).
 */
import { execFile } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { parse } from 'yaml';

const run = promisify(execFile);
const DIR = join(__dirname, '..', 'monitoring');

/** @returns promtool's exit code and output for `args` */
async function promtool(args: string[], cwd = DIR): Promise<{ code: number; out: string }> {
  try {
    const { stdout, stderr } = await run('promtool', args, { cwd, timeout: 60_000 });
    return { code: 0, out: stdout + stderr };
  } catch (err) {
    const { code, stdout = '', stderr = '' } = err as { code?: number; stdout?: string; stderr?: string };
    return { code: code ?? -1, out: stdout + stderr };
  }
}

test('promtool accepts the alert rules, and each has a runbook line in docs/operations.md', async () => {
  const checked = await promtool(['check', 'rules', 'alerts.yml']);
  expect(checked).toEqual({ code: 0, out: expect.stringContaining('SUCCESS') });
  const { groups } = parse(readFileSync(join(DIR, 'alerts.yml'), 'utf8')) as { groups: { rules: { alert: string }[] }[] };
  const operations = readFileSync(join(__dirname, '..', 'docs', 'operations.md'), 'utf8');
  for (const { alert } of groups.flatMap((g) => g.rules)) expect({ alert, runbook: operations.includes(`\`${alert}\``) }).toEqual({ alert, runbook: true });
});

test('promtool test rules: every alert fires when it should and not otherwise', async () => {
  const tested = await promtool(['test', 'rules', 'alerts.test.yml']);
  expect(tested).toEqual({ code: 0, out: expect.stringContaining('SUCCESS') });
});

test('the rules test catches a rule that would not page: a threshold raised past its series fails it', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'alerts-'));
  copyFileSync(join(DIR, 'alerts.test.yml'), join(dir, 'alerts.test.yml'));
  writeFileSync(join(dir, 'alerts.yml'), readFileSync(join(DIR, 'alerts.yml'), 'utf8').replace('flash_sale_start_queue_oldest_age_seconds) > 120', 'flash_sale_start_queue_oldest_age_seconds) > 100000'));
  const tested = await promtool(['test', 'rules', 'alerts.test.yml'], dir);
  expect(tested.code).not.toBe(0);
  expect(tested.out).toContain('FlashSaleStartQueueOld');
});
