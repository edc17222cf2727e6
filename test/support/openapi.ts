/**
 * OpenAPI conformance for the API tests. Loads openapi.yaml, finds the documented response for
 * (path template, method, status) and validates the body with Ajv's 2020 draft + ajv-formats (the whole
 * document is added as one schema with an $id, so every `#/components/...` $ref resolves) and documented
 * headers. `http(baseUrl)` wraps fetch so that every response a test receives is checked: a status, media type,
 * body or header the document does not describe throws, which fails the test that made the request.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import Ajv2020 from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import { parse } from 'yaml';

/** The document as parsed from the repository's openapi.yaml. */
export const openApiDocument = parse(readFileSync(join(__dirname, '..', '..', 'openapi.yaml'), 'utf8')) as Record<string, unknown>;

const DOC_ID = 'https://flash-sale.test/openapi.json';
const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

const ajv = new Ajv2020({ allErrors: true, strict: true, allowUnionTypes: true });
addFormats(ajv);
// OpenAPI's own keywords around the schemas; strict mode still rejects unknown keywords inside schemas.
ajv.addVocabulary(['openapi', 'info', 'servers', 'paths', 'components', 'security', 'tags', 'externalDocs', 'webhooks', 'jsonSchemaDialect', 'example']);
ajv.addSchema({ ...openApiDocument, $id: DOC_ID });

type Json = Record<string, unknown>;

/** Thrown when a response disagrees with openapi.yaml. */
export class ConformanceError extends Error {}

