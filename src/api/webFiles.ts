/**
 * The service's own web pages (src/web/, served as files: no build step): a page per sale, the same HTML for
 * every sale (its script reads the id from the path), and its assets from a fixed list.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Context } from 'koa';
import { parseId } from '../order/ids';
import { reply } from './errors';

const WEB = join(__dirname, '..', 'web');

/** @returns a GET handler of `/…/{saleId}`: the HTML file with the headers, 400 INVALID_SALE_ID for a bad id */
export function pageHandler(file: string, headers: Record<string, string>) {
  const html = readFileSync(join(WEB, file), 'utf8');
  return function page(ctx: Context): void {
    if (parseId(ctx.params.saleId) === undefined) return reply(ctx, 'INVALID_SALE_ID');
    ctx.set(headers);
    ctx.type = 'text/html; charset=utf-8';
    ctx.body = html;
  };
}

/** @returns a GET handler of `/…/{file}`: one of the files (name → media type), read once; 404 NOT_FOUND for any other */
export function assetHandler(types: Record<string, string>, headers: Record<string, string>) {
  const files = new Map(Object.entries(types).map(([name, type]) => [name, { type, body: readFileSync(join(WEB, name), 'utf8') }]));
  return function asset(ctx: Context): void {
    const file = files.get(ctx.params.file);
    if (!file) return reply(ctx, 'NOT_FOUND');
    ctx.set(headers);
    ctx.type = file.type;
    ctx.body = file.body;
  };
}
