/**
 * Identifiers that reach us from outside (path segments, token subjects), and the parsers that keep them narrow.
 * Pure: safe to import from workflow code.
 */

/** Largest id of an INT4 identity column. */
export const MAX_INT4 = 2_147_483_647;

/**
 * Parses an item or sale id from a path segment: a positive decimal integer that fits INT4, nothing else
 * (no sign, exponent, hex, leading zeros or whitespace), so no request is ever rounded onto another item.
 * @returns the id, or undefined when the text is not one
 */
export function parseId(text: string): number | undefined {
  if (!/^[1-9][0-9]{0,9}$/.test(text)) return undefined;
  const id = Number(text);
  return id <= MAX_INT4 ? id : undefined;
}

/**
 * Buyer ids come from the JWT `sub` (I6). They are used in Redis values ('|'-separated) and search
 * attributes, so the alphabet is kept narrow.
 */
export const BUYER_ID = /^[A-Za-z0-9][A-Za-z0-9_.@:-]{0,127}$/;