function escapePointer(segment: string): string {
  return segment.replace(/~/g, '~0').replace(/\//g, '~1');
}

function at(pointer: string): unknown {
  return pointer
    .split('/')
    .slice(1)
    .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'))
    .reduce<unknown>((node, key) => (node as Json | undefined)?.[key], openApiDocument);
}

/** Follows local $refs; @returns the pointer of the object finally reached */
function resolve(pointer: string): string {
  for (let hops = 0; hops < 10; hops++) {
    const node = at(pointer) as Json | undefined;
    if (!node || typeof node.$ref !== 'string') return pointer;
    if (!node.$ref.startsWith('#/')) throw new ConformanceError(`only local $refs are supported: ${node.$ref}`);
    pointer = node.$ref.slice(1);
  }
  throw new ConformanceError(`$ref loop at ${pointer}`);
}

interface Route {
  template: string;
  pattern: RegExp;
}

const routes: Route[] = Object.keys(openApiDocument.paths as Json).map((template) => ({
  template,
  pattern: new RegExp(`^${template.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\\?\{[^}]+\\?\}/g, '[^/]+')}$`),
}));

function validator(pointer: string) {
  const validate = ajv.getSchema(`${DOC_ID}#${pointer}`);
  if (!validate) throw new ConformanceError(`no schema at ${pointer}`);
  return validate;
}

// Compile every response schema up front, so a broken document fails on load rather than in one test.
for (const { template } of routes) {
  for (const method of METHODS) {
    const responses = at(`/paths/${escapePointer(template)}/${method}/responses`) as Json | undefined;
    for (const status of Object.keys(responses ?? {})) {
      const responsePointer = resolve(`/paths/${escapePointer(template)}/${method}/responses/${status}`);
      const content = (at(responsePointer) as Json).content as Json | undefined;
      for (const mediaType of Object.keys(content ?? {})) validator(`${responsePointer}/content/${escapePointer(mediaType)}/schema`);
    }
  }
}

export interface ObservedResponse {
  method: string;
  /** Request path, with or without a query string. */
  path: string;
  status: number;
  headers: Headers;
  /** Raw body text. */
  text: string;
}

/**
 * Checks a response against the document.
 * @returns the template of the matched path
 * @throws ConformanceError naming what disagrees
 */
export function validateResponse(response: ObservedResponse): string {
  const path = response.path.split('?')[0];
  const route = routes.find((r) => r.pattern.test(path));
  if (!route) throw new ConformanceError(`${path} matches no path of openapi.yaml`);
  const method = response.method.toLowerCase();
  const operationPointer = `/paths/${escapePointer(route.template)}/${method}`;
  if (!at(operationPointer)) throw new ConformanceError(`${method.toUpperCase()} ${route.template} is not documented`);
  const where = `${method.toUpperCase()} ${route.template} → ${response.status}`;
  const responses = at(`${operationPointer}/responses`) as Json;
  const statusKey = [String(response.status), `${String(response.status)[0]}XX`, 'default'].find((k) => k in responses);
  if (!statusKey) throw new ConformanceError(`${where}: status not documented (body ${response.text.slice(0, 200)})`);
  const responsePointer = resolve(`${operationPointer}/responses/${statusKey}`);
  const documented = at(responsePointer) as Json;

  for (const [name, header] of Object.entries((documented.headers ?? {}) as Json)) {
    const value = response.headers.get(name);
    const schemaPointer = `${resolve(`${responsePointer}/headers/${escapePointer(name)}`)}/schema`;
    if (value === null || !at(schemaPointer)) {
      if ((header as Json).required === true) throw new ConformanceError(`${where}: header ${name} missing`);
      continue;
    }
    const validate = validator(schemaPointer);
    let parsed: unknown = value;
    try {
      parsed = JSON.parse(value);
    } catch {
      // not JSON: validate the raw string
    }
    if (!validate(parsed)) throw new ConformanceError(`${where}: header ${name}=${value}: ${ajv.errorsText(validate.errors)}`);
  }

  const content = documented.content as Json | undefined;
  if (!content) {
    if (response.text.length > 0) throw new ConformanceError(`${where}: documented without a body, got ${response.text.slice(0, 200)}`);
    return route.template;
  }
  const mediaType = (response.headers.get('content-type') ?? '').split(';')[0].trim().toLowerCase();
  if (!(mediaType in content)) {
    throw new ConformanceError(`${where}: content-type ${mediaType || '(none)'} not documented (${Object.keys(content).join(', ')})`);
  }
  const validate = validator(`${responsePointer}/content/${escapePointer(mediaType)}/schema`);
  let body: unknown = response.text;
  if (mediaType === 'application/json' || mediaType.endsWith('+json')) {
    try {
      body = JSON.parse(response.text);
    } catch {
      throw new ConformanceError(`${where}: body is not JSON: ${response.text.slice(0, 200)}`);
    }
  }
  if (!validate(body)) throw new ConformanceError(`${where}: ${ajv.errorsText(validate.errors)} in ${response.text.slice(0, 500)}`);
  return route.template;
}

/** The JSON bodies the API answers with; fields absent from a given answer are undefined. */
export interface ApiBody {
  error?: string;
  orderId?: string;
  status?: string;
  paymentId?: string;
  saleId?: number;
  itemId?: number;
  priceMinor?: number;
  paymentDeadline?: string;
  details?: string[];
  checks?: Record<string, string>;
  items?: { itemId: number; productId: string; quantity: number; sold: number; priceMinor: number; stock: number | null }[];
  [key: string]: unknown;
}

export interface ApiReply {
  status: number;
  headers: Headers;
  /** Parsed JSON body ({} when the body is not JSON). */
  body: ApiBody;
  text: string;
}

export interface CallOptions {
  /** Sent as `Authorization: Bearer <token>`. */
  token?: string;
  /** JSON-encoded as the request body. */
  json?: unknown;
  /** Raw request body (sent as-is). */
  body?: string;
  headers?: Record<string, string>;
  /** The call fails (a TimeoutError) when no response came within this many ms. */
  timeoutMs?: number;
}

/**
 * A fetch wrapper for one API base URL that validates every response against openapi.yaml.
 * @returns call(method, path, options) → the status, headers and parsed body
 */
export function http(baseUrl: string) {
  return async function call(method: string, path: string, options: CallOptions = {}): Promise<ApiReply> {
    const headers: Record<string, string> = { ...options.headers };
    if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
    let body = options.body;
    if (options.json !== undefined) {
      body = JSON.stringify(options.json);
      headers['content-type'] ??= 'application/json';
    }
    const res = await fetch(`${baseUrl}${path}`, { method, headers, body, ...(options.timeoutMs !== undefined && { signal: AbortSignal.timeout(options.timeoutMs) }) });
    const text = await res.text();
    validateResponse({ method, path, status: res.status, headers: res.headers, text });
    let parsed: ApiBody = {};
    if ((res.headers.get('content-type') ?? '').includes('json')) parsed = JSON.parse(text) as ApiBody;
    return { status: res.status, headers: res.headers, body: parsed, text };
  };
}

export type Http = ReturnType<typeof http>;
