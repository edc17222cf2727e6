/**
 * docs/design.md's Layout against the tree: every folder it names exists, every file it names sits in its row's
 * folder (or at the root), and every folder of src/ has its row: a reader following the table finds each file where it says.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const ROOT = join(__dirname, '..', '..');
const design = readFileSync(join(ROOT, 'docs', 'design.md'), 'utf8');
const table = design.slice(design.indexOf('## Layout'), design.indexOf('The rooms import downwards'));
const rows = [...table.matchAll(/^\| (.+?) \| (.+) \|$/gm)].filter(([, first]) => first.startsWith('`'));
const ticked = (cell: string) => [...cell.matchAll(/`([^`]+)`/g)].map(([, text]) => text);

test('the table has its rows', () => {
  expect(rows.length).toBeGreaterThan(10);
});

test.each(rows.map(([, folders, what]) => [ticked(folders).join(', '), ticked(folders), ticked(what)]))('%s: its folders and files exist', (_name, folders, names) => {
  for (const folder of folders) expect([folder, existsSync(join(ROOT, folder))]).toEqual([folder, true]);
  for (const name of names.filter((n) => /^[\w.-]+(\.(ts|js|lua|sql)|\/)$/.test(n))) {
    const found = folders.some((folder) => existsSync(join(ROOT, folder, name))) || existsSync(join(ROOT, name));
    expect([name, found]).toEqual([name, true]);
  }
});

test('every folder of src/ has its row', () => {
  const listed = new Set(rows.flatMap(([, folders]) => ticked(folders)));
  const folders = readdirSync(join(ROOT, 'src'), { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => `src/${e.name}/`);
  expect(folders.filter((f) => !listed.has(f))).toEqual([]);
});
